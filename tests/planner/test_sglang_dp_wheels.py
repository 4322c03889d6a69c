"""planner.sglang_dp against the releases themselves: each case reads the release's PyPI wheel
(tests.wheels: downloaded once, a skip without a registry) and runs or reads the code that sets
the DP-attention size, the chunked prefill size, the LM head's layout and the log prefix."""

from __future__ import annotations

import ast
import re
from types import SimpleNamespace

import pytest

from autotune.planner import sglang_dp as d
from autotune.planner.sglang_history import release
from autotune.planner.sglang_release import Release
from tests.wheels import function_def, wheel_text

SERVER_ARGS = "sglang/srt/server_args.py"


def _rel(version: str) -> Release:
    rel = release(version)
    assert rel is not None
    return rel


def _dp_block(source: str) -> ast.If:
    """The release's `if self.enable_dp_attention:` block in ServerArgs."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
            "self.enable_dp_attention",
            "self._resolved().enable_dp_attention",  # 0.5.10 .. 0.5.18
        ):
            return node
    raise AssertionError("no `if self.enable_dp_attention:` block: the release changed its code")


class _Log:
    def warning(self, *_: object) -> None:
        pass

    info = warning


VERSIONS = ["0.3.6", "0.4.0.post1", "0.4.0.post2", "0.4.1.post6", "0.4.1.post7", "0.4.4"]
VERSIONS += ["0.4.4.post1", "0.4.6.post2", "0.5.3", "0.5.15"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("dp", [2, 8, 16])
def test_dp_attention_adjustments_are_the_releases(version: str, dp: int) -> None:
    """dp_size forced to tp_size and the chunk halved up to 0.4.4, divided by dp_size from
    0.4.4.post1; the graph batch capped at 96 up to 0.4.0.post1; the overlap schedule off up to
    0.4.1.post6: the release's own block run on the same inputs."""
    block = _dp_block(wheel_text("sglang", version, SERVER_ARGS))
    rel = _rel(version)
    for cps, max_bs in ((8192, 160), (65536, 80)):
        me = SimpleNamespace(
            enable_dp_attention=True,
            tp_size=16,
            dp_size=dp,
            chunked_prefill_size=cps,
            cuda_graph_max_bs=max_bs,
            disable_overlap_schedule=False,
            schedule_conservativeness=1.0,
        )
        ns: dict[str, object] = {"self": me, "logger": _Log()}
        exec(compile(ast.Module(body=block.body, type_ignores=[]), version, "exec"), ns)
        size = d.attention_dp_size({"enable_dp_attention": True, "dp_size": dp}, 16, rel)
        assert size == me.dp_size, version
        want = (me.chunked_prefill_size, me.cuda_graph_max_bs, not me.disable_overlap_schedule)
        assert d.adjusted(cps, max_bs, True, size, rel) == want, (version, cps)


@pytest.mark.parametrize(
    ("version", "divisor"), [("0.5.19", "cfg.dp_size"), ("0.5.22", "cfg.attn_dp_size")]
)
def test_the_arg_groups_divide_the_chunk_by_the_dp_size(version: str, divisor: str) -> None:
    """From 0.5.19 the rule lives in arg_groups/parallel_hook.py, still after the memory
    defaults (its own comment: the prefill graph's max_bs was derived from the pre-DP-division
    chunked_prefill_size in _handle_gpu_memory_settings, which runs before this handler)."""
    src = wheel_text("sglang", version, "sglang/srt/arg_groups/parallel_hook.py")
    assert f"chunked_prefill_size=cfg.chunked_prefill_size // {divisor}" in src
    assert d.chunked_prefill(8192, 16, _rel(version)) == 512


@pytest.mark.parametrize("version", ["0.4.6.post2", "0.5.3", "0.5.15"])
def test_the_memory_defaults_see_the_undivided_chunk(version: str) -> None:
    """mem_fraction_static is set before the DP division (planner.rules keeps the undivided
    size for it): in ServerArgs.__post_init__ the memory settings come first."""
    src = ast.unparse(function_def(wheel_text("sglang", version, SERVER_ARGS), "__post_init__"))
    if "_handle_gpu_memory_settings" in src:
        first, then = "self._handle_gpu_memory_settings(", "self._handle_data_parallelism("
    else:
        first, then = (
            "self.mem_fraction_static = 0.79",
            "self.chunked_prefill_size // self.dp_size",
        )
    assert 0 <= src.index(first) < src.index(then)


