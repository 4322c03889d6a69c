"""SGLang's memory defaults and accounting before 0.5.9 (0.3.0 .. 0.5.8), release by release.

The flag catalog (and so launching) starts at 0.5.9; planning goes further back so that public
startup logs of older releases can be replayed. Every rule here was read from the release
wheels on PyPI (`sglang/srt/server_args.py` `ServerArgs.__post_init__` /
`_handle_gpu_memory_settings`, `model_executor/model_runner.py`, `managers/tp_worker.py`),
comparing each function across every release 0.3.0 .. 0.5.9 to find where it changed:

- default mem_fraction_static: by TP size only (<= 0.4.5.post2), special cases above 80 GiB
  (0.4.5.post3 .. 0.4.7), a reserve table by GPU size (0.4.7.post1 .. 0.5.2), the reserved-memory
  formula of later releases (0.5.3+, with a reserve for DP attention); vision-language models
  scaled (model_runner, <= 0.4.8.post1 even when the user set it); fixed at 0.8 for DeepSeek
  NSA models in 0.5.3;
- chunked_prefill_size and the CUDA-graph max batch size by GPU memory;
- max_running_requests: the request pool held one extra slot in 0.3.1.post2 .. 0.4.6.post5;
- speculative (EAGLE family) targets log `profile + mrr * (steps * topk + draft) + 100` tokens
  in 0.4.3.post3 .. 0.5.6.post2;
- the MHA cell counts 2 x head_dim before 0.5.7 (head_dim + v_head_dim from then).

A release is (minor, patch, post) of 0.minor.patch[.postN]; a release candidate sorts before
its release (post -1). The releases before 0.3.0 (0.1.17 .. 0.2.15) are planner.sglang_early's;
the functions here hand them over.
"""

from __future__ import annotations

from autotune.planner import sglang_early
from autotune.planner.sglang_release import Release
from autotune.versions import try_version

FIRST: Release = (3, 0, 0)
CATALOG_FIRST: Release = (5, 9, 0)  # the flag catalog's first release (planner.rules)
_GIB = 1024  # MiB


def release(version: str) -> Release | None:
    """`0.4.3.post3` -> (4, 3, 3); `0.5.3rc0` -> (5, 3, -1); None for anything but a 0.x.y
    version (parsed by autotune.versions, so a `v` prefix, dev and local parts are accepted)."""
    v = try_version(version)
    if v is None or v.epoch or v.release[0] != 0 or len(v.release) < 2:
        return None
    minor, patch = v.release[1], (v.release[2] if len(v.release) > 2 else 0)
    return minor, patch, -1 if v.pre is not None else (v.post or 0)


def is_history(version: str) -> bool:
    """Whether `version` is a release this module (0.3.0 <= v < 0.5.9) or sglang_early
    (0.1.17 .. 0.2.15) models."""
    rel = release(version)
    return rel is not None and sglang_early.FIRST <= rel < CATALOG_FIRST


def _tp_table(p: int, at8: float) -> float:
    return 0.79 if p >= 16 else at8 if p >= 8 else 0.85 if p >= 4 else 0.87 if p >= 2 else 0.88


