"""`autotune space check|show|schema` through the real console entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.cli import main

REPO = Path(__file__).resolve().parents[2]


def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str):
    monkeypatch.setattr("sys.argv", ["autotune", *args])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_check_shipped_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        monkeypatch,
        capsys,
        "space",
        "check",
        str(REPO / "autotune/data/search_spaces/sglang.yaml"),
    )
    assert code == 0 and "OK: engine sglang" in out and "conditional" in out
    code, out, _ = run(monkeypatch, capsys, "space", "check", "sglang", "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] and data["engine"] == "sglang"
    assert "speculative_num_steps" in data["conditional"]
    assert data["grid_size"] > 10**9


def test_check_bad_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("engine: sglang\nparameters:\n  page_sise:\n    type: bool\n")
    code, out, err = run(monkeypatch, capsys, "space", "check", str(bad))
    assert code == 2
    assert f"{bad}: parameters.page_sise: unknown parameter; did you mean 'page_size'?" in err
    assert "Traceback" not in err
    code, out, _ = run(monkeypatch, capsys, "space", "check", str(bad), "--json")
    data = json.loads(out)
    assert code == 2 and data["ok"] is False and "page_sise" in data["error"]


def test_show_and_schema(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(monkeypatch, capsys, "space", "show", "sglang")
    assert code == 0
    assert "speculative_num_draft_tokens" in out and "only when" in out and "P1" in out
    code, out, _ = run(monkeypatch, capsys, "space", "show", "sglang", "--json")
    assert json.loads(out)["fixed"]["tool_call_parser"] == "qwen3_coder"
    code, out, _ = run(monkeypatch, capsys, "space", "schema")
    assert code == 0 and json.loads(out)["title"] == "SearchSpace"


def test_show_narrowed_to_a_target(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`space show --engine-version --gpu --model`: the space a sweep on that target searches."""
    code, out, _ = run(
        monkeypatch, capsys, "space", "show", "sglang", "--engine-version", "0.5.9",
        "--gpu", "rx-7900xtx-24g", "--model", "qwen3.8-27b-awq-int4", "--json",
    )  # fmt: skip
    assert code == 0
    data = json.loads(out)
    assert data["parameters"]["attention_backend"]["choices"] == [None, "triton"]
    assert data["fixed"]["linear_attn_backend"] is None  # no such flag in 0.5.9
    assert any(line.startswith("attention_backend: flashinfer") for line in data["left_out"])
    code, _, err = run(monkeypatch, capsys, "space", "show", "sglang", "--gpu", "h100-80g")
    assert code != 0 and "--engine-version" in err
