"""SGLang's two KV pools for models whose sliding-window layers have their own head shape
(MiMo-V2-Flash: `SWAKVPool`, a full-attention pool and a window pool), per release.

SGLang divides the static budget by one cell that holds both kinds of layers, then splits the
tokens it gets between the two pools by `--swa-full-tokens-ratio` (r, default 0.8; the window
pool holds r x the full pool's tokens). From the releases' `model_runner_kv_cache_mixin`:

- 0.5.7: cell = F x n_full + S x n_swa (F, S: one layer's KV bytes per token in each kind);
  the split counts layers, not bytes: full = tokens x n_layers / (r x n_swa + n_full).
- 0.5.8: the same split, but the cell counts F over every layer: F x n_layers + S x n_swa.
- 0.5.9 on: cell = F x n_full + S x n_swa, split by bytes:
  full = tokens x (F n_full + S n_swa) / (F n_full + r S n_swa) (0.5.11 moved it to
  `HybridSWAPoolConfigurator`, the same equation).
- Main before the 0.5.7 release (MiMo-V2-Flash's first builds, dated as 0.5.6.x here) ignored
  the ratio for MiMo-V2-Flash (sglang PR #15488, "respect --swa-full-tokens-ratio arg", merged
  after 2025-12-19): both pools hold the profiled tokens; the 0.5.7 cell.

The full pool's tokens are the launch's KV tokens (`max_total_num_tokens`).

Gemma 4 (0.5.11 on, `Gemma4ForConditionalGeneration` / `Gemma4ForCausalLM` in
`is_hybrid_swa_model`): the config parser (utils/hf_transformers/config.py) turns its global
layers into the full pool's shape, `head_dim` = `global_head_dim`, `num_key_value_heads` =
`num_global_key_value_heads` (whenever the config has it; the card keeps it only with
`attention_k_eq_v`, as vLLM does, which Gemma 4 26B-A4B has), V as wide as K (a V slot is held
even with `attention_k_eq_v`), and the sliding layers into `swa_head_dim` / `swa_v_head_dim` =
`head_dim`, `swa_num_key_value_heads` = `num_key_value_heads`; the same cell and split as above.
Before 0.5.11 SGLang has no Gemma 4; `--disable-hybrid-swa-memory` puts it in one pool the
planner does not model (planner.sglang refuses both).

Which models get the two pools: window layers with their own shape (MiMo-V2), and from 0.5.8
gpt-oss (`GptOssForCausalLM` in `is_hybrid_swa_model`, model_config; 0.5.19 lists it among
`SWA_SINK_ARCHS`), whose window layers share the full layers' shape; from 0.5.12 Laguna
(`LagunaForCausalLM` joins that list; 0.5.14 on keep it only when the config has a
`sliding_window`), whose window layers share them too.

A DFLASH draft's own pool (as many tokens as the full pool) is outside this cell in 0.5.12 ..
0.5.17 (`HybridSWAPoolConfigurator` adds only EAGLE / STANDALONE draft layers; the DFLASH scale
is `DefaultPoolConfigurator`'s), so it comes out of the non-static slack; 0.5.18 adds the
draft's exact cell to it (`_dflash_draft_cell_size`: `+ self._draft_cell_size`, both the
hybrid and the all-window formula). 0.5.8 and 0.5.9 turn it
off for gpt-oss on the trtllm_mha attention backend (gpt-oss's default on sm_10x), 0.5.8 also
with speculative decoding (server_args); `--disable-hybrid-swa-memory` turns it off.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import ConfigError
from autotune.models.card import ModelCard

DEFAULT_SWA_FULL_TOKENS_RATIO = 0.8
# Architectures SGLang gives the two pools whatever their window layers' shape, from a release.
HYBRID_SWA_ARCHITECTURES: dict[str, tuple[int, int, int]] = {
    "GptOssForCausalLM": (0, 5, 8),
    "LagunaForCausalLM": (0, 5, 12),
    "Gemma4ForConditionalGeneration": (0, 5, 11),
    "Gemma4ForCausalLM": (0, 5, 11),
}
DFLASH_IN_SWA_CELL_SINCE = (0, 5, 18)
_BACKEND_KEYS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend")


@dataclass(frozen=True)
class SwaPools:
    full_per_token: int  # F: one full-attention layer's KV bytes per token on a rank
    swa_per_token: int  # S: one window layer's
    n_full: int
    n_swa: int
    version: tuple[int, int, int]
    ratio: float
    draft_per_token: int = 0  # a DFLASH draft's pool per full-pool token, in the cell (0.5.18+)

    @property
    def cell(self) -> int:
        """The bytes per token SGLang divides the budget by."""
        full_layers = self.n_full + self.n_swa if self.version == (0, 5, 8) else self.n_full
        used = self.full_per_token * full_layers + self.swa_per_token * self.n_swa
        return used + self.draft_per_token

    def full_tokens(self, tokens: int, page: int) -> int:
        """The full pool's tokens from the profiled `tokens`."""
        if self.version < (0, 5, 7):
            full = tokens
        elif self.version < (0, 5, 9):
            full = int(
                tokens * (self.n_full + self.n_swa) / (self.ratio * self.n_swa + self.n_full)
            )
        else:
            full = int(
                tokens
                * self.cell
                / (
                    self.full_per_token * self.n_full
                    + self.ratio * self.swa_per_token * self.n_swa
                    + self.draft_per_token
                )
            )
        return full // page * page

    def swa_tokens(self, full: int, page: int) -> int:
        if self.version < (0, 5, 7):
            return full
        return int(full * self.ratio) // page * page

    def pool_bytes(self, full: int, page: int) -> int:
        """What the two pools allocate."""
        swa = self.swa_tokens(full, page)
        return full * self.full_per_token * self.n_full + swa * self.swa_per_token * self.n_swa


