"""Predict what a llama-server launch allocates, and whether it fits (llama.cpp 0.3.30+ rules;
0.3.16 where noted).

llama.cpp allocates every buffer at its exact size up front (no memory fraction, no pool that
grows into free memory), so the plan is a sum:

    weights  = the GGUF's tensor bytes (split between GPU and host by n_gpu_layers)
    kv       = streams x cells x attention layers x n_head_kv x (hd_k x b(type_k) + hd_v x b(type_v))
               cells = n_ctx_seq, streams = 1 if kv_unified else parallel;
               n_ctx = pad(ctx_size or n_ctx_train, 256); n_ctx_seq = n_ctx if unified else
               pad(n_ctx / parallel, 256)                          (src/llama-context.cpp)
    rs       = slots x recurrent layers x 4 x ((d_conv-1)(d_inner + 2 n_group d_state)
               + d_state d_inner)      hybrid (qwen35) models only (src/llama-memory-recurrent)
    compute  = the worst-case graph's activations: an estimate from ubatch, n_ctx and the model's
               widths, calibrated against logged `compute buffer size` lines (COMPUTE_* below)
    output   = n_vocab x n_outputs_max x 4 host bytes, n_outputs_max = min(batch,
               parallel x (1 + draft tokens))                   (tools/server/server-context)

and it fits when weights + kv + rs + compute fit the device (GPU capacity - reserve, or the host's
available RAM for a CPU run).

The result is the same `Plan` model the SGLang planner returns, so a sweep treats both alike.
Field mapping (Plan name: llama.cpp meaning):
    weights_gib: every model buffer (host + device); kv_cell_bytes: KV bytes per token (all
    attention layers); kv_pool_tokens: cells x streams; mamba_slots / mamba_pool_gib /
    mamba_conv_gib / mamba_ssm_gib: recurrent-state slots and their R (conv) and S (state) bytes;
    max_running_requests: parallel (slots); context_len: n_ctx_seq (the context of one slot);
    pre_weights_free_gib: the memory the buffers must fit in; mem_fraction_static: 1.0 (no such
    knob: every buffer is exact); static_budget_gib: that memory minus weights; slack_gib: what
    is left after weights, KV and RS; slack_needed_gib: compute + output buffers + a margin;
    chunked_prefill_size: ubatch_size (the physical batch); cuda_graph_max_bs: 0 (llama.cpp
    captures CUDA graphs itself); radix_cache: prompt-cache reuse on (cache_reuse > 0);
    mixed_chunk: continuous batching; mamba_strategy: "per_slot" for hybrids, else "none".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError, ModelLoadError
from autotune.hardware.gpus import GPUSpec
from autotune.planner.sglang import DEFAULT_RESERVE_MIB, GIB, MIB, Plan

# Bytes per element of the KV cache types (ggml block sizes: q8_0 34 B / 32, q4_0 18 B / 32, ...).
CACHE_TYPE_BYTES: dict[str, float] = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,
    "q4_1": 20 / 32,
    "iq4_nl": 18 / 32,
    "q5_0": 22 / 32,
    "q5_1": 24 / 32,
}
QUANTIZED_CACHE_TYPES = frozenset(CACHE_TYPE_BYTES) - {"f32", "f16", "bf16"}
QUANT_BLOCK = 32  # values per block of every quantized cache type; must divide the head size
PAD = 256  # llama_context pads n_ctx and n_ctx_seq to 256 cells

# Compute buffer (the worst-case graph, activations only): llama.cpp's allocator reuses memory
# between graph stages, so the buffer is the largest stage, not a sum. Fitted to the CPU
# `compute buffer size` lines of 0.3.36 (25 configurations of four model shapes, 2M to 1B
# parameters, tests/planner/test_llamacpp.py CALIBRATION; the estimate is 0 to 8 % above each):
#   attention/FFN stage: KQ mask (n_ctx_seq x ubatch, f16 with flash attention, f32 without)
#       + with flash attention: 4 B x ubatch x (2 n_embd + 3.6 n_ff [+ conv_dim + d_inner])
#       + without: f32 scores n_ctx_seq x ubatch x n_head + 4 B x ubatch x (2 q + 2 kv + 2 n_embd)
#   output stage: logits of min(ubatch, n_outputs_max) rows x n_vocab + the final norm
COMPUTE_EMBD, COMPUTE_FF = 2.0, 3.6
COMPUTE_MARGIN = 1.04
# Kept free on top of the sum: allocator rounding, the HTTP server, the tokenizer, threads.
HOST_MARGIN_GIB = 1.0
GPU_MARGIN_MIB = 256

DEFAULT_VERSION = "0.3.36"


class LlamaPlan(Plan):
    """A Plan (see the mapping above) plus llama.cpp's own buffer breakdown."""

    engine: str = "llamacpp"
    compute_gib: float
    output_gib: float
    weights_device_gib: float
    weights_host_gib: float
    n_ctx: int
    kv_streams: int
    flash_attn: bool
    gpu_layers: int


