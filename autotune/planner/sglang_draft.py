"""A separate draft model on SGLang (DFLASH, or an EAGLE / EAGLE3 head; planner.drafts describes
the checkpoints) and an MTP draft: where the weights are paid from, what the draft's KV pool adds
to the target's cell, and its HiCache host pool.

From SGLang's own source, per release:
- 0.5.14+ loads the draft's weights before the target profiles its memory
  (Scheduler.init_model_worker: maybe_init_draft_worker, then init_memory_pools), so they come
  out of the static budget ("Loaded weights (target + draft) can exceed the static budget");
  before, the target's pool was sized inside its own worker's start, and the draft's weights
  came out of the non-static slack.
- The draft gets its own KV pool of as many tokens as the target's (MemoryPoolConfig is
  "shared between target and draft workers"), so the target's cell pays for both
  (pool_configurator DefaultPoolConfigurator): 0.5.11 .. 0.5.17 scale the target cell by
  (target layers + draft layers) / target layers, rounded up (dflash_utils.
  scale_kv_cell_size_per_token_for_dflash), target layers being the full-attention ones of a
  hybrid model; 0.5.18+ add the draft's exact cell (dflash_draft_cell_size_per_token: KV heads
  per rank x (head_dim + v_head_dim) x draft layers x the draft's KV dtype). A target with
  SGLang's two sliding-window pools (planner.sglang_swa) has no such scale before 0.5.18: the
  draft's pool comes out of the non-static slack; 0.5.18+ add its exact cell there too.
- The draft's KV dtype is the target's (mem_cache/kv_cache_dtype.configure_kv_cache_dtype),
  unless --speculative-draft-kv-cache-dtype sets it (0.5.18+), or the draft attention backend is
  fa4, which keeps the model dtype.
- Without --speculative-num-draft-tokens, DFLASH drafts the checkpoint's block_size
  (speculative_hook._handle_dflash; 16 when the config has none).
- An EAGLE-family draft built from the checkpoint's own MTP layers (NEXTN/EAGLE without
  --speculative-draft-model-path) builds its own embedding and LM head as it loads (0.5.18
  models/qwen3_5_mtp.Qwen3_5ForCausalLMMTP.__init__: a Qwen3_5ForCausalLM with its
  VocabParallelEmbedding, and a ParallelLMHead unless tie_word_embeddings; the other MTP classes
  likewise), and drops them for the target's only in EagleDraftWorker.alloc_memory_pool ->
  init_lm_head -> set_embed_and_head (del, then torch.cuda.empty_cache). From 0.5.14 the
  scheduler sizes the target's pool before that call (Scheduler.init_memory_pools: the target's
  alloc_memory_pool, then the draft's), so the target's budget loses both vocab-parallel copies
  (KVCacheConfigurator._profile_available_bytes reads the free memory with them resident); they
  are free again before CUDA graphs, in the non-static slack.
- An EAGLE-family draft's KV pool (as many tokens as the target's) is in the target's cell,
  x(1 + draft layers / target full-attention layers), from 0.5.14 (pool_configurator
  DefaultPoolConfigurator) when the target resolves the draft's layer count
  (eagle_draft_num_layers); else the draft's pool comes out of the non-static slack.
  0.5.14 .. 0.5.19 resolve it only with a draft path (model_runner, then
  spec_aux_hidden_state._resolve_eagle_aux_hidden_state), which NEXTN/EAGLE without one gets
  only for the architectures speculative_hook._handle_eagle_family points at the model path
  (DeepSeek, GLM, Bailing, ...; not Qwen3.5/3.6). 0.5.20+ read a path-less draft's count off
  the target's own config (num_nextn_predict_layers, ModelConfig reads no other key), which
  Qwen3.5/3.6 configs lack (they say mtp_num_hidden_layers; only the draft-mode rewrite sets
  num_nextn_predict_layers): their NEXTN draft pool stays in the slack through 0.5.23.
  Before 0.5.14 no release scales the cell for an EAGLE draft.
- The HiCache KV host pool is sized off the target's device pool (mem_cache/pool_host/base.py
  HostKVCache: its size x --hicache-ratio, or --hicache-size over the bytes a token), never off
  the scaled cell. From 0.5.18 an MTP draft's device pool is packed into it, one layer per draft
  runner (one, or one a step under multi_layer_eagle_worker_v2) (speculative/base_spec_worker._can_pack_hicache_mtp: EAGLE/NEXTN, not EAGLE3, a draft
  whose config has num_nextn_predict_layers, which the draft-mode rewrite of an MTP checkpoint
  sets; pool_host/mha.py and mla.py get_size_per_token: target layers + draft pools). A
  Qwen3.5-style NEXTN target with 16 full-attention layers thus has 17 layers a host token
  while its device cell holds 16.
- A separate EAGLE / EAGLE3 head (--speculative-draft-model-path on a target without MTP layers,
  e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B on Llama-3.1-8B): its weights come out of the static
  budget from 0.5.14, else the slack, as DFLASH's; its own KV pool (as many tokens as the
  target's: draft_runner_cache_size before 0.5.11, the shared MemoryPoolConfig after) is in the
  cell from 0.5.14 (model_runner resolves eagle_draft_num_layers from the path's config:
  num_nextn_predict_layers, else max(num_hidden_layers, num_attention_layers), the head's one
  layer), else the slack pays it at the draft's own KV shape. From 0.5.14 its model also holds
  its own vocab-parallel embedding (and an EAGLE head its full-vocabulary LM head; EAGLE3 keeps
  its reduced one) while the target sizes its pool: llama_eagle3.LlamaForCausalLMEagle3 builds
  VocabParallelEmbedding(vocab_size), dropped for the target's in eagle_worker_v2.init_lm_head
  (set_embed / set_embed_and_head: del, then torch.cuda.empty_cache).
- A draft HiCache does not pack (DFLASH, EAGLE3, a draft config without
  num_nextn_predict_layers; any draft before 0.5.18) gets a host pool of its own (a hybrid
  target's draft: its pool's full-attention part) with as many tokens as the target's
  (0.5.11 scheduler._maybe_register_hicache_draft, 0.5.13+ mem_cache/kv_cache_builder: "the
  same slot count as the target host pool", host_size=0), sized off its device pool; the
  target's host pool stays sized off the target's own cell. A DFLASH worker of 0.5.11 .. 0.5.13
  answers with the target's runner (DFlashWorker.model_runner = target_worker.model_runner), so
  the target's pool is mirrored a second time; 0.5.14 .. 0.5.17 read
  draft_worker.draft_worker.draft_runner (kv_cache_builder.get_draft_kv_pool), which DFLASH's
  TpModelWorker lacks: the launch fails.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from autotune.models.card import ModelCard
from autotune.planner.drafts import DraftModel, noted_draft
from autotune.planner.sglang_swa import DFLASH_IN_SWA_CELL_SINCE, SwaPools

DRAFT_WEIGHTS_STATIC_SINCE = (0, 5, 14)
EAGLE_CELL_SINCE = (0, 5, 14)
PATHLESS_EAGLE_CELL_SINCE = (0, 5, 20)
HICACHE_PACKS_MTP_SINCE = (0, 5, 18)
HICACHE_DRAFT_POOL_SINCE = (0, 5, 11)
DFLASH_HICACHE_FAILS = ((0, 5, 14), (0, 5, 18))  # [from, until)
EAGLE_HEADS = frozenset({"EagleLlamaForCausalLM", "Eagle3LlamaForCausalLM"})
# speculative_hook._handle_eagle_family: NEXTN/EAGLE targets whose draft path defaults to the
# model path (0.5.14 .. 0.5.19; 0.5.20 adds HYV4ForCausalLM, Qwen4ExpForConditionalGeneration)
MODEL_PATH_DRAFT_ARCHS = frozenset(
    {
        "DeepseekV32ForCausalLM",
        "DeepseekV3ForCausalLM",
        "DeepseekV4ForCausalLM",
        "Glm4MoeForCausalLM",
        "Glm4MoeLiteForCausalLM",
        "GlmMoeDsaForCausalLM",
        "BailingMoeForCausalLM",
        "BailingMoeV2ForCausalLM",
        "BailingMoeV2_5ForCausalLM",
        "MistralLarge3ForCausalLM",
        "PixtralForConditionalGeneration",
        "HYV3ForCausalLM",
    }
)
MODEL_PATH_DRAFT_ARCHS_0_5_20 = MODEL_PATH_DRAFT_ARCHS | {
    "HYV4ForCausalLM",
    "Qwen4ExpForConditionalGeneration",
}
DFLASH_SINCE = (0, 5, 11)
EXACT_DRAFT_CELL_SINCE = (0, 5, 18)


def dflash_draft(
    cfg: dict[str, Any], v: tuple[int, int, int], assumptions: list[str]
) -> DraftModel | None:
    """The DFLASH draft the launch loads, when the planner knows it; its block size becomes
    the default number of draft tokens in `cfg`. An unknown draft is noted as unmodelled."""
    spec = str(cfg.get("speculative_algorithm") or "").upper()
    if spec != "DFLASH" or v < DFLASH_SINCE:
        return None
    draft = noted_draft(cfg.get("speculative_draft_model_path"), assumptions, dflash=True)
    if draft is not None and cfg.get("speculative_num_draft_tokens") is None:
        block = cfg.get("speculative_dflash_block_size") or draft.block_size
        cfg["speculative_num_draft_tokens"] = int(block)
    return draft


def draft_kv_bytes(
    cfg: dict[str, Any],
    kv_dtype_bytes: float,
    v: tuple[int, int, int],
    dtype_bytes: dict[str, float],
) -> float:
    """Bytes per element of the draft's KV pool (module docstring); `dtype_bytes` maps the
    --kv-cache-dtype names to their element sizes."""
    own = cfg.get("speculative_draft_kv_cache_dtype")
    if own not in (None, "auto") and v >= EXACT_DRAFT_CELL_SINCE:
        return dtype_bytes.get(str(own), kv_dtype_bytes)
    if cfg.get("speculative_draft_attention_backend") == "fa4":
        return 2.0
    return kv_dtype_bytes


def dflash_cell(
    cell: int,
    card: ModelCard,
    draft: DraftModel,
    tp: int,
    draft_dtype_bytes: float,
    v: tuple[int, int, int],
) -> int:
    """The target's cell with the draft pool's share (module docstring)."""
    if v >= EXACT_DRAFT_CELL_SINCE:
        return cell + draft.layers * draft.kv_bytes_per_token_layer(tp, draft_dtype_bytes)
    target_layers = len(card.full_attention_layers)
    if target_layers <= 0:
        return cell
    return (cell * (target_layers + draft.layers) + target_layers - 1) // target_layers


def dflash_swa(
    swa: SwaPools, draft: DraftModel, tp: int, draft_dtype_bytes: float, v: tuple[int, int, int]
) -> tuple[SwaPools, int]:
    """The two window pools with the draft's pool (module docstring): in their cell from 0.5.18,
    else unchanged, with the draft pool's bytes per full-pool token the slack pays."""
    own = draft.layers * draft.kv_bytes_per_token_layer(tp, draft_dtype_bytes)
    if v >= DFLASH_IN_SWA_CELL_SINCE:
        return replace(swa, draft_per_token=own), 0
    return swa, own


