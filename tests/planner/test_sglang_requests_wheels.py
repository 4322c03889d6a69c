"""planner.sglang_requests and sglang_dp.per_rank_requests against the releases: each case reads
the release's PyPI wheel (tests.wheels: downloaded once, a skip without a registry) and runs the
code that turns the user's --max-running-requests into one rank's max_running_requests."""

from __future__ import annotations

import ast
from types import SimpleNamespace

import pytest

from autotune.hardware.gpus import get_gpu
from autotune.models.config_cards import config_card
from autotune.planner.sglang import plan_sglang
from autotune.planner.sglang_dp import per_rank_requests
from autotune.planner.sglang_history import max_running_requests as history_mrr
from autotune.planner.sglang_history import release
from autotune.planner.sglang_requests import user_requests
from tests.wheels import function_def, wheel_text

MIXIN = "sglang/srt/model_executor/model_runner_kv_cache_mixin.py"
CONFIGURATOR = "sglang/srt/mem_cache/kv_cache_configurator.py"
RESOLVER = {
    "0.5.10": (MIXIN, "_resolve_max_num_reqs"),
    "0.5.13": (MIXIN, "_resolve_max_num_reqs"),
    "0.5.14": (MIXIN, "_resolve_max_num_reqs"),
    "0.5.16": (CONFIGURATOR, "resolve_max_num_reqs"),
    "0.5.19": (CONFIGURATOR, "resolve_max_num_reqs"),
    "0.5.23": (CONFIGURATOR, "resolve_max_num_reqs"),
}
# (user's value, DP-attention size, KV tokens, context length)
CASES = [(8192, 1, 365_643, 32768), (100, 1, 365_643, 32768), (8192, 4, 10_000, 4096)]
CASES += [(3000, 1, 4000, 4096), (64, 8, 1_000_000, 8192)]


def _rel(version: str) -> tuple[int, int, int]:
    rel = release(version)
    assert rel is not None
    return rel


class _Log:
    def warning(self, *_: object) -> None:
        pass

    info = warning


@pytest.mark.parametrize("version", list(RESOLVER))
def test_the_users_value_is_the_releases(version: str) -> None:
    """The release's own resolver run on each case (no mamba state)."""
    path, name = RESOLVER[version]
    fn = function_def(wheel_text("sglang", version, path), name)
    fn.decorator_list = []
    rel = _rel(version)
    for user, dp, tokens, ctx in CASES:
        sched = SimpleNamespace(max_running_requests=user, max_mamba_cache_size=None)
        ns: dict[str, object] = {"logger": _Log(), "get_schedule": lambda s=sched: s}
        exec(compile(ast.Module(body=[fn], type_ignores=[]), version, "exec"), ns)
        me = SimpleNamespace(
            model_config=SimpleNamespace(context_len=ctx),
            server_args=SimpleNamespace(max_running_requests=user),
            dp_size=dp,
            attn_dp_size=dp,
            ps=SimpleNamespace(attn_dp_size=dp),
            mambaish_config=None,
        )
        want = ns[name](me, tokens)  # type: ignore[operator]
        share = per_rank_requests(user, dp, rel)
        assert share is not None
        assert user_requests(share, rel, tokens, ctx)[0] == want, (version, user, dp)


@pytest.mark.parametrize(
    ("version", "path", "code"),
    [
        ("0.4.1.post6", "sglang/srt/managers/tp_worker.py", None),
        (
            "0.4.1.post7",
            "sglang/srt/managers/tp_worker.py",
            "server_args.max_running_requests // (server_args.dp_size if "
            "server_args.enable_dp_attention else 1)",
        ),
        (
            "0.5.3",
            "sglang/srt/managers/tp_worker.py",
            "server_args.max_running_requests // (server_args.dp_size if "
            "server_args.enable_dp_attention else 1)",
        ),
        (
            "0.5.9",
            "sglang/srt/model_executor/model_runner.py",
            "server_args.max_running_requests // (self.dp_size)",
        ),
    ],
)
def test_dp_attention_splits_the_users_value(version: str, path: str, code: str | None) -> None:
    """Under DP attention the user's value is each DP rank's share from 0.4.1.post7 (0.4.1.post6
    takes it whole); up to 0.5.9 the scheduler then takes min(share, request pool), and the pool
    is sized by the whole value, so the share stands."""
    src = " ".join(wheel_text("sglang", version, path).split()).replace("( ", "(")
    src = src.replace(" )", ")")
    rel = _rel(version)
    assert (code is not None and code in src) == (per_rank_requests(64, 8, rel) == 8), version
    assert per_rank_requests(64, 1, rel) == 64 and per_rank_requests(None, 8, rel) is None
    if rel < (5, 9, 0):  # min(share, pool of the whole value (+1)): the share
        assert history_mrr(rel, 10_000, 4096, 8192) == 8192


def test_plans_take_the_per_rank_share() -> None:
    card = config_card("deepseek-ai/DeepSeek-V3.2-Exp")
    assert card is not None
    gpu = get_gpu("b200-180g")
    cfg = {"mem_fraction_static": 0.8, "max_running_requests": 256}
    plain = plan_sglang(card, gpu, cfg, version="0.5.9", tp=8)
    dp = plan_sglang(
        card, gpu, {**cfg, "enable_dp_attention": True, "dp_size": 8}, version="0.5.9", tp=8
    )
    assert (plain.max_running_requests, dp.max_running_requests) == (256, 32)