@dataclass(frozen=True)
class GGUFModel:
    """What the planner needs from a GGUF header (read with the `gguf` package)."""

    path: str
    name: str
    arch: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    n_vocab: int
    n_ctx_train: int
    recurrent: tuple[bool, ...]
    ssm_d_conv: int = 0
    ssm_d_inner: int = 0
    ssm_d_state: int = 0
    ssm_n_group: int = 0
    tensor_bytes: int = 0
    token_embd_bytes: int = 0
    output_bytes: int = 0  # 0 when the output shares token_embd (tied)
    layer_bytes: tuple[int, ...] = field(default_factory=tuple)

    @property
    def attention_layers(self) -> int:
        return sum(1 for r in self.recurrent if not r)

    @property
    def recurrent_layers(self) -> int:
        return sum(1 for r in self.recurrent if r)

    @property
    def hybrid(self) -> bool:
        return self.recurrent_layers > 0

    def rs_slot_bytes(self) -> tuple[int, int]:
        """(R = conv, S = state) bytes of one recurrent slot over all recurrent layers (f32)."""
        if not self.hybrid:
            return 0, 0
        conv = max(self.ssm_d_conv - 1, 0) * (
            self.ssm_d_inner + 2 * self.ssm_n_group * self.ssm_d_state
        )
        state = self.ssm_d_state * self.ssm_d_inner
        return 4 * conv * self.recurrent_layers, 4 * state * self.recurrent_layers


