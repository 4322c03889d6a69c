"""The user's --max-running-requests as SGLang runs it on a catalogued release (0.5.9 on), read
from the release wheels (model_executor/model_runner.py 0.5.9; model_runner_kv_cache_mixin.py
_resolve_max_num_reqs 0.5.10 .. 0.5.15; mem_cache/kv_cache_configurator.py from 0.5.16):

- 0.5.9: as given (the request pool is sized by it, init_memory_pool's max_num_reqs, and the
  scheduler takes min(value, pool size));
- 0.5.10 .. 0.5.13: capped at the pool estimate, clamp(tokens / context_len x 512, 2048, 4096);
- 0.5.14 on: capped at tokens // 2.

`user` is one DP rank's share already (planner.sglang_dp.per_rank_requests).
"""

from __future__ import annotations

from autotune.planner.sglang_dp import LATEST
from autotune.planner.sglang_release import Release


def pool_estimate(kv_tokens: int, context_len: int) -> int:
    """The default request pool: clamp(tokens / context_len x 512, 2048, 4096)."""
    return min(max(int(kv_tokens / context_len * 512), 2048), 4096)


def user_requests(
    user: int, rel: Release | None, kv_tokens: int, context_len: int
) -> tuple[int, str]:
    """(max_running_requests, what bounds it: "user", "default" for the pool estimate, or
    "kv_tokens") for a user's value on release `rel` (None: the newest)."""
    r = rel or LATEST
    if r < (5, 10, 0):
        return user, "user"
    if r < (5, 14, 0):
        estimate = pool_estimate(kv_tokens, context_len)
        return (user, "user") if user <= estimate else (estimate, "default")
    return (user, "user") if user <= kv_tokens // 2 else (kv_tokens // 2, "kv_tokens")