def gpu_size_defaults(rel: Release, gpu_mib: int, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) the release picks for this GPU."""
    g, small_bs = gpu_mib, (8 if tp < 4 else 80)
    if rel < (3, 5, 2):
        return 8192, 160
    if rel < (4, 0, 0):
        return (2048, 4) if g < 25000 else (8192, 160)
    if rel < (4, 5, 3):
        return (2048, 8 if rel < (4, 0, 1) else small_bs) if g < 25000 else (8192, 160)
    if rel < (4, 7, 1):
        if g < 25000:
            return 2048, small_bs
        big = g > 81920 if rel < (4, 6, 2) else g > 96 * _GIB
        bs = 512 if rel >= (4, 7, 0) and g > 180_000 else 256 if big else 160
        return (16384 if rel >= (4, 7, 0) and g > 180_000 else 8192), bs
    if rel < (5, 3, 0):
        if g < 35 * _GIB:
            return 2048, small_bs
        bs = 512 if g > 160_000 else 256 if g > 90 * _GIB else 160
        return (8192 if g < 160 * _GIB else 16384), bs
    if g < 20 * _GIB:
        return 2048, 8
    if g < 35 * _GIB:
        return 2048, ((16 if rel < (5, 4, 1) else 24) if tp < 4 else 80)
    if g < 60 * _GIB:
        return 4096, 32 if tp < 4 else 160
    if g < 160 * _GIB:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def default_mem_fraction(
    rel: Release,
    gpu_mib: int,
    tp: int,
    cps: int,
    max_bs: int,
    spec: str | None,
    dp_attention: int = 1,
) -> float:
    """The release's mem_fraction_static when the flag is not given (text model, pp 1);
    `dp_attention`: the DP-attention size (1: off)."""
    if rel < FIRST:
        return sglang_early.default_mem_fraction(rel, tp)
    if rel < (4, 5, 3):
        return _tp_table(tp, 0.83 if rel < (3, 6, 0) else 0.82 if rel < (4, 0, 0) else 0.81)
    if rel < (4, 6, 2):
        return _tp_table(tp, 0.81) if gpu_mib <= 81920 else (gpu_mib - 13 * _GIB) / gpu_mib
    if rel < (4, 7, 1):
        return _above_80_gib(rel, gpu_mib, tp, spec)
    if rel < (5, 3, 0):
        reserved = _reserve_table_mib(gpu_mib, tp)
        if spec is not None:
            reserved += 6 * _GIB if spec == "STANDALONE" and rel >= (5, 2, 0) else 2 * _GIB
        return round((gpu_mib - reserved) / gpu_mib, 3)
    reserved = 512 + max(cps, 2048) * 1.5 + max_bs * 2 + tp / 8 * _GIB
    reserved += dp_attention_reserve_mib(dp_attention, max_bs)
    if gpu_mib > 60 * _GIB:
        reserved = max(reserved, 10 * _GIB)
    if spec == "STANDALONE":
        reserved += 6 * _GIB
    elif spec not in (None, "NGRAM"):
        reserved += 2 * _GIB
    return round((gpu_mib - reserved) / gpu_mib, 3)


def dp_attention_reserve_mib(dp_size: int, max_bs: int) -> float:
    """What the heuristic holds back for DP attention's padding (0.5.3 on; not in 0.5.3rc0):
    3 MiB per graph batch size and DP rank, 1.5 more above a graph batch size of 300
    (server_args._handle_gpu_memory_settings; arg_groups/memory_hook.reserve_for_graph_mb from
    0.5.19), before the 10 GiB floor."""
    if dp_size <= 1:
        return 0.0
    return max_bs * dp_size * (3 + (1.5 if max_bs > 300 else 0))


def nsa_fixed_mem_fraction(rel: Release) -> float | None:
    """0.5.3 fixes mem_fraction_static at 0.8 for DeepSeek NSA (DSA) models, over the user's
    value too, beside forcing DP attention and page 64 (server_args, "Setting mem fraction
    static to 0.8 for DeepSeek NSA."); 0.5.3.post1 dropped the fixed fraction."""
    return 0.8 if rel == (5, 3, 0) else None


def _above_80_gib(rel: Release, gpu_mib: int, tp: int, spec: str | None) -> float:
    """0.4.6.post2 .. 0.4.7: the tp table up to 80 GiB, 0.88 plus a share of 48 GiB above
    96 GiB capped by a fixed reserve (PR #5893), B200 fixed at 0.79 (0.4.7, PR #6718)."""
    m = _tp_table(tp, 0.81) if gpu_mib <= 81920 else 0.88
    if rel >= (4, 7, 0) and gpu_mib > 180_000:
        return 0.79
    if gpu_mib > 96 * _GIB:
        reserve = (20 if rel >= (4, 7, 0) and spec else 18) * _GIB
        return min(m + 48 * _GIB * (1 - m) / gpu_mib, (gpu_mib - reserve) / gpu_mib)
    if rel >= (4, 7, 0) and spec:
        return m * 0.95
    return m


def _reserve_table_mib(gpu_mib: int, p: int) -> float:
    """0.4.7.post1 .. 0.5.2: GiB reserved outside the static pool, by GPU size."""
    if gpu_mib < 35 * _GIB:
        gib = 2.8 + p / 10
    elif gpu_mib < 90 * _GIB:
        gib = 9.5 + p / 2
    elif gpu_mib < 160 * _GIB:
        gib = 12 + p / 2
    else:
        gib = 32
    return gib * _GIB


def vision_factor(rel: Release, user_set: bool, modern: float) -> float | None:
    """The multiplier a vision-language model's mem_fraction_static gets (None: none). Before
    0.4.9 model_runner applied it to a user-set value too; `modern` is 0.4.9.post3+'s factor."""
    if rel < (3, 5, 0):
        return None  # 0.3.0 .. 0.3.4: scaled after the KV profile had copied the value
    if rel < (4, 4, 4):
        return 0.95
    if rel < (4, 9, 0):
        return 0.90
    if user_set:
        return None
    return 0.90 if rel < (4, 9, 3) else modern


def max_running_requests(
    rel: Release, tokens: int, context_len: int, user: int | None, max_num_reqs: int | None = None
) -> int:
    """The summary line's max_running_requests: min(user or tokens // 2, request pool size).
    From 0.3.1 the user's value also sizes the request pool (model_runner.init_memory_pool gets
    server_args.max_running_requests), so it stands as given (`user`: one DP rank's share).
    `max_num_reqs` (--max-num-reqs, 0.2.6 .. 0.3.0) sizes the pool where the release has it."""
    if rel < FIRST:
        return sglang_early.max_running_requests(rel, tokens, context_len, user, max_num_reqs)
    if user is not None and rel >= (3, 1, 0):
        return user
    hi = 5120 if rel < (3, 1, 0) else 4096
    pool = min(max(int(tokens / context_len * 512), 2048), hi)
    if max_num_reqs is not None and rel < (3, 1, 0):
        pool = max_num_reqs  # 0.3.0 init_memory_pool(server_args.max_num_reqs); 0.3.1 drops it
    if (3, 1, 2) <= rel < (4, 7, 0):
        pool += 1  # ReqToTokenPool(max_num_reqs + 1)
    if rel < (3, 1, 0):
        pool -= 1  # 0.3.0's tp_worker used size - 1
    return min(tokens // 2 if user is None else user, pool)


def speculative_extra_tokens(
    rel: Release, spec: str | None, mrr: int, steps: int, topk: int, draft: int
) -> int:
    """Tokens an EAGLE-family target's pool logs beyond its profile (draft_runner_cache_size)."""
    if spec is None or not (4, 3, 3) <= rel < (5, 7, 0):
        return 0
    if spec == "NGRAM" or (spec not in ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")):
        return 0
    return mrr * (steps * topk + draft) + 100


def speculative_mrr_default(rel: Release) -> int | None:
    """max_running_requests an EAGLE launch gets when unset (None: none set)."""
    if rel < (4, 3, 3):
        return None
    return 32 if rel < (4, 4, 4) else 48


def mamba_radix_forced_off(rel: Release) -> bool:
    """0.5.2 .. 0.5.3.post1 ran hybrid (GDN) models without the radix cache."""
    return (5, 2, 0) <= rel < (5, 3, 2)


def mamba_full_memory_ratio(rel: Release) -> float:
    """--mamba-full-memory-ratio's default: 0.2 in 0.5.3.post2, 0.9 from 0.5.3.post3."""
    return 0.2 if rel == (5, 3, 2) else 0.9