@functools.lru_cache(maxsize=32)
def _read_cached(path: str, mtime_ns: int, size: int) -> GGUFModel:
    from autotune.engines.llamacpp.gguf_file import read_header

    header = read_header(path)
    arch = str(header.get("general.architecture", ""))
    if not arch:
        raise ModelLoadError(f"{path}: no general.architecture key")

    def key(name: str, default: Any = None) -> Any:
        return header.get(f"{arch}.{name}", default)

    n_layer = int(key("block_count", 0))
    n_embd = int(key("embedding_length", 0))
    n_head = _first(key("attention.head_count", 0))
    if not (n_layer and n_embd and n_head):
        raise ModelLoadError(f"{path}: missing block_count / embedding_length / head_count")
    n_head_kv = _first(key("attention.head_count_kv", n_head))
    hd_k = int(key("attention.key_length", n_embd // n_head))
    hd_v = int(key("attention.value_length", hd_k))
    tokens = header.get("tokenizer.ggml.tokens")
    n_vocab = int(key("vocab_size", len(tokens) if tokens is not None else 0))
    recurrent = _recurrent_layers(arch, n_layer, key)
    embd = output = 0
    layers = [0] * n_layer
    total = 0
    for t in header.tensors:
        nbytes = int(t.n_bytes)
        total += nbytes
        if t.name == "token_embd.weight":
            embd = nbytes
        elif t.name == "output.weight":
            output = nbytes
        elif t.name.startswith("blk."):
            idx = int(t.name.split(".")[1])
            if idx < n_layer:
                layers[idx] += nbytes
    return GGUFModel(
        path=path,
        name=str(header.get("general.name", Path(path).stem)),
        arch=arch,
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=_first(key("feed_forward_length", 4 * n_embd)),
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=hd_k,
        head_dim_v=hd_v,
        n_vocab=n_vocab,
        n_ctx_train=int(key("context_length", 4096)),
        recurrent=tuple(recurrent),
        ssm_d_conv=int(key("ssm.conv_kernel", 0)),
        ssm_d_inner=int(key("ssm.inner_size", 0)),
        ssm_d_state=int(key("ssm.state_size", 0)),
        ssm_n_group=int(key("ssm.group_count", 0)),
        tensor_bytes=total,
        token_embd_bytes=embd,
        output_bytes=output,
        layer_bytes=tuple(layers),
    )


def _first(value: Any) -> int:
    """A per-layer array key (some GGUFs store head counts per layer): its maximum."""
    if isinstance(value, list | tuple):
        return int(max(value)) if value else 0
    return int(value)


def _recurrent_layers(arch: str, n_layer: int, key: Any) -> list[bool]:
    explicit = key("attention.recurrent_layers")
    if isinstance(explicit, list | tuple) and explicit:
        return [bool(x) for x in explicit[:n_layer]]
    if arch in ("qwen35", "qwen35moe", "qwen3next"):
        interval = int(key("full_attention_interval", 4))
        return [(i + 1) % interval != 0 for i in range(n_layer)]
    return [False] * n_layer


def read_gguf(path: str | Path) -> GGUFModel:
    """The planner's view of a GGUF model (header and tensor table only; cached by mtime)."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise ModelLoadError(f"{p}: cannot read the model file ({exc})") from None
    return _read_cached(str(p.resolve()), st.st_mtime_ns, st.st_size)


# ---------------------------------------------------------------------------------------------
# Config resolution


@dataclass(frozen=True)
class Resolved:
    parallel: int
    kv_unified: bool
    n_ctx: int
    n_ctx_seq: int
    streams: int
    batch: int
    ubatch: int
    type_k: str
    type_v: str
    flash_attn: bool
    gpu_layers: int  # layers (of n_layer + 1 with the output) on the GPU; 0 on CPU
    spec_type: str | None
    draft_tokens: int
    cache_reuse: int
    cont_batching: bool
    notes: tuple[str, ...]


def _pad(n: int) -> int:
    return -(-n // PAD) * PAD


def _cache_type(cfg: dict[str, Any], name: str) -> str:
    value = cfg.get(name)
    if value is None:
        return "f16"
    if value not in CACHE_TYPE_BYTES:
        raise ConfigError(
            f"unknown KV cache type {value!r}; valid: {', '.join(CACHE_TYPE_BYTES)}", field=name
        )
    return str(value)


def resolve(cfg: dict[str, Any], model: GGUFModel, version: str, *, gpu: bool) -> Resolved:
    """Fill in llama-server's defaults for the fields a config leaves unset."""
    from autotune.engines.llamacpp.flags import version_index

    new = version_index(version) >= version_index("0.3.30")
    notes: list[str] = []
    parallel = cfg.get("parallel")
    kv_unified = cfg.get("kv_unified")
    if parallel is None or parallel < 0:
        if new:
            parallel, kv_unified = 4, True if kv_unified is None else kv_unified
            notes.append("parallel not set: llama-server uses 4 slots with a unified KV cache")
        else:
            parallel = 1
    kv_unified = bool(kv_unified)
    ctx = cfg.get("ctx_size")
    if not ctx:
        if new:
            ctx = model.n_ctx_train
            notes.append(f"ctx_size not set: the model's training context {ctx}")
        else:
            ctx = 4096
    n_ctx = _pad(int(ctx))
    if kv_unified:
        n_ctx_seq, streams = n_ctx, 1
    else:
        n_ctx_seq = _pad(n_ctx // parallel) if n_ctx // parallel else 0
        streams = parallel
        n_ctx = n_ctx_seq * parallel
    # llama_context: n_batch = min(n_ctx before padding, batch), n_ubatch = min(n_batch, ubatch)
    batch = min(int(cfg.get("batch_size") or 2048), int(ctx))
    ubatch = min(int(cfg.get("ubatch_size") or 512), batch)
    fa_value = cfg.get("flash_attn")
    fa_word = (
        {True: "on", False: "off"}.get(fa_value, fa_value)
        if isinstance(fa_value, bool)
        else fa_value
    )
    if fa_word in (None, "auto"):
        flash_attn = new  # auto: on where the backend supports it (CPU and CUDA do); 0.3.16: off
    else:
        flash_attn = fa_word == "on"
    ngl = cfg.get("n_gpu_layers", cfg.get("gpu_layers"))
    total_layers = model.n_layer + 1
    if not gpu:
        gpu_layers = 0
    elif ngl in (None, "auto", "all", -1, -2) or (isinstance(ngl, int) and ngl >= total_layers):
        gpu_layers = total_layers
        if ngl in (None, "auto", -1):
            notes.append("n_gpu_layers auto: assumed every layer fits on the GPU")
    else:
        gpu_layers = max(int(ngl), 0)
    spec = cfg.get("spec_type")
    spec = None if spec in (None, "none") else str(spec)
    draft = 0
    if spec is not None:
        per_type = {
            "ngram-simple": int(cfg.get("spec_ngram_simple_size_m") or 48),
            "ngram-map-k": int(cfg.get("spec_ngram_map_k_size_m") or 48),
            "ngram-map-k4v": int(cfg.get("spec_ngram_map_k4v_size_m") or 48),
            "ngram-mod": int(cfg.get("spec_ngram_mod_n_max") or 64),
            "ngram-cache": 8,
        }
        draft = max(
            per_type.get(t, int(cfg.get("spec_draft_n_max") or 3)) for t in spec.split(",")
        )
    elif cfg.get("spec_draft_model"):
        spec, draft = "draft-simple", int(cfg.get("spec_draft_n_max") or 16)
    return Resolved(
        parallel=int(parallel),
        kv_unified=kv_unified,
        n_ctx=n_ctx,
        n_ctx_seq=n_ctx_seq,
        streams=streams,
        batch=batch,
        ubatch=ubatch,
        type_k=_cache_type(cfg, "cache_type_k"),
        type_v=_cache_type(cfg, "cache_type_v"),
        flash_attn=flash_attn,
        gpu_layers=gpu_layers,
        spec_type=spec,
        draft_tokens=draft,
        cache_reuse=int(cfg.get("cache_reuse") or 0),
        cont_batching=cfg.get("cont_batching") is not False,
        notes=tuple(notes),
    )


# ---------------------------------------------------------------------------------------------
# Sizes


def kv_cell_bytes(model: GGUFModel, type_k: str, type_v: str) -> int:
    """KV bytes per token over all attention layers."""
    per_layer = model.n_head_kv * (
        model.head_dim_k * CACHE_TYPE_BYTES[type_k] + model.head_dim_v * CACHE_TYPE_BYTES[type_v]
    )
    return int(per_layer * model.attention_layers)


def n_outputs_max(r: Resolved) -> int:
    """Rows of logits per decode: parallel x (1 + drafted tokens), at most batch
    (server_output_limits in tools/server/server-context.cpp)."""
    return max(1, min(r.batch, r.parallel * (1 + r.draft_tokens)))


def compute_bytes(model: GGUFModel, r: Resolved) -> int:
    """Estimated compute buffer of the worst-case graph (see COMPUTE_MARGIN's comment)."""
    tokens = r.ubatch
    cells = r.n_ctx_seq * tokens  # KQ mask elements (the streams split the ubatch)
    q_dim = model.n_head * model.head_dim_k
    kv_dim = model.n_head_kv * (model.head_dim_k + model.head_dim_v) // 2
    ffn = COMPUTE_EMBD * model.n_embd + COMPUTE_FF * model.n_ff
    if model.hybrid:
        conv_dim = model.ssm_d_inner + 2 * model.ssm_n_group * model.ssm_d_state
        ffn += conv_dim + model.ssm_d_inner
    if r.flash_attn:
        layers = 2 * cells + 4 * tokens * ffn
    else:
        attn = 4 * cells * model.n_head + 4 * tokens * (2 * q_dim + 2 * kv_dim + 2 * model.n_embd)
        layers = 4 * cells + max(attn, 4 * tokens * ffn)
    outputs = 4 * (min(tokens, n_outputs_max(r)) * model.n_vocab + tokens * model.n_embd)
    return int(COMPUTE_MARGIN * max(layers, outputs))


def output_bytes(model: GGUFModel, r: Resolved) -> int:
    """The host logits buffer: one row per sequence (it grows later if drafts need more)."""
    return 4 * model.n_vocab * max(1, r.parallel)


def weights_split(model: GGUFModel, gpu_layers: int) -> tuple[int, int]:
    """(device, host) weight bytes for `gpu_layers` of n_layer + 1 (the output layer is the
    last one offloaded; the token embedding always stays on the host)."""
    if gpu_layers <= 0:
        return 0, model.tensor_bytes
    n = model.n_layer
    on_gpu_blocks = min(gpu_layers, n)
    device = sum(model.layer_bytes[n - on_gpu_blocks :])
    if gpu_layers > n:  # the output layer too (a tied output is duplicated onto the device)
        device += model.output_bytes or model.token_embd_bytes
    host = model.tensor_bytes - device
    if gpu_layers > n and not model.output_bytes:
        host = model.tensor_bytes - device + model.token_embd_bytes  # the embedding stays too
    return device, host


def plan_llamacpp(
    model: GGUFModel | str | Path,
    config: dict[str, Any] | None = None,
    *,
    version: str = DEFAULT_VERSION,
    gpu: GPUSpec | None = None,
    gpu_free_gib: float | None = None,
    host_free_gib: float | None = None,
) -> LlamaPlan:
    """Plan one llama-server launch of a GGUF model; `gpu` None plans a CPU-only run.

    `config` holds llama-server field names (autotune.engines.llamacpp); missing keys mean
    "engine decides". Raises ModelLoadError for an unreadable GGUF, ConfigError for bad values.
    """
    m = model if isinstance(model, GGUFModel) else read_gguf(model)
    cfg = dict(config or {})
    r = resolve(cfg, m, version, gpu=gpu is not None)
    assumptions = list(r.notes)
    reasons: list[str] = []

    cell = kv_cell_bytes(m, r.type_k, r.type_v)
    kv_tokens = r.n_ctx_seq * r.streams
    kv_bytes = kv_tokens * cell
    conv_b, state_b = m.rs_slot_bytes()
    rs_slots = max(1, r.parallel) if m.hybrid else 0
    rs_bytes = rs_slots * (conv_b + state_b)
    comp = compute_bytes(m, r)
    out = output_bytes(m, r)
    dev_w, host_w = weights_split(m, r.gpu_layers)

    if gpu is not None:
        if gpu_free_gib is not None:
            free = float(gpu_free_gib)
            assumptions.append(f"free GPU memory given: {free:.2f} GiB")
        else:
            reserve = DEFAULT_RESERVE_MIB + gpu.desktop_reserve_mib
            free = (gpu.memory_mib - reserve) / 1024
            assumptions.append(
                f"GPU memory = capacity {gpu.memory_mib} MiB - reserve {reserve} MiB"
            )
        offloaded = r.gpu_layers / (m.n_layer + 1)
        # KV/RS of offloaded layers live on the GPU (offload_kqv), the rest on the host
        device_static = dev_w + (kv_bytes + rs_bytes) * min(1.0, offloaded)
        weights_on_device = dev_w
        need = comp + GPU_MARGIN_MIB * MIB
        where = gpu.name
    else:
        if host_free_gib is None:
            import psutil

            host_free_gib = psutil.virtual_memory().available / GIB
            assumptions.append(
                f"host RAM available read from this machine: {host_free_gib:.1f} GiB"
            )
        free = float(host_free_gib)
        device_static = host_w + kv_bytes + rs_bytes
        weights_on_device = host_w
        need = comp + out + int(HOST_MARGIN_GIB * GIB)
        where = "cpu"
    slack = free * GIB - device_static

    if r.n_ctx_seq <= 0:
        reasons.append(
            f"ctx_size {cfg.get('ctx_size')} split over {r.parallel} slots leaves no context "
            "per slot: raise ctx_size or lower parallel"
        )
    if r.n_ctx_seq > m.n_ctx_train:
        assumptions.append(
            f"context per slot {r.n_ctx_seq} exceeds the model's training context "
            f"{m.n_ctx_train} (llama-server caps the slot to it)"
        )
    if r.type_v in QUANTIZED_CACHE_TYPES and not r.flash_attn:
        reasons.append(
            f"cache_type_v={r.type_v} (quantized) requires flash attention; flash_attn is off "
            "(llama.cpp: 'quantized V cache requires flash_attn to be enabled')"
        )
    for name, ctype, dim in (("k", r.type_k, m.head_dim_k), ("v", r.type_v, m.head_dim_v)):
        if ctype in QUANTIZED_CACHE_TYPES and dim % QUANT_BLOCK:
            reasons.append(
                f"cache_type_{name}={ctype} stores blocks of {QUANT_BLOCK} values, which do not "
                f"divide the model's head size {dim}; use f16 or bf16"
            )
    if r.spec_type and r.spec_type.startswith("draft") and not cfg.get("spec_draft_model"):
        reasons.append(f"spec_type={r.spec_type} needs a draft model (spec_draft_model)")
    if slack < need:
        reasons.append(
            f"does not fit {'GPU ' + gpu.name if gpu else 'host RAM'}: weights "
            f"{weights_on_device / GIB:.2f} GiB + KV {kv_bytes / GIB:.2f} GiB + RS "
            f"{rs_bytes / GIB:.2f} GiB + compute/output {need / GIB:.2f} GiB > "
            f"{free:.2f} GiB; lower ctx_size, parallel or the KV cache types"
        )

    return LlamaPlan(
        weights_gib=round(m.tensor_bytes / GIB, 6),
        kv_cell_bytes=cell,
        kv_pool_tokens=kv_tokens,
        mamba_slots=rs_slots,
        mamba_pool_gib=round(rs_bytes / GIB, 6),
        max_running_requests=r.parallel,
        fits=not reasons,
        reasons=reasons,
        engine="llamacpp",
        engine_version=version,
        model=m.name,
        gpu=where,
        tp=1,
        kv_dtype=r.type_k if r.type_k == r.type_v else f"{r.type_k}/{r.type_v}",
        pre_weights_free_gib=round(free, 3),
        mem_fraction_static=1.0,
        static_budget_gib=round(free - weights_on_device / GIB, 3),
        kv_pool_gib=round(kv_bytes / GIB, 6),
        mamba_conv_gib=round(rs_slots * conv_b / GIB, 6),
        mamba_ssm_gib=round(rs_slots * state_b / GIB, 6),
        mamba_spec_gib=0.0,
        mamba_slot_mib=round((conv_b + state_b) / MIB, 4),
        slack_gib=round(slack / GIB, 3),
        slack_needed_gib=round(need / GIB, 3),
        chunked_prefill_size=r.ubatch,
        cuda_graph_max_bs=0,
        context_len=r.n_ctx_seq,
        mamba_strategy="per_slot" if m.hybrid else "none",
        slots_per_request=1 if m.hybrid else 0,
        radix_cache=r.cache_reuse > 0,
        overlap_schedule=False,
        mixed_chunk=r.cont_batching,
        speculative={
            "type": r.spec_type,
            "draft_tokens": r.draft_tokens,
            "draft_n_min": cfg.get("spec_draft_n_min"),
            "draft_model": cfg.get("spec_draft_model"),
        },
        bound_by="user" if cfg.get("parallel") is not None else "default",
        assumptions=assumptions,
        compute_gib=round(comp / GIB, 6),
        output_gib=round(out / GIB, 6),
        weights_device_gib=round(dev_w / GIB, 6),
        weights_host_gib=round(host_w / GIB, 6),
        n_ctx=r.n_ctx,
        kv_streams=r.streams,
        flash_attn=r.flash_attn,
        gpu_layers=r.gpu_layers,
    )
