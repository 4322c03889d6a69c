"""SGLang's memory accounting in its first releases with a profiled pool, 0.1.17 .. 0.2.15, and
the opt-in MLA of 0.2.10 .. 0.3.1.post1.

Read from the release wheels on PyPI (every release 0.1.17 .. 0.3.1.post3 compared function by
function; tests/planner/test_sglang_early_wheels.py runs each wheel's own code):

- the pool (ModelRunner.profile_max_num_token, managers/controller/model_runner.py, from 0.2.7
  model_executor/model_runner.py) is the modern one: `total` is the free memory read (the MIN
  over the TP ranks) after NCCL and before the weights, and
  `tokens = int((free after weights - total * (1 - mem_fraction_static)) * 2**30 // cell)`, so
  `pre * mfs - weights` as planner.sglang budgets it; the cell is
  `kv_heads / tp * head_dim * layers * 2 * element size` (0.1.17: 2 bytes whatever the dtype;
  K and V both head_dim wide; the KV dtype from 0.2.14);
- mem_fraction_static when not given: a table by TP size only (ServerArgs.__post_init__), whose
  values changed in 0.1.20, 0.1.21, 0.1.24 and 0.2.7 (0.2.7 .. 0.3.x: 0.88 / 0.87 / 0.85 /
  0.83 / 0.79, sglang_history's table);
- max_running_requests: `tokens // 2` or the user's, capped by the request pool less one from
  0.1.24 (the summary line states it from then); the request pool held
  `int(tokens / context_len * 256)` slots (<= 0.1.21), then at least 2048 (0.1.22), at most
  5120 (0.2.7); `--max-num-reqs` (0.2.6 .. 0.3.0) sets it;
- DeepSeek-V2 (0.2.6 on; MiniCPM3 0.3.1 on) is special-cased in model_config: `head_dim` 256
  (MiniCPM3: 128) and, before 0.3.1.post2, the latent (MLA) cache only with `--enable-mla`
  (0.2.10 on). Without it the model runs MHA-style: num_key_value_heads heads of that
  head_dim for K and V each.
"""

from __future__ import annotations

from typing import Any

from autotune.models.card import ModelCard
from autotune.planner.sglang_release import Release

FIRST: Release = (1, 17, 0)  # the first release the planner models
HISTORY_FIRST: Release = (3, 0, 0)  # sglang_history's first
MLA_OPT_IN: Release = (2, 10, 0)  # --enable-mla
MLA_DEFAULT: Release = (3, 1, 2)  # 0.3.1.post2: MLA on unless --disable-mla
# model_config's "temporary special judge": the MHA head_dim of the MLA architectures, and the
# release that added each.
MHA_HEAD_DIM: dict[str, tuple[int, Release]] = {
    "DeepseekV2ForCausalLM": (256, (2, 6, 0)),
    "MiniCPM3ForCausalLM": (128, (3, 1, 0)),
}


def is_early(rel: Release) -> bool:
    """Whether `rel` (sglang_history.release's form) is one this module models."""
    return FIRST <= rel < HISTORY_FIRST


def default_mem_fraction(rel: Release, tp: int) -> float:
    """mem_fraction_static when the flag is not given: (tp >= 16, 8, 4, 2, 1)."""
    if rel < (1, 20, 0):
        table = (0.80, 0.80, 0.82, 0.85, 0.90)  # no tp >= 16 branch
    elif rel < (1, 21, 0):
        table = (0.78, 0.78, 0.80, 0.85, 0.88)
    elif rel < (1, 24, 0):
        table = (0.74, 0.78, 0.82, 0.85, 0.88)
    elif rel < (2, 7, 0):
        table = (0.80, 0.84, 0.86, 0.88, 0.89)
    else:
        table = (0.79, 0.83, 0.85, 0.87, 0.88)
    for at_least, value in zip((16, 8, 4, 2), table, strict=False):
        if tp >= at_least:
            return value
    return table[4]


def request_pool(rel: Release, tokens: int, context_len: int, max_num_reqs: int | None) -> int:
    """ReqToTokenPool's size (ModelRunner.init_memory_pool)."""
    if max_num_reqs is not None and rel >= (2, 6, 0):
        return max_num_reqs
    if rel < (1, 22, 0):
        return int(tokens / context_len * 256)
    pool = max(int(tokens / context_len * 512), 2048)
    return pool if rel < (2, 7, 0) else min(pool, 5120)


def max_running_requests(
    rel: Release, tokens: int, context_len: int, user: int | None, max_num_reqs: int | None = None
) -> int:
    """The scheduler's max_running_requests (tp_worker.ModelTpServer)."""
    mrr = tokens // 2 if user is None else user
    if rel < (1, 24, 0):
        return mrr  # not capped, and not logged
    return min(mrr, request_pool(rel, tokens, context_len, max_num_reqs) - 1)


def mla_cache(card: ModelCard, rel: Release, cfg: dict[str, Any]) -> bool:
    """Whether the release keeps the latent (MLA) cache for `card` (module docstring)."""
    if card.latent_attention is None:
        return False
    if rel >= MLA_DEFAULT:
        return True  # --disable-mla is not modelled here
    return rel >= MLA_OPT_IN and bool(cfg.get("enable_mla"))


def mha_card(
    card: ModelCard, rel: Release | None, cfg: dict[str, Any], assumptions: list[str]
) -> ModelCard:
    """`card` as a release without the latent cache sizes its pool: MHA K and V of the
    special-cased head_dim per KV head; unchanged where the release keeps the latent cache or
    does not special-case the architecture."""
    if rel is None or card.latent_attention is None or mla_cache(card, rel, cfg):
        return card
    special = MHA_HEAD_DIM.get(card.architecture)
    if special is None or rel < special[1]:
        return card
    head_dim = special[0]
    assumptions.append(
        f"MLA off (--enable-mla not given): the pool keeps K and V of {card.num_kv_heads} heads "
        f"x {head_dim} per layer"
    )
    return card.model_copy(update={"latent_attention": None, "head_dim": head_dim})
