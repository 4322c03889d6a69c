"""Launch records: the schema, errors that name the file and field, and the committed set."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.calibration.records import load_record, load_records
from autotune.errors import ConfigError

RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches"

GOOD = """\
source: https://github.com/sgl-project/sglang/issues/1
posted: 2025-03-14
engine: sglang
version: 0.4.3
version_from: stated
gpu: NVIDIA H100 80GB HBM3
gpu_vendor: nvidia
gpu_count: 1
tp: 1
model: Qwen/Qwen3-30B-A3B
family: moe
quantization: bf16
log: |
  [2025-03-14 10:00:00] KV Cache is allocated. #tokens: 1000, K size: 0.10 GB, V size: 0.10 GB
"""


def test_a_record_loads(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(GOOD)
    rec = load_record(path)
    assert rec.name == "r" and rec.tp == 1 and rec.posted.year == 2025
    assert rec.lines == [GOOD.splitlines()[-1].strip()]


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (("engine: sglang", "engine: tgi"), "engine"),
        (("tp: 1", "tp: 0"), "tp"),
        (("https://github.com/sgl-project/sglang/issues/1", "https://example.com/x"), "source"),
        (("version_from: stated", "version_from: guess"), "version_from"),
    ],
)
def test_bad_fields_are_named(tmp_path: Path, edit: tuple[str, str], field: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.replace(*edit))
    with pytest.raises(ConfigError) as err:
        load_record(path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_unknown_field_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "extra.yaml"
    path.write_text(GOOD + "gpu_memory: 80\n")
    with pytest.raises(ConfigError, match="gpu_memory"):
        load_record(path)


def test_planner_gap_is_its_own_field(tmp_path: Path) -> None:
    """A cause in the engine's own accounting goes in planner_gap, not unmodelled (which the
    fidelity table's 'nothing unmodelled' share leaves out)."""
    path = tmp_path / "gap.yaml"
    path.write_text(GOOD + "planner_gap:\n  - the allocator's reserved pool\n")
    rec = load_record(path)
    assert rec.planner_gap == ["the allocator's reserved pool"] and rec.unmodelled == []


def test_committed_records_load_and_are_distinct() -> None:
    records = load_records(RECORDS)
    assert records, f"no records under {RECORDS}"
    keys = [(r.source, tuple(r.lines)) for r in records]
    assert len(keys) == len(set(keys)), "the same launch is recorded twice"
    for rec in records:
        assert rec.path is not None and rec.path.parent.name == rec.engine


def test_dp_attention_records_print_their_dp_ranks() -> None:
    """The replay runs an SGLang record with dp > 1 inside its TP group as DP attention; ranks a
    DP controller starts print `DPn` before `TPn` (scheduler.py run_scheduler_process, read in
    tests/planner/test_sglang_dp_wheels.py), so a line with `TPn` alone came from a launch
    with dp_size 1."""
    import re

    prefix = re.compile(r"^\s*\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d((?: [A-Z]+\d+)+)\]", re.M)
    seen = 0
    for rec in load_records(RECORDS):
        if rec.engine != "sglang" or rec.dp <= 1 or rec.gpu_count != rec.tp:
            continue
        ranks = [p for p in prefix.findall(rec.log) if " TP" in p]
        assert ranks, rec.name
        assert all(p.startswith(" DP") for p in ranks), (rec.name, ranks)
        seen += 1
    assert seen


def test_args_completed_from_elsewhere_count_as_unstated() -> None:
    """A record whose args block says the excerpt cut the launch's args (and fills them from a
    compose file or another source) lists them as unstated: its source does not show them."""
    cut = ("excerpt cuts the args line", "cut from the excerpt")
    for rec in load_records(RECORDS):
        assert rec.path is not None
        text = rec.path.read_text(encoding="utf-8")
        block = text.split("\nargs:", 1)[-1].split("\nlog:", 1)[0] if "\nargs:" in text else ""
        if any(phrase in block for phrase in cut):
            assert rec.unstated, rec.name