def eagle_draft(
    card: ModelCard, cfg: dict[str, Any], eagle: bool, assumptions: list[str]
) -> DraftModel | None:
    """A separate EAGLE / EAGLE3 head on a target without MTP layers, when the planner lists it
    (module docstring); an unlisted one is noted as unmodelled."""
    path = cfg.get("speculative_draft_model_path")
    if not eagle or card.mtp_layers or not path:
        return None
    draft = noted_draft(path, assumptions, dflash=False)
    if draft is None:
        assumptions.append(
            f"EAGLE draft {path!r} is not in the planner's draft list: its weights and KV cache "
            "are not counted"
        )
    return draft


def mtp_own_head_bytes(
    card: ModelCard,
    cfg: dict[str, Any],
    eagle: bool,
    tp: int,
    v: tuple[int, int, int],
    head: DraftModel | None = None,
) -> int:
    """Bytes per rank of the embedding and LM head an MTP draft or a separate EAGLE `head` builds
    and holds while the target sizes its pool (module docstring); 0 where it does not."""
    if not eagle or v < DRAFT_WEIGHTS_STATIC_SINCE:
        return 0
    embed, lm_head = card.weights.embed_tokens // tp, card.weights.lm_head // tp
    if head is not None and head.architecture in EAGLE_HEADS:
        # the head's own embedding over the target vocabulary; an LM head unless it has its own
        return embed + (0 if head.lm_head_vocab else lm_head or embed)
    if not card.mtp_layers or cfg.get("speculative_draft_model_path"):
        return 0
    return embed + lm_head


