"""SGLang's DP attention (--enable-dp-attention with --dp-size), release by release, as the
release wheels on PyPI have it (`sglang/srt/server_args.py`; `models/deepseek_v2.py`;
`layers/vocab_parallel_embedding.py`; from 0.5.19 `arg_groups/parallel_hook.py`):

- 0.3.6 .. 0.4.4: `dp_size` is forced to `tp_size`, chunked_prefill_size is halved, and the
  attention projections, the embedding and the LM head (a ReplicatedLinear) are whole on every
  rank; up to 0.4.0.post1 the CUDA-graph max batch size is capped at 96, and up to 0.4.1.post6
  the overlap schedule is off;
- 0.4.4.post1 on: `dp_size` as given (tp_size % dp_size == 0), chunked_prefill_size divided by
  it after the memory defaults are set (so mem_fraction_static still sees the undivided size),
  the attention over tp / dp ranks, the LM head over the TP group, or over the attention-TP
  group with --enable-dp-lm-head (0.4.6.post4 on); the embedding whole before 0.5.8, over the
  attention-TP group from 0.5.8;
- 0.4.1.post7 on: the user's --max-running-requests is each DP rank's share, divided by the
  DP size (managers/tp_worker.py to 0.5.7, model_runner.py from 0.5.8,
  mem_cache/kv_cache_configurator.py in 0.5.23);
- 0.5.22 on: `--attn-dp-size N` is the size (arg_groups/fields/parallel.py); the old spelling
  `--enable-dp-attention --dp-size N` resolves to it when it is left at 1
  (parallel_hook.handle_deprecated_dp_attention).

Every rank a DP controller starts prints `DPn` in its log prefix (managers/scheduler.py
run_scheduler_process); a launch with dp_size 1 prints none.
"""

from __future__ import annotations

from typing import Any

from autotune.models.card import ModelCard
from autotune.planner.sglang_release import Release

FORCED_DP_LAST: Release = (4, 4, 0)  # the last release that forces dp_size = tp_size
GRAPH_CAP_LAST: Release = (4, 0, 1)  # the last release that caps cuda_graph_max_bs at 96
NO_OVERLAP_LAST: Release = (4, 1, 6)  # the last release that turns the overlap schedule off
DP_LM_HEAD_FIRST: Release = (4, 6, 4)  # --enable-dp-lm-head
SPLIT_EMBED_FIRST: Release = (5, 8, 0)  # VocabParallelEmbedding(use_attn_tp_group=...)
ATTN_DP_SIZE_FIRST: Release = (5, 22, 0)  # --attn-dp-size
USER_MRR_SPLIT_FIRST: Release = (4, 1, 7)  # max_running_requests // dp_size per DP rank
LATEST: Release = (99, 0, 0)  # a version release() cannot read: the newest rules


def attention_dp_size(config: dict[str, Any], tp: int, rel: Release | None) -> int:
    """The DP-attention size the release runs: 1 without --enable-dp-attention (or with
    dp_size 1); tp_size up to 0.4.4 (server_args forces it); dp_size from 0.4.4.post1;
    from 0.5.22 --attn-dp-size, or dp_size under the old spelling when it is left at 1."""
    attn_dp = int(config.get("attn_dp_size") or 1)
    if attn_dp > 1 and (rel or LATEST) >= ATTN_DP_SIZE_FIRST:
        return attn_dp
    if not config.get("enable_dp_attention"):
        return 1
    if (rel or LATEST) <= FORCED_DP_LAST:
        return max(tp, 1)
    return max(int(config.get("dp_size") or 1), 1)


def per_rank_requests(user: int | None, dp: int, rel: Release | None) -> int | None:
    """The user's max_running_requests as one DP rank runs it (module docstring); None: unset."""
    if user is None or dp <= 1 or (rel or LATEST) < USER_MRR_SPLIT_FIRST:
        return user
    return user // dp


def chunked_prefill(cps: int, dp: int, rel: Release | None) -> int:
    """chunked_prefill_size as the release runs it under DP attention of size `dp` (1: off):
    halved up to 0.4.4, divided by dp_size from 0.4.4.post1 (the user's value too)."""
    if dp <= 1:
        return cps
    return cps // 2 if (rel or LATEST) <= FORCED_DP_LAST else cps // dp


def adjusted(
    cps: int, max_bs: int, overlap: bool, dp: int, rel: Release | None
) -> tuple[int, int, bool]:
    """(chunked_prefill_size, cuda_graph_max_bs, overlap schedule) under DP attention of size
    `dp` (1: off), as ServerArgs adjusts them after the memory defaults."""
    if dp <= 1:
        return cps, max_bs, overlap
    r = rel or LATEST
    if r <= GRAPH_CAP_LAST:
        max_bs = min(max_bs, 96)
    return chunked_prefill(cps, dp, rel), max_bs, overlap and r > NO_OVERLAP_LAST


def dp_attention_weights(
    card: ModelCard, tp: int, attn_tp: int, rel: Release | None, *, dp_lm_head: bool = False
) -> int:
    """What DP attention adds to a rank's weights over plain TP: the attention projections
    over `attn_tp` = tp / dp ranks; the embedding whole before 0.5.8, else over those ranks;
    the LM head whole up to 0.4.4, over those ranks with --enable-dp-lm-head (0.4.6.post4 on),
    else over the whole TP group as without DP attention."""
    if attn_tp >= tp:
        return 0
    r = rel or LATEST
    w = card.weights
    embed = w.embed_tokens if r < SPLIT_EMBED_FIRST else w.embed_tokens // attn_tp
    extra = w.attention // attn_tp - w.attention // tp + embed - w.embed_tokens // tp
    if r <= FORCED_DP_LAST:
        extra += w.lm_head - w.lm_head // tp
    elif dp_lm_head and r >= DP_LM_HEAD_FIRST:
        extra += w.lm_head // attn_tp - w.lm_head // tp
    return extra