@pytest.mark.parametrize(
    ("version", "replicated", "dp_lm_head"),
    [
        ("0.4.4", True, False),
        ("0.4.4.post1", False, False),
        ("0.4.6.post3", False, False),
        ("0.4.6.post4", False, True),
    ],
)
def test_the_lm_head_layout_is_the_releases(
    version: str, replicated: bool, dp_lm_head: bool
) -> None:
    """DeepSeek's LM head under DP attention: a ReplicatedLinear up to 0.4.4, a ParallelLMHead
    from 0.4.4.post1, over the attention-TP group with --enable-dp-lm-head from 0.4.6.post4."""
    src = " ".join(wheel_text("sglang", version, "sglang/srt/models/deepseek_v2.py").split())
    assert ("self.lm_head = ReplicatedLinear(" in src) is replicated
    assert ('use_attn_tp_group=global_server_args_dict["enable_dp_lm_head"]' in src) is dp_lm_head
    rel = _rel(version)
    assert (rel <= d.FORCED_DP_LAST) is replicated
    assert (rel >= d.DP_LM_HEAD_FIRST) is dp_lm_head


@pytest.mark.parametrize("version", ["0.4.6.post2", "0.4.9", "0.5.3"])
def test_only_dp_controller_ranks_print_dp(version: str) -> None:
    """The log prefix: `DPn` only for a rank the DP controller starts (dp_size > 1); the
    dp_size 1 path passes no dp rank. A record whose lines print `TPn` alone did not run DP
    attention (tests/calibration/test_records.py checks the committed ones)."""
    sched = wheel_text("sglang", version, "sglang/srt/managers/scheduler.py")
    fn = function_def(sched, "run_scheduler_process")
    head: list[ast.stmt] = []
    for stmt in fn.body:
        # `prefix = ""`, the ifs that extend it (0.5.x: the router's env var first); then stop
        if not isinstance(stmt, (ast.Assign, ast.If)) or "setproctitle" in ast.unparse(stmt):
            break
        head.append(stmt)
    code = compile(ast.Module(body=head, type_ignores=[]), version, "exec")
    for dp_rank, want in ((None, " TP3"), (0, " DP0 TP3")):
        ns: dict[str, object] = {
            "server_args": SimpleNamespace(tp_size=16, pp_size=1, ep_size=1),
            "os": SimpleNamespace(environ={}),
            "tp_rank": 3,
            "pp_rank": 0,
            "dp_rank": dp_rank,
            "moe_ep_rank": 0,
            "ep_rank": 0,
        }
        exec(code, ns)
        assert str(ns["prefix"]).startswith(want), (version, ns["prefix"])
    engine = " ".join(wheel_text("sglang", version, "sglang/srt/entrypoints/engine.py").split())
    single = re.search(r"if server_args\.dp_size == 1:(.*?)else:", engine)
    assert single is not None and "target=run_scheduler_process" in single.group(1)
    assert re.search(r"pp_rank, None, writer", single.group(1)), version


@pytest.mark.parametrize(
    ("version", "flag"), [("0.5.21", False), ("0.5.22", True), ("0.5.23", True)]
)
def test_attn_dp_size_is_the_size_from_0_5_22(version: str, flag: bool) -> None:
    """0.5.22 adds --attn-dp-size and turns `--enable-dp-attention --dp-size N` into it (when it
    is left at 1); before, no such flag: the DP-attention size is dp_size alone."""
    fields = wheel_text("sglang", version, "sglang/srt/arg_groups/fields/parallel.py")
    assert ('aliases=["--attention-data-parallel-size"]' in fields) is flag
    rel = _rel(version)
    assert d.attention_dp_size({"attn_dp_size": 4}, 8, rel) == (4 if flag else 1)
    old = {"enable_dp_attention": True, "dp_size": 8}
    assert d.attention_dp_size(old, 8, rel) == 8
    assert d.attention_dp_size({**old, "attn_dp_size": 2}, 8, rel) == (2 if flag else 8)
    if flag:
        hook = wheel_text("sglang", version, "sglang/srt/arg_groups/parallel_hook.py")
        body = ast.unparse(function_def(hook, "handle_deprecated_dp_attention"))
        assert "if cfg.attn_dp_size == 1:" in body and "attn_dp_size=cfg.dp_size" in body