def hybrid_by_architecture(
    card: ModelCard, version: tuple[int, int, int], cfg: dict[str, object], gpu_arch: str
) -> bool:
    """Whether the release gives the card's architecture the two pools (module doc)."""
    since = HYBRID_SWA_ARCHITECTURES.get(card.architecture)
    if since is None or version < since or cfg.get("disable_hybrid_swa_memory"):
        return False
    if version < (0, 5, 10):
        backends = {cfg.get(k) for k in _BACKEND_KEYS} - {None}
        if not backends and gpu_arch.startswith("sm_10"):
            backends = {"trtllm_mha"}  # gpt-oss's default where is_sm100_supported()
        if "trtllm_mha" in backends:
            return False
        if version < (0, 5, 9) and cfg.get("speculative_algorithm"):
            return False
    return True


def swa_pools(
    card: ModelCard,
    kv_bytes: float,
    attn_tp: int,
    version: tuple[int, int, int],
    ratio: float | None,
    *,
    by_architecture: bool = False,
) -> SwaPools | None:
    """The two pools of a card whose window layers have their own shape, or whose architecture
    the release gives them (`by_architecture`), else None."""
    local = card.local_attention
    if local is None or card.latent_attention is not None:
        return None
    if card.global_attention is not None:
        return _global_pools(card, kv_bytes, attn_tp, version, ratio) if by_architecture else None
    if not (local.own_shape or by_architecture):
        return None
    swa_heads = max(1, (local.num_kv_heads or card.num_kv_heads) // attn_tp)
    swa_dims = (local.head_dim or card.head_dim) + (local.v_head_dim or card.value_head_dim)
    full_heads = max(1, card.num_kv_heads // attn_tp)
    n_swa = len(local.layers)
    return SwaPools(
        full_per_token=int(full_heads * (card.head_dim + card.value_head_dim) * kv_bytes),
        swa_per_token=int(swa_heads * swa_dims * kv_bytes),
        n_full=len(card.full_attention_layers) - n_swa,
        n_swa=n_swa,
        version=version,
        ratio=DEFAULT_SWA_FULL_TOKENS_RATIO if ratio is None else float(ratio),
    )


def _global_pools(
    card: ModelCard,
    kv_bytes: float,
    attn_tp: int,
    version: tuple[int, int, int],
    ratio: float | None,
) -> SwaPools:
    """Gemma 4's pools (module doc): the full pool in the global layers' shape, the window
    pool in the card's own (sliding) one."""
    g, local = card.global_attention, card.local_attention
    assert g is not None and local is not None
    n_swa = len(local.layers)
    return SwaPools(
        full_per_token=int(max(1, g.num_kv_heads // attn_tp) * 2 * g.head_dim * kv_bytes),
        swa_per_token=int(
            max(1, card.num_kv_heads // attn_tp) * (card.head_dim + card.value_head_dim) * kv_bytes
        ),
        n_full=len(card.full_attention_layers) - n_swa,
        n_swa=n_swa,
        version=version,
        ratio=DEFAULT_SWA_FULL_TOKENS_RATIO if ratio is None else float(ratio),
    )


def check_global_attention(card: ModelCard, by_architecture: bool) -> None:
    """Refuse a card whose global layers have their own shape (Gemma 4) where the release does
    not give it the two pools: before 0.5.11, or with --disable-hybrid-swa-memory.

    Raises:
        ConfigError: as above.
    """
    if card.global_attention is not None and not by_architecture:
        raise ConfigError(
            f"SGLang's KV pool for {card.architecture} (global layers with their own head "
            "width and KV heads) is modelled only as its two SWA pools (0.5.11 on, hybrid SWA "
            "memory on)",
            field="model",
        )
