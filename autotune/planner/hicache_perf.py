"""What a HiCache load-back (host -> device) costs the forward that needs it, as SGLang 0.5.17 does
it (read from the release's wheel):

- The prefix is matched only up to the deepest node holding a mamba state; a hybrid model stores
  one at every chunked-prefill boundary (MambaComponent.prepare_for_caching_req, no_buffer), so a
  repeated 17.9K prompt reuses 16,384 tokens with 2048-token chunks (FIELD-NOTES P12, C3).
- The load is queued in the same scheduler round that admits the request (PrefillAdder calls
  init_load_back, get_new_batch_prefill then ready_to_load_host_cache -> start_loading): no extra
  round. start_loading launches every copy on a load stream, one transfer layer at a time (all
  layers, full attention and mamba alike, for a hybrid), recording an event after each; the
  forward waits for layer i's event only when it reaches layer i (LayerDoneCounter.wait_until in
  get_key_buffer and mamba2_layer_index). So the copy overlaps the forward, and the forward loses
  only the time a layer's copy is still running when its compute could start.
- The defaults are io backend `kernel` and layout `page_first` (server_args): the KV is gathered
  per token by the JIT hicache kernel (one launch per full-attention layer for K and V), a mamba
  state per layer by the JIT transfer_mamba kernel (one launch for the SSM state, one for the conv
  window).
- A mamba state found on the host only is copied twice: into a device slot for the tree node and
  into the request's own slot (MambaComponent.build_hicache_transfers, LOAD_BACK).

Bandwidth: the copies are GPU-initiated reads of pinned host memory (two 1024-thread blocks per KV
copy, one per mamba copy), priced at the card's PCIe bandwidth as the other host traffic is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.models.card import ModelCard

# server_args.py defaults (0.5.17); _resolve_layout_io_compatibility keeps the pair.
DEFAULT_IO_BACKEND = "kernel"
DEFAULT_MEM_LAYOUT = "page_first"
# UnifiedRadixCache.init_hicache: a KV load below this many tokens with no state to load is not
# done (the tokens are prefilled again).
LOAD_BACK_THRESHOLD = 10
# MambaComponent.build_hicache_transfers (LOAD_BACK): node restore + the request's copy.
HOST_STATE_COPIES = 2
# JIT transfer_mamba launches per mamba layer and copy: the SSM state and the one conv window
# (Mamba2StateShape.create gives a single conv shape).
MAMBA_LAUNCHES_PER_COPY = 2
# MODELLED (not fitted): CPU time to launch one copy kernel from the scheduler thread, the ~5 us
# per launch that perf.EAGER_LAYER_S prices. start_loading launches them all before the forward.
LAUNCH_S = 5e-6


def repeat_prefix(prompt_len: int, chunk: int) -> int:
    """Tokens a hybrid (no_buffer) reuses when the same prompt comes again: the deepest chunk
    boundary holding a mamba state that the match may reach (Req._compute_max_prefix_len leaves
    the last token to compute). The state at the end of the first run sits after its output,
    past the repeat's key."""
    if chunk <= 0:
        return 0
    return (prompt_len - 1) // chunk * chunk


@dataclass(frozen=True)
class LoadBack:
    """One load-back: the bytes each transfer layer copies and the kernels it launches, in the
    order the load stream runs them."""

    layer_bytes: tuple[float, ...]
    layer_launches: tuple[int, ...]

    @property
    def total_bytes(self) -> float:
        return sum(self.layer_bytes)

    @property
    def launches(self) -> int:
        return sum(self.layer_launches)


def load_back(
    card: ModelCard, kv_cell: int, tokens: int, state_bytes: int, states: int
) -> LoadBack:
    """The copies of `tokens` of KV (kv_cell bytes a token over the full-attention layers) and of
    `states` mamba states found on the host only (state_bytes each, over the linear layers)."""
    full = set(card.full_attention_layers)
    linear = set(card.linear_layers)
    copies = HOST_STATE_COPIES * states if linear else 0
    skipped = tokens < LOAD_BACK_THRESHOLD and not copies
    kv_per_layer = 0.0 if skipped or not tokens else tokens * kv_cell / max(len(full), 1)
    state_per_layer = copies * state_bytes / max(len(linear), 1)
    layer_bytes: list[float] = []
    launches: list[int] = []
    for i in sorted(full | linear):
        if i in full:
            layer_bytes.append(kv_per_layer)
            launches.append(int(kv_per_layer > 0))
        else:
            layer_bytes.append(state_per_layer)
            launches.append(copies * MAMBA_LAUNCHES_PER_COPY)
    return LoadBack(tuple(layer_bytes), tuple(launches))


def timeline(
    layer_load_s: Sequence[float],
    layer_compute_s: Sequence[float],
    layer_launch_s: Sequence[float],
) -> tuple[float, float]:
    """(forward end, copy end), from when start_loading begins. Layer i's copy starts once its
    kernels are launched and layer i-1's copy is done; the forward is launched after every copy
    kernel and runs layer i once layer i-1 and layer i's copy are done."""
    t = sum(layer_launch_s)
    launched = loaded = 0.0
    for launch, load, compute in zip(layer_launch_s, layer_load_s, layer_compute_s, strict=True):
        launched += launch
        loaded = max(loaded, launched) + load
        t = max(t, loaded) + compute
    return t, loaded


def load_back_s(lb: LoadBack, link_gbs: float, forward_s: float) -> tuple[float, float]:
    """(exposed, copy) seconds of a load-back under a forward of forward_s (spread evenly over the
    transfer layers): what the forward's end moves by, and how long the copy takes to finish."""
    n = len(lb.layer_bytes)
    if not n:
        return 0.0, 0.0
    loads = [b / (link_gbs * 1e9) for b in lb.layer_bytes]
    launches = [k * LAUNCH_S for k in lb.layer_launches]
    end, copy = timeline(loads, [forward_s / n] * n, launches)
    return end - forward_s, copy


__all__ = [
    "DEFAULT_IO_BACKEND",
    "DEFAULT_MEM_LAYOUT",
    "HOST_STATE_COPIES",
    "LOAD_BACK_THRESHOLD",
    "LoadBack",
    "load_back",
    "load_back_s",
    "repeat_prefix",
    "timeline",
]
