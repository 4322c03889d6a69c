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
    output   = n_vocab x parallel x 4 host bytes at startup, one row per sequence (the context
               grows it later when a batch asks for more rows, e.g. a draft's verification; the
               H200 sweep's 8-slot n-gram launch logs 0.98 MiB = 32000 x 8 x 4)

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

Here: the buffer sizes, where they must fit, the checks and the plan. Beside it: llamacpp_gguf
(the GGUF header: GGUFModel, read_gguf) and llamacpp_config (llama-server's defaults: resolve,
the cache types); what callers use of them is importable from here too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from autotune.hardware.gpus import GPUSpec
from autotune.planner.common import (
    GIB,
    MIB,
    ContractAndWorking,
    Plan,
    host_ram_available_gib,
)
from autotune.planner.llamacpp_config import (
    CACHE_TYPE_BYTES,
    QUANT_BLOCK,
    QUANTIZED_CACHE_TYPES,
    Resolved,
    resolve,
)
from autotune.planner.llamacpp_gguf import GGUFModel, read_gguf
from autotune.planner.sglang import DEFAULT_RESERVE_MIB

__all__ = [
    "CACHE_TYPE_BYTES",
    "COMPUTE_EMBD",
    "COMPUTE_FF",
    "COMPUTE_MARGIN",
    "DEFAULT_VERSION",
    "GPU_MARGIN_MIB",
    "HOST_MARGIN_GIB",
    "Buffers",
    "GGUFModel",
    "LlamaPlan",
    "Placement",
    "Resolved",
    "compute_bytes",
    "kv_cell_bytes",
    "n_outputs_max",
    "output_bytes",
    "plan_llamacpp",
    "read_gguf",
    "resolve",
    "weights_split",
]

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


class LlamaContract(ContractAndWorking):
    """The Plan's contract and working figures in llama.cpp's terms, the KV types included."""

    kv_dtype: str


class LlamaFields(TypedDict):
    """LlamaPlan's own fields (past the Plan contract)."""

    compute_gib: float
    output_gib: float
    weights_device_gib: float
    weights_host_gib: float
    n_ctx: int
    kv_streams: int
    flash_attn: bool
    gpu_layers: int


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


@dataclass(frozen=True)
class Buffers:
    """What llama.cpp allocates for a launch, in bytes (the sum in the module docstring)."""

    kv_cell: int  # KV bytes per token, all attention layers
    kv_tokens: int  # cells x streams
    rs_conv: int  # one recurrent slot's R (conv) bytes
    rs_state: int  # one recurrent slot's S (state) bytes
    rs_slots: int
    compute: int
    output: int
    weights_device: int
    weights_host: int

    @property
    def kv_bytes(self) -> int:
        return self.kv_tokens * self.kv_cell

    @property
    def rs_bytes(self) -> int:
        return self.rs_slots * (self.rs_conv + self.rs_state)


@dataclass(frozen=True)
class Placement:
    """Where the buffers must fit: the memory there, the weights, KV and RS that live there, and
    what compute needs on top."""

    where: str  # the GPU's name, or "cpu"
    free_gib: float
    static_bytes: float  # weights + KV + RS there
    weights_bytes: int  # the weights there
    need_bytes: int  # compute (and output on the host) + a margin

    @property
    def slack_bytes(self) -> float:
        return self.free_gib * GIB - self.static_bytes


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
    b = _buffers(m, r)
    if gpu is not None:
        place = _on_gpu(gpu, gpu_free_gib, m, r, b, assumptions)
    else:
        place = _on_host(host_free_gib, b, assumptions)
    _check_config(cfg, m, r, reasons, assumptions)
    _check_fit(gpu, b, place, reasons)
    return LlamaPlan(
        fits=not reasons,
        reasons=reasons,
        engine="llamacpp",
        engine_version=version,
        model=m.name,
        gpu=place.where,
        tp=1,
        bound_by="user" if cfg.get("parallel") is not None else "default",
        assumptions=assumptions,
        **_plan_fields(cfg, m, r, b, place),
        **_llama_fields(r, b),
    )


def _buffers(m: GGUFModel, r: Resolved) -> Buffers:
    """The buffers of a launch resolved to `r`."""
    cell = kv_cell_bytes(m, r.type_k, r.type_v)
    kv_tokens = r.n_ctx_seq * r.streams
    conv_b, state_b = m.rs_slot_bytes()
    rs_slots = max(1, r.parallel) if m.hybrid else 0
    comp = compute_bytes(m, r)
    out = output_bytes(m, r)
    dev_w, host_w = weights_split(m, r.gpu_layers)
    return Buffers(cell, kv_tokens, conv_b, state_b, rs_slots, comp, out, dev_w, host_w)


def _on_gpu(
    gpu: GPUSpec,
    gpu_free_gib: float | None,
    m: GGUFModel,
    r: Resolved,
    b: Buffers,
    assumptions: list[str],
) -> Placement:
    """The GPU's share: offloaded layers' weights, KV and RS; compute and a margin on top."""
    if gpu_free_gib is not None:
        free = float(gpu_free_gib)
        assumptions.append(f"free GPU memory given: {free:.2f} GiB")
    else:
        reserve = DEFAULT_RESERVE_MIB + gpu.desktop_reserve_mib
        free = (gpu.memory_mib - reserve) / 1024
        assumptions.append(f"GPU memory = capacity {gpu.memory_mib} MiB - reserve {reserve} MiB")
    offloaded = r.gpu_layers / (m.n_layer + 1)
    # KV/RS of offloaded layers live on the GPU (offload_kqv), the rest on the host
    device_static = b.weights_device + (b.kv_bytes + b.rs_bytes) * min(1.0, offloaded)
    need = b.compute + GPU_MARGIN_MIB * MIB
    return Placement(gpu.name, free, device_static, b.weights_device, need)


def _on_host(host_free_gib: float | None, b: Buffers, assumptions: list[str]) -> Placement:
    """A CPU run: every buffer in host RAM, compute, output and a margin on top."""
    free = float(host_ram_available_gib(host_free_gib, assumptions))
    device_static = b.weights_host + b.kv_bytes + b.rs_bytes
    need = b.compute + b.output + int(HOST_MARGIN_GIB * GIB)
    return Placement("cpu", free, device_static, b.weights_host, need)


def _check_config(
    cfg: dict[str, Any],
    m: GGUFModel,
    r: Resolved,
    reasons: list[str],
    assumptions: list[str],
) -> None:
    """What llama.cpp refuses for this model: no context per slot, a quantized cache without
    flash attention or with blocks that do not divide the head size, a draft type without a
    draft model."""
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


def _check_fit(gpu: GPUSpec | None, b: Buffers, place: Placement, reasons: list[str]) -> None:
    """Less slack than compute needs is a reason."""
    need = place.need_bytes
    if place.slack_bytes < need:
        reasons.append(
            f"does not fit {'GPU ' + gpu.name if gpu else 'host RAM'}: weights "
            f"{place.weights_bytes / GIB:.2f} GiB + KV {b.kv_bytes / GIB:.2f} GiB + RS "
            f"{b.rs_bytes / GIB:.2f} GiB + compute/output {need / GIB:.2f} GiB > "
            f"{place.free_gib:.2f} GiB; lower ctx_size, parallel or the KV cache types"
        )


def _plan_fields(
    cfg: dict[str, Any], m: GGUFModel, r: Resolved, b: Buffers, place: Placement
) -> LlamaContract:
    """The Plan contract's figures in llama.cpp's terms (the mapping in the module docstring)."""
    conv_b, state_b, rs_slots = b.rs_conv, b.rs_state, b.rs_slots
    return LlamaContract(
        # every model buffer: a tied output offloaded is a second copy of the embedding
        # (llama.cpp loads it TENSOR_DUPLICATED), so this exceeds the file's tensor bytes
        weights_gib=round((b.weights_device + b.weights_host) / GIB, 6),
        kv_cell_bytes=b.kv_cell,
        kv_pool_tokens=b.kv_tokens,
        mamba_slots=rs_slots,
        mamba_pool_gib=round(b.rs_bytes / GIB, 6),
        max_running_requests=r.parallel,
        kv_dtype=r.type_k if r.type_k == r.type_v else f"{r.type_k}/{r.type_v}",
        pre_weights_free_gib=round(place.free_gib, 3),
        mem_fraction_static=1.0,
        static_budget_gib=round(place.free_gib - place.weights_bytes / GIB, 3),
        kv_pool_gib=round(b.kv_bytes / GIB, 6),
        mamba_conv_gib=round(rs_slots * conv_b / GIB, 6),
        mamba_ssm_gib=round(rs_slots * state_b / GIB, 6),
        mamba_spec_gib=0.0,
        mamba_slot_mib=round((conv_b + state_b) / MIB, 4),
        slack_gib=round(place.slack_bytes / GIB, 3),
        slack_needed_gib=round(place.need_bytes / GIB, 3),
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
    )


def _llama_fields(r: Resolved, b: Buffers) -> LlamaFields:
    """LlamaPlan's own figures."""
    return LlamaFields(
        compute_gib=round(b.compute / GIB, 6),
        output_gib=round(b.output / GIB, 6),
        weights_device_gib=round(b.weights_device / GIB, 6),
        weights_host_gib=round(b.weights_host / GIB, 6),
        n_ctx=r.n_ctx,
        kv_streams=r.streams,
        flash_attn=r.flash_attn,
        gpu_layers=r.gpu_layers,
    )