def draft_weights_static(v: tuple[int, int, int]) -> bool:
    """Whether the draft's weights come out of the static budget (else the slack)."""
    return v >= DRAFT_WEIGHTS_STATIC_SINCE


def mtp_kv_in_cell(
    card: ModelCard, cfg: dict[str, Any], v: tuple[int, int, int], assumptions: list[str]
) -> bool:
    """Whether an EAGLE-family draft's KV pool is in the target's cell (else the slack pays
    it; module docstring)."""
    if v < EAGLE_CELL_SINCE:
        return False
    archs = (
        MODEL_PATH_DRAFT_ARCHS_0_5_20 if v >= PATHLESS_EAGLE_CELL_SINCE else MODEL_PATH_DRAFT_ARCHS
    )
    if cfg.get("speculative_draft_model_path") or card.architecture in archs:
        return True
    if v < PATHLESS_EAGLE_CELL_SINCE:
        return False
    if not card.mtp_config_key:
        assumptions.append(
            "the card does not say which config key declares its MTP layers: the draft's KV "
            "is counted in the non-static slack"
        )
    return card.mtp_config_key == "num_nextn_predict_layers"


def mtp_cell(
    cell: int,
    card: ModelCard,
    in_cell: bool,
    assumptions: list[str],
    head: DraftModel | None = None,
) -> int:
    """The target's cell with an EAGLE-family draft's share when SGLang budgets it there
    (DefaultPoolConfigurator: x(1 + draft layers / num_layers), §6): a separate `head`'s layers
    (eagle_draft_num_layers off its config), else the card's MTP layers."""
    layers = head.layers if head is not None else card.mtp_layers
    if not in_cell or not layers or not card.full_attention_layers:
        return cell
    assumptions.append("draft KV budgeted in the cell")
    return int(cell * (1 + layers / len(card.full_attention_layers)))


