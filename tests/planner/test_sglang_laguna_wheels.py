"""Laguna on SGLang against the releases' wheels (tests.wheels: downloaded once, a skip without
a registry): the two sliding-window pools it gets, where a DFLASH draft's pool is paid from, the
log line that states the full pool, and how a unified-memory GPU's free memory is read."""

from __future__ import annotations

import ast
import zipfile

import pytest

from autotune.engines.sglang.logs import parse_startup
from autotune.hardware.gpus import get_gpu
from autotune.models.config_cards import config_card
from autotune.planner.common import GIB
from autotune.planner.drafts import draft_model
from autotune.planner.sglang import plan_sglang
from autotune.planner.sglang_swa import (
    DFLASH_IN_SWA_CELL_SINCE,
    HYBRID_SWA_ARCHITECTURES,
    hybrid_by_architecture,
)
from tests.wheels import engine_wheel_or_skip

LAGUNA = "LagunaForCausalLM"
POOLS = "sglang/srt/model_executor/pool_configurator.py"


def _source(version: str, path: str) -> str:
    with zipfile.ZipFile(engine_wheel_or_skip("sglang", version)) as z:
        return z.read(path).decode()


def _rel(version: str) -> tuple[int, int, int]:
    a, b, c = (int(x) for x in version.split(".")[:3])
    return a, b, c


def _release_says_hybrid(version: str) -> bool:
    """The release's own is_hybrid_swa_model on Laguna (a config with a sliding window)."""
    tree = ast.parse(_source(version, "sglang/srt/configs/model_config.py"))
    keep = [
        n
        for n in tree.body
        if (isinstance(n, ast.FunctionDef) and n.name == "is_hybrid_swa_model")
        or (
            isinstance(n, ast.Assign)
            and all(isinstance(t, ast.Name) and t.id.endswith("_ARCHS") for t in n.targets)
        )
    ]
    ns: dict[str, object] = {}
    exec(compile(ast.Module(body=keep, type_ignores=[]), version, "exec"), ns)
    fn = ns["is_hybrid_swa_model"]
    try:
        return bool(fn([LAGUNA], type("Cfg", (), {"sliding_window": 512})()))  # type: ignore[operator]
    except TypeError:  # releases whose function takes the architectures only
        return bool(fn([LAGUNA]))  # type: ignore[operator]


@pytest.mark.parametrize("version", ["0.5.11", "0.5.12", "0.5.16"])
def test_laguna_gets_the_two_pools_from_the_release_that_lists_it(version: str) -> None:
    expected = _rel(version) >= HYBRID_SWA_ARCHITECTURES[LAGUNA]
    assert _release_says_hybrid(version) is expected, version
    card = config_card("poolside/Laguna-S-2.1-INT4")
    assert card is not None
    assert hybrid_by_architecture(card, _rel(version), {}, "sm_121") is expected


def _hybrid_class(version: str) -> str:
    src = _source(version, POOLS)
    start = src.index("class HybridSWAPoolConfigurator")
    return src[start : src.index("\nclass ", start + 1)]


@pytest.mark.parametrize("version", ["0.5.16", "0.5.17", "0.5.18"])
def test_the_dflash_draft_pool_joins_the_window_cell_in_0_5_18(version: str) -> None:
    body = _hybrid_class(version)
    in_cell = "+ self._draft_cell_size" in body
    assert in_cell is (_rel(version) >= DFLASH_IN_SWA_CELL_SINCE), version
    # Before, only EAGLE / STANDALONE draft layers enter the hybrid cell.
    assert "is_eagle()" in body


def _laguna_plan(version: str) -> tuple[int, float, float]:
    card = config_card("poolside/Laguna-S-2.1-INT4")
    assert card is not None
    cfg = {
        "mem_fraction_static": 0.85,
        "context_length": 65536,
        "page_size": 1,
        "speculative_algorithm": "DFLASH",
        "speculative_draft_model_path": "poolside/Laguna-S-2.1-DFlash-INT4",
        "swa_full_tokens_ratio": 0.8,
        "max_running_requests": 48,
    }
    plan = plan_sglang(card, get_gpu("gb10-128g"), cfg, version=version, tp=1, gpu_free_gib=115.36)
    draft = draft_model("poolside/Laguna-S-2.1-DFlash-INT4")
    assert draft is not None
    budget = 115.36 * 0.85 * GIB - plan.weights_gib * GIB - draft.weights_per_rank(1)
    return plan.kv_pool_tokens, budget, draft.layers * 8 * 2 * 128 * 2


@pytest.mark.parametrize("version", ["0.5.16", "0.5.18"])
def test_laguna_dflash_full_pool_is_the_releases_division(version: str) -> None:
    """HybridSWAPoolConfigurator: full tokens = budget // (F n_full + r S n_swa [+ draft])."""
    body = _hybrid_class(version)
    assert "self._swa_full_tokens_ratio\n                * self._swa_per_token" in body
    tokens, budget, draft_cell = _laguna_plan(version)
    per_layer = 8 * 2 * 128 * 2  # 8 KV heads of 128, K and V, bf16
    cell = per_layer * 12 + 0.8 * per_layer * 36
    if _rel(version) >= DFLASH_IN_SWA_CELL_SINCE:
        cell += draft_cell
    assert abs(tokens - int(budget // cell)) <= 1


def test_the_swa_pool_line_gives_the_full_pool() -> None:
    src = _source("0.5.16", "sglang/srt/mem_cache/swa_memory_pool.py")
    fstring = 'f"SWAKVPool mem usage: {self.mem_usage:.2f} GB, swa size: {self.size_swa}, '
    assert fstring in src
    line = f"SWAKVPool mem usage: {28.93:.2f} GB, swa size: {148717}, full size: {185897}"
    log = "\n".join(
        [
            "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 148717, K size: 10.21 GB, "
            "V size: 10.21 GB",
            "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 185897, K size: 4.25 GB, "
            "V size: 4.25 GB",
            line,
        ]
    )
    assert parse_startup(log).kv_pool_tokens == 185897


def test_an_integrated_gpu_reads_the_hosts_available_memory_in_0_5_16() -> None:
    """Why the GB10 records' weights lines are host-wide: SGLang's free memory there is psutil's
    available memory, not the device's."""
    src = _source("0.5.16", "sglang/srt/utils/common.py")
    body = src[src.index("def get_available_gpu_memory") :][:2000]
    branch = body[body.index("if props.is_integrated:") :][:600]
    assert "psutil.virtual_memory().available" in branch
