"""A sweep resumed with an edited spec: the row takes the new spec (text, hash, release), its
notes say after how many trials and which fields changed, and the report says so; resuming with
the same spec, however it is laid out, changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.errors import ConfigError
from autotune.report import write_report
from autotune.sweep.orchestrator import run_sweep
from autotune.sweep.resume_spec import spec_changes
from autotune.sweep.spec import parse_spec
from tests.sweep.conftest import make_spec


def _run(store: Any, tmp_path: Path, data: dict[str, Any], *, resume: bool) -> None:
    run_sweep(
        parse_spec(data),
        store=store,
        spec_yaml=yaml.safe_dump(data, sort_keys=False),
        resume=resume,
        out_dir=tmp_path / "out",
        install_signals=False,
    )


def test_an_edited_spec_is_recorded_on_resume(store: Any, tmp_path: Path) -> None:
    first = make_spec(**{"budget.max_trials": 1, "search.baseline": True})
    _run(store, tmp_path, first, resume=False)
    row = store.get_sweep("t")
    _run(store, tmp_path, first, resume=True)  # the same spec: no revision
    assert "spec_revisions" not in (store.get_sweep("t").notes or {})
    assert store.get_sweep("t").spec_hash == row.spec_hash

    edited = make_spec(
        first, **{"budget.max_trials": 2, "engine.env": {"SGLANG_LOG_LEVEL": "debug"}}
    )
    _run(store, tmp_path, edited, resume=True)
    row2 = store.get_sweep("t")
    assert row2.notes["spec_revisions"] == [
        {"after_trials": 1, "changed": ["budget.max_trials", "engine.env.SGLANG_LOG_LEVEL"]}
    ]
    assert "SGLANG_LOG_LEVEL: debug" in row2.spec_yaml and row2.spec_hash != row.spec_hash
    paths = write_report(store, "t", tmp_path / "r", plots=False)
    report = Path(paths.report_md).read_text()
    assert "the spec was edited when the sweep was resumed after 1 launches" in report


def test_spec_changes_compares_content_not_layout() -> None:
    a = "name: t\nbudget: {max_trials: 2}\nengine: {env: {A: '1'}}\n"
    b = "engine:\n  env:\n    A: '1'\nname: t\nbudget:\n  max_trials: 2\n"
    assert spec_changes(a, b) == []
    assert spec_changes(a, b.replace("max_trials: 2", "max_trials: 3")) == ["budget.max_trials"]
    assert spec_changes(a, a.replace("engine: {env: {A: '1'}}", "")) == ["engine.env.A"]


def test_a_resume_keeps_the_target(store: Any, tmp_path: Path) -> None:
    first = make_spec(**{"budget.max_trials": 1})
    _run(store, tmp_path, first, resume=False)
    for field, value in (("target.gpu", "h100-80g"), ("target.model", "qwen3.8-27b-fp8")):
        with pytest.raises(ConfigError, match=f"was run with {field}") as exc:
            _run(store, tmp_path, make_spec(first, **{field: value}), resume=True)
        assert exc.value.field == field
    row = store.get_sweep("t")
    assert row.gpu == "rtx-4080-super-32g" and "spec_revisions" not in (row.notes or {})
    # the same GPU spelled otherwise is the same target
    _run(store, tmp_path, make_spec(first, **{"target.gpu": "RTX-4080-Super-32G"}), resume=True)
