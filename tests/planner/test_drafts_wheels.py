"""The release facts planner.sglang_draft, planner.vllm_draft and rules.speculative_reserve_mib
rest on, read from the engines' own wheels."""

from __future__ import annotations

import re
import zipfile

import pytest

from tests.wheels import engine_wheel_or_skip


def _source(engine: str, version: str, path: str) -> str:
    with zipfile.ZipFile(engine_wheel_or_skip(engine, version)) as z:
        return z.read(path).decode()


def _spec_reserve_block(text: str) -> str:
    """The speculative branch of the mem-fraction heuristic, '' when there is none."""
    pattern = r"if self\.speculative_algorithm is not None:\n(?:\s+.*\n){1,8}"
    blocks = [m.group(0) for m in re.finditer(pattern, text)]
    return next((b for b in blocks if "reserved_mem +=" in b), "")


@pytest.mark.parametrize(
    ("version", "other_mib"),
    [("0.5.9", "2 * 1024"), ("0.5.10", "4 * 1024"), ("0.5.13", "4 * 1024"), ("0.5.14", None)],
)
def test_sglang_speculative_reserve(version: str, other_mib: str | None) -> None:
    block = _spec_reserve_block(_source("sglang", version, "sglang/srt/server_args.py"))
    if other_mib is None:
        assert block == ""
    else:
        assert "reserved_mem += 6 * 1024" in block and f"reserved_mem += {other_mib}" in block


@pytest.mark.parametrize("version", ["0.5.14", "0.5.19"])
def test_sglang_loads_the_draft_before_the_target_pool(version: str) -> None:
    text = _source("sglang", version, "sglang/srt/managers/scheduler.py")
    body = text[text.index("def init_model_worker") :]
    assert body.index("self.maybe_init_draft_worker()") < body.index("self.init_memory_pools()")


@pytest.mark.parametrize(("version", "exact"), [("0.5.16", False), ("0.5.18", True)])
def test_sglang_dflash_cell(version: str, exact: bool) -> None:
    text = _source("sglang", version, "sglang/srt/model_executor/pool_configurator.py")
    assert "scale_kv_cell_size_per_token_for_dflash" in text
    assert ("draft_cell_size_per_token=" in text) is exact


@pytest.mark.parametrize(("version", "sliding"), [("0.20.2", False), ("0.25.1", True)])
def test_vllm_dflash_layers(version: str, sliding: bool) -> None:
    text = _source("vllm", version, "vllm/model_executor/models/qwen3_dflash.py")
    assert "Attention(" in text
    assert ("sliding" in text.lower()) is sliding
