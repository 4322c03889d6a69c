"""What a user reads cites public sources, never the project's internal notes (issue 18 part 6).

The note numbers (P3, K1, ...) stay as rule ids and in code; messages, rule sources, seeds,
`autotune plan --json` and the report cite an engine issue, its docs or the measurement itself.
Checked on a representative run: the calibration case planned through the CLI, the built-in
search spaces as loaded, the known-good seeds, and a report rendered from a short simulated
sweep with HiCache on (the section that used to say "FIELD-NOTES P3").
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.report import write_report
from autotune.sources import CITATIONS, cite
from autotune.space import builtin_space, builtin_spaces
from autotune.sweep.known_good import KNOWN_GOOD
from tests.report.conftest import build_sweep

INTERNAL = re.compile(r"FIELD-NOTES|sglang-internals|style-anchors|§")
# A bare note number cited in prose, e.g. "(P6)" or "K4 4": allowed only as a rule id.
NOTE_NUMBER = re.compile(r"\b[PCKFW]\d{1,2}\b")

CALIBRATION = [
    "plan",
    "--engine",
    "sglang",
    "--engine-version",
    "0.5.17",
    "--model",
    "qwen3.8-27b-awq-int4",
    "--gpu",
    "rtx-4080-super-32g",
    "--host-free-gib",
    "20",
    "--json",
]


def _internal(text: str) -> list[str]:
    return INTERNAL.findall(text)


def test_citations_are_public() -> None:
    for code, text in CITATIONS.items():
        assert text and not _internal(text), code
        assert not NOTE_NUMBER.search(text), (code, text)
    assert cite("P2") == "sglang#24121"
    assert cite("P2", "P3-reserve") == "sglang#24121; sglang#8102"
    with pytest.raises(KeyError, match="Z9"):
        cite("Z9")


def test_plan_json_of_the_calibration_case() -> None:
    from autotune.cli import app

    runner = CliRunner()
    # K1 as measured, with the roofline: assumptions and the perf model name
    k1 = ["--set", "mem_fraction_static=0.92", "--set", "max_mamba_cache_size=6"]
    k1 += ["--set", "max_running_requests=2", "--set", "kv_cache_dtype=fp8_e4m3"]
    done = runner.invoke(app, [*CALIBRATION, *k1, "--perf"])
    assert done.exit_code == 0, done.output
    assert not _internal(done.output), done.output
    out = json.loads(done.output)
    assert "RTX 4080 SUPER 32G" in out["perf"]["model"]
    # a host pool over available - 10 GiB and NEXTN on a pack without MTP: both refused
    bad = ["--set", "enable_hierarchical_cache=true", "--set", "hicache_size=32"]
    bad += ["--set", "hicache_io_backend=direct", "--set", "speculative_algorithm=NEXTN"]
    done = runner.invoke(app, [*CALIBRATION, *bad])
    assert not _internal(done.output), done.output
    reasons = " ".join(json.loads(done.output)["reasons"])
    assert "sglang#8102" in reasons and "vllm#35548" in reasons
    assert not NOTE_NUMBER.search(reasons), reasons


@pytest.mark.parametrize("engine", builtin_spaces())
def test_builtin_space_texts(engine: str) -> None:
    space = builtin_space(engine)
    for rule in space.rules:
        for text in (rule.source, rule.reason):
            assert not _internal(text), (rule.id, text)
            assert not NOTE_NUMBER.search(text), (rule.id, text)
    for name, p in space.parameters.items():
        assert not _internal(p.description), name
        assert not NOTE_NUMBER.search(p.description), (name, p.description)
    dumped = json.dumps(space.to_dict())  # what `autotune space show --json` prints
    assert not _internal(dumped)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_rule_sources_match_the_citation_table(engine: str) -> None:
    """A rule named after a note number carries that note's citation (one wording)."""
    checked = 0
    for rule in builtin_space(engine).rules:
        key = f"{rule.id}-{engine}" if f"{rule.id}-{engine}" in CITATIONS else rule.id
        if key in CITATIONS:
            assert rule.source == CITATIONS[key], rule.id
            checked += 1
    assert checked >= 5


def test_rule_sources_cite_the_engines() -> None:
    sources = {r.id: r.source for r in builtin_space("sglang").rules}
    assert sources["P2"] == "sglang#24121"
    assert "sglang#8102" in sources["P3"] and "sglang#22935" in sources["P12"]
    assert "SGLang 0.5.17" in sources["P1"]  # no public source: the measurement, stated


def test_known_good_seeds_say_where_they_were_measured() -> None:
    for kg in KNOWN_GOOD:
        assert not _internal(kg.source + kg.note), kg.id
        assert not NOTE_NUMBER.search(kg.source + kg.note), kg.id
        assert "measured" in kg.source, kg.id
    (k1,) = [kg for kg in KNOWN_GOOD if kg.id == "K1"]
    assert "RTX 4080 SUPER 32G" in k1.source and "SGLang 0.5.17" in k1.source


def test_templates_cite_no_internal_notes() -> None:
    folder = resources.files("autotune.report") / "templates"
    for entry in folder.iterdir():
        if entry.name.endswith(".j2"):
            assert not _internal(entry.read_text()), entry.name


def test_report_of_a_simulated_sweep(tmp_path: Path) -> None:
    hicache = {"enable_hierarchical_cache": True, "hicache_size": 12}
    hicache["hicache_io_backend"] = "direct"
    built = build_sweep(tmp_path, n_complete=3, with_failures=True, extra_config=hicache)
    out = tmp_path / "report"
    try:
        write_report(built.store, built.sweep, out, plots=False)
    finally:
        built.store.close()
    texts = {p.name: p.read_text() for p in out.iterdir() if p.suffix in {".md", ".sh", ".json"}}
    assert "report.md" in texts and "launch.sh" in texts
    for name, text in texts.items():
        assert not _internal(text), name
    assert "SGLang refuses a pool above available - 10 GiB (sglang#8102)" in texts["report.md"]