def host_draft_cell(
    cfg: dict[str, Any],
    v: tuple[int, int, int],
    draft: DraftModel | None,
    own_cell: int,
    target_cell: int,
    windowed: bool,
    notes: tuple[list[str], list[str]],
) -> int:
    """Bytes a host token of the separate draft's own HiCache host pool (module docstring):
    `own_cell` its device pool's bytes a token, `target_cell` the target's; `windowed`: a
    target with two sliding-window pools, whose draft host pools are not modelled; `notes`:
    (reasons, assumptions)."""
    reasons, assumptions = notes
    if not own_cell or v < HICACHE_DRAFT_POOL_SINCE or (draft is None and _packs_mtp(cfg, v)):
        return 0
    if windowed:
        assumptions.append("the draft's own HiCache host pool is not counted (sliding-window)")
        return 0
    if str(cfg.get("speculative_algorithm") or "").upper() != "DFLASH":
        return own_cell
    if v < DFLASH_HICACHE_FAILS[0]:
        return target_cell
    if v < DFLASH_HICACHE_FAILS[1]:
        reasons.append(
            "HiCache with a DFLASH draft fails at launch in this release (AttributeError: "
            "'TpModelWorker' object has no attribute 'draft_runner'); use 0.5.18 or later"
        )
        return 0
    return own_cell


def mtp_host_cell(
    cell: int, card: ModelCard, cfg: dict[str, Any], eagle: bool, v: tuple[int, int, int]
) -> int:
    """Bytes a token of the HiCache KV host pool, from the target's own cell (module
    docstring): one packed MTP draft layer more from 0.5.18."""
    full = len(card.full_attention_layers)
    if not eagle or not card.mtp_layers or not full or not _packs_mtp(cfg, v):
        return cell
    runners = (
        int(cfg.get("speculative_num_steps") or 1) if cfg.get("enable_multi_layer_eagle") else 1
    )
    return cell * (full + runners) // full


def _packs_mtp(cfg: dict[str, Any], v: tuple[int, int, int]) -> bool:
    """Whether HiCache packs an MTP draft's pool into the target's host pool (module
    docstring); an MTP draft it does not pack gets a host pool of its own from 0.5.11. A draft
    path does not matter: _can_pack_hicache_mtp reads the draft runner's config, and the
    draft-mode rewrite (configs/model_config._config_draft_model, by architecture) sets
    num_nextn_predict_layers on an MTP checkpoint whatever path names it (0.5.18 .. 0.5.23)."""
    spec = str(cfg.get("speculative_algorithm") or "").upper()
    return v >= HICACHE_PACKS_MTP_SINCE and spec != "EAGLE3"


def own_draft_cell(
    draft: DraftModel | None,
    card: ModelCard,
    eagle: bool,
    target_cell: int,
    tp: int,
    dtype_bytes: float,
) -> int:
    """Bytes a token of the draft's own device pool: a separate draft's layers at its own KV
    shape, an MTP draft's at the target's per-layer share of its cell; 0 without a draft."""
    if draft is not None:
        return draft.layers * draft.kv_bytes_per_token_layer(tp, dtype_bytes)
    full = len(card.full_attention_layers)
    if not eagle or not card.mtp_layers or not full:
        return 0
    return target_cell * card.mtp_layers // full
