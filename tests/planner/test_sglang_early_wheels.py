"""planner.sglang_early and the SGLang log parser against the releases 0.1.17 .. 0.3.1.post2
themselves: each case reads the release's PyPI wheel (tests.wheels: downloaded once, a skip
without a registry) and runs its own code (the default-mem-fraction chain, profile_max_num_token)
on the planner's inputs, or renders its startup-log f-strings for the parser."""

from __future__ import annotations

import ast
import zipfile
from types import SimpleNamespace
from typing import Any

import pytest

from autotune.engines.sglang.logs import parse_startup
from autotune.hardware.gpus import GPU_CATALOG
from autotune.models.card import ModelCard
from autotune.models.config_cards import config_card
from autotune.planner import sglang_early as e
from autotune.planner import sglang_history as h
from autotune.planner.common import GIB
from autotune.planner.sglang import StaticBudget, plan_sglang
from autotune.planner.sglang_kv import kv_cell_bytes
from tests.wheels import engine_wheel_or_skip, rendered_fstrings

# One release per range of the tables and formats (sglang_early's docstring).
TABLES = ("0.1.17", "0.1.19", "0.1.20", "0.1.21", "0.1.22", "0.1.24", "0.2.6", "0.2.7", "0.2.15")
PROFILES = ("0.1.17", "0.1.18", "0.1.24", "0.2.9", "0.2.10", "0.2.14", "0.3.0", "0.3.1.post2")
LOGS = ("0.1.17", "0.1.20", "0.1.24", "0.2.0", "0.2.7", "0.2.13", "0.2.14")


def _card(name: str) -> ModelCard:
    card = config_card(name)
    assert card is not None, name
    return card


def _names(version: str) -> list[str]:
    with zipfile.ZipFile(engine_wheel_or_skip("sglang", version)) as z:
        return z.namelist()


def _source(version: str, *paths: str) -> str:
    """The first of `paths` the wheel holds (files moved between releases)."""
    names = set(_names(version))
    with zipfile.ZipFile(engine_wheel_or_skip("sglang", version)) as z:
        for path in paths:
            if path in names:
                return z.read(path).decode()
    raise AssertionError(f"{version}: none of {paths}")


def _model_runner(version: str) -> str:
    return _source(
        version,
        "sglang/srt/managers/controller/model_runner.py",
        "sglang/srt/model_executor/model_runner.py",
    )


def _tp_worker(version: str) -> str:
    return _source(
        version, "sglang/srt/managers/controller/tp_worker.py", "sglang/srt/managers/tp_worker.py"
    )


def _function(source: str, name: str) -> ast.FunctionDef:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError(f"no {name}: the release changed its code")


@pytest.mark.parametrize("version", TABLES)
def test_mem_fraction_tables_are_the_releases(version: str) -> None:
    src = _source(version, "sglang/srt/server_args.py")
    chain = next(
        n
        for n in ast.walk(ast.parse(src))
        if isinstance(n, ast.If) and "mem_fraction_static is None" in ast.unparse(n.test)
    )
    rel = h.release(version)
    assert rel is not None and e.is_early(rel)
    for tp in (1, 2, 3, 4, 8, 16, 32):
        ns: dict[str, Any] = {"self": SimpleNamespace(tp_size=tp, mem_fraction_static=None)}
        exec(ast.unparse(chain), ns)  # the release's own branch chain: constants only
        got = h.default_mem_fraction(rel, 81559, tp, 8192, 160, None)
        assert got == pytest.approx(ns["self"].mem_fraction_static), (version, tp)


