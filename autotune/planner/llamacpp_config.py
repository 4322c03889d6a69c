"""llama-server's defaults for the fields a config leaves unset (llama.cpp 0.3.30+ rules; 0.3.16
where noted), and the KV cache types it accepts: slots, context cells and streams, batch sizes,
cache types, flash attention, GPU layers, speculative drafts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.errors import ConfigError
from autotune.planner.llamacpp_gguf import GGUFModel

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
    parallel, kv_unified = _slots(cfg, new, notes)
    ctx = cfg.get("ctx_size")
    if not ctx:
        if new:
            ctx = model.n_ctx_train
            notes.append(f"ctx_size not set: the model's training context {ctx}")
        else:
            ctx = 4096
    n_ctx, n_ctx_seq, streams = _context_cells(int(ctx), parallel, kv_unified)
    # llama_context: n_batch = min(n_ctx before padding, batch), n_ubatch = min(n_batch, ubatch)
    batch = min(int(cfg.get("batch_size") or 2048), int(ctx))
    ubatch = min(int(cfg.get("ubatch_size") or 512), batch)
    flash_attn = _flash_attn(cfg, new)
    gpu_layers = _gpu_layers(cfg, model, gpu, notes)
    spec, draft = _speculative(cfg)
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


def _slots(cfg: dict[str, Any], new: bool, notes: list[str]) -> tuple[Any, bool]:
    """(parallel, kv_unified): 0.3.30+ defaults to 4 slots sharing one unified KV cache."""
    parallel = cfg.get("parallel")
    kv_unified = cfg.get("kv_unified")
    if parallel is None or parallel < 0:
        if new:
            parallel, kv_unified = 4, True if kv_unified is None else kv_unified
            notes.append("parallel not set: llama-server uses 4 slots with a unified KV cache")
        else:
            parallel = 1
    return parallel, bool(kv_unified)


def _context_cells(ctx: int, parallel: Any, kv_unified: bool) -> tuple[int, int, int]:
    """(n_ctx, n_ctx_seq, streams) for a ctx_size: one stream of every cell when unified, else
    one stream of a padded share per slot (autotune.planner.llamacpp's docstring)."""
    n_ctx = _pad(ctx)
    if kv_unified:
        n_ctx_seq, streams = n_ctx, 1
    else:
        n_ctx_seq = _pad(n_ctx // parallel) if n_ctx // parallel else 0
        streams = parallel
        n_ctx = n_ctx_seq * parallel
    return n_ctx, n_ctx_seq, streams


def _flash_attn(cfg: dict[str, Any], new: bool) -> bool:
    """flash_attn on/off/auto (or a bool) as a bool."""
    fa_value = cfg.get("flash_attn")
    fa_word = (
        {True: "on", False: "off"}.get(fa_value, fa_value)
        if isinstance(fa_value, bool)
        else fa_value
    )
    if fa_word in (None, "auto"):
        return new  # auto: on where the backend supports it (CPU and CUDA do); 0.3.16: off
    return bool(fa_word == "on")


def _gpu_layers(cfg: dict[str, Any], model: GGUFModel, gpu: bool, notes: list[str]) -> int:
    """Layers (of n_layer + 1 with the output) on the GPU; 0 without one."""
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
    return gpu_layers


def _speculative(cfg: dict[str, Any]) -> tuple[str | None, int]:
    """(spec_type, draft tokens per step): the largest draft of the listed types."""
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
    return spec, draft