def _profiled_tokens(
    version: str, card_name: str, tp: int, enable_mla: bool, total: float, avail: float
) -> int:
    """The release's profile_max_num_token run on the card's config values (model_config's
    head_dim special case included) with `total` and `avail` GiB free."""
    card = _card(card_name)
    mc_src = _source(version, "sglang/srt/model_config.py", "sglang/srt/configs/model_config.py")
    head_dim = card.head_dim
    if card.latent_attention is not None:  # the release's "special judge" for DeepSeek-V2
        assert 'if "DeepseekV2ForCausalLM" in self.hf_config.architectures:' in mc_src
        assert "self.head_dim = 256" in mc_src
        head_dim = 256
    mla = card.latent_attention
    model_config = SimpleNamespace(
        head_dim=head_dim,
        num_key_value_heads=card.num_kv_heads,
        get_num_kv_heads=lambda tp_size: max(1, card.num_kv_heads // tp_size),
        num_hidden_layers=card.num_layers,
        attention_arch="MLA" if mla is not None else "MHA",
        kv_lora_rank=mla.kv_lora_rank if mla else None,
        qk_rope_head_dim=mla.qk_rope_head_dim if mla else None,
    )
    runner = SimpleNamespace(
        gpu_id=0,
        tp_size=tp,
        mem_fraction_static=h.default_mem_fraction(
            h.release(version) or e.FIRST, 0, tp, 0, 0, None
        ),
        model_config=model_config,
        server_args=SimpleNamespace(enable_mla=enable_mla, disable_mla=False),
        dtype="bfloat16",
        kv_cache_dtype="bfloat16",
    )
    fn = _function(_model_runner(version), "profile_max_num_token")
    fn.decorator_list = []
    ns: dict[str, Any] = {
        "get_available_gpu_memory": lambda gpu_id, distributed=False: avail,
        "torch": SimpleNamespace(_utils=SimpleNamespace(_element_size=lambda dtype: 2)),
        "AttentionArch": SimpleNamespace(MLA="MLA", MHA="MHA"),
    }
    exec(ast.unparse(fn), ns)
    return int(ns["profile_max_num_token"](runner, total))


@pytest.mark.parametrize("version", PROFILES)
@pytest.mark.parametrize(
    ("card_name", "tp", "enable_mla"),
    [
        ("Qwen/Qwen2-7B-Instruct", 1, False),
        ("Qwen/Qwen2-7B-Instruct", 8, False),  # 4 KV heads: replicated at TP 8 (0.1.18 on)
        ("deepseek-ai/DeepSeek-V2-Lite-Chat", 1, False),
        ("deepseek-ai/DeepSeek-V2-Lite-Chat", 2, True),
    ],
)
def test_the_pool_is_the_releases_profile(
    version: str, card_name: str, tp: int, enable_mla: bool
) -> None:
    """planner.sglang's budget (pre * mfs - weights) over the cell sglang_early gives the card
    (MHA-style without the latent cache) is the release's own token count."""
    rel = h.release(version)
    assert rel is not None
    card = _card(card_name)
    if card.latent_attention is not None and rel < e.MHA_HEAD_DIM[card.architecture][1]:
        pytest.skip("the architecture is newer than the release")
    if tp > card.num_kv_heads and rel < (1, 18, 0):
        pytest.skip("0.1.17 divides the KV heads by TP without a floor (a launch that fails)")
    total, avail = 75.25, 60.5
    mfs = h.default_mem_fraction(rel, 0, tp, 0, 0, None)
    cfg = {"enable_mla": True} if enable_mla else {}
    planned_card = e.mha_card(card, rel, cfg, [])
    cell = kv_cell_bytes(planned_card, "bf16", tp, v_head=False)
    budget = StaticBudget(total, total - avail, mfs)
    expected = int(budget.rest_gib * GIB // cell)
    got = _profiled_tokens(version, card_name, tp, enable_mla, total, avail)
    assert abs(got - expected) <= 1, (version, card_name, tp, enable_mla)  # float rounding


@pytest.mark.parametrize("version", ["0.2.9", "0.2.10", "0.3.1.post1", "0.3.1.post2"])
def test_the_mla_flag_is_the_releases(version: str) -> None:
    src = _source(version, "sglang/srt/server_args.py")
    rel = h.release(version)
    assert rel is not None
    assert ("--enable-mla" in src) is (e.MLA_OPT_IN <= rel < e.MLA_DEFAULT)
    assert ("--disable-mla" in src) is (rel >= e.MLA_DEFAULT)


def test_minicpm3_is_special_cased_from_0_3_1() -> None:
    for version, present in (("0.3.0", False), ("0.3.1", True)):
        src = _source(version, "sglang/srt/model_config.py", "sglang/srt/configs/model_config.py")
        assert ('"MiniCPM3ForCausalLM" in self.hf_config.architectures' in src) is present
        if present:
            assert "self.head_dim = 128" in src
    assert e.MHA_HEAD_DIM["MiniCPM3ForCausalLM"] == (128, (3, 1, 0))


@pytest.mark.parametrize(
    ("version", "pool_text", "capped"),
    [
        ("0.1.21", "int(self.max_total_num_tokens / self.model_config.context_len * 256)", False),
        (
            "0.1.22",
            "max(int(self.max_total_num_tokens / self.model_config.context_len * 512), 2048)",
            False,
        ),  # noqa: E501
        (
            "0.1.24",
            "max(int(self.max_total_num_tokens / self.model_config.context_len * 512), 2048)",
            True,
        ),  # noqa: E501
        (
            "0.2.7",
            "min(max(int(self.max_total_num_tokens / self.model_config.context_len * 512), 2048), 5120)",
            True,
        ),  # noqa: E501
        (
            "0.2.15",
            "min(max(int(self.max_total_num_tokens / self.model_config.context_len * 512), 2048), 5120)",
            True,
        ),  # noqa: E501
    ],
)
def test_the_request_pool_is_the_releases(version: str, pool_text: str, capped: bool) -> None:
    """sglang_early.request_pool / max_running_requests: the pool expression in
    init_memory_pool, and the `size - 1` cap in the scheduler from 0.1.24."""
    body = ast.unparse(_function(_model_runner(version), "init_memory_pool"))
    assert pool_text in body, version
    worker = " ".join(_tp_worker(version).split())
    assert ("self.model_runner.req_to_token_pool.size - 1" in worker) is capped
    rel = h.release(version)
    assert rel is not None
    tokens, ctx = 1_000_000, 4096
    pool = eval(
        pool_text,
        {
            "self": SimpleNamespace(
                max_total_num_tokens=tokens, model_config=SimpleNamespace(context_len=ctx)
            )
        },
    )  # noqa: E501
    assert e.request_pool(rel, tokens, ctx, None) == pool
    expected = min(tokens // 2, pool - 1) if capped else tokens // 2
    assert h.max_running_requests(rel, tokens, ctx, None) == expected


def _rendered(source: str, marker: str) -> list[str]:
    """Every f-string of `source` holding `marker`, numbers in its fields (a new one each)."""
    return [t for t in rendered_fstrings(source) if marker in t and "Warning" not in t]


@pytest.mark.parametrize("version", LOGS)
def test_the_releases_startup_lines_parse(version: str) -> None:
    """The begin / end / summary f-strings (their `[gpu_id=N] ` prefix with N = 0 rendered as
    the release prints it for rank 0) give the parser its figures."""
    runner, worker = _model_runner(version), _tp_worker(version)
    begin = _rendered(runner, "Load weight begin")
    end = _rendered(runner, "Load weight end")
    summary = _rendered(worker, "max_total_num_tokens=")
    assert begin and end and summary, version
    rank0 = {"[gpu_id=": "[gpu_id=0]", "[gpu=": "[gpu=0]"}

    def zero(line: str) -> str:
        for opening, fixed in rank0.items():
            if line.startswith(opening):
                return fixed + line[line.index("]") + 1 :]
        return line

    log = "\n".join(zero(line) for line in (begin[0], end[0], summary[0])) + "\n"
    report = parse_startup(log)
    assert report.free_before_weights_gib is not None, (version, log)
    assert report.weights_gib is not None, (version, log)  # begin - end
    assert report.max_total_num_tokens is not None, (version, log)
    has_mrr = "max_running_requests=" in summary[0]
    assert (report.max_running_requests is not None) is has_mrr
    rel = h.release(version)
    assert rel is not None and has_mrr is (rel >= (1, 24, 0))


@pytest.mark.parametrize("version", ["0.2.5", "0.2.6", "0.2.7", "0.2.15", "0.3.0", "0.3.1"])
def test_max_num_reqs_sizes_the_request_pool(version: str) -> None:
    """--max-num-reqs (0.2.6 .. 0.3.0) goes to init_memory_pool as the request pool's size, and
    the scheduler caps max_running_requests at that size - 1: a launch config's value reaches
    the plan in exactly the releases whose parser has the flag."""
    rel = h.release(version)
    assert rel is not None
    has_flag = '"--max-num-reqs"' in _source(version, "sglang/srt/server_args.py")
    runner = " ".join(_model_runner(version).split())
    assert ("server_args.max_num_reqs" in runner) is has_flag
    assert has_flag is ((2, 6, 0) <= rel < (3, 1, 0))
    if has_flag:
        worker = " ".join(_tp_worker(version).split())
        assert "self.model_runner.req_to_token_pool.size - 1" in worker
    plan = plan_sglang(
        _card("Qwen/Qwen2-7B-Instruct"),
        GPU_CATALOG["a100-80g"],
        {"max_num_reqs": 64},
        version=version,
        gpu_free_gib=78.0,
    )
    assert (plan.max_running_requests == 63) is has_flag, (version, plan.max_running_requests)
