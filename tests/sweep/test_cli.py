"""`autotune sweep` and `autotune status` through the typer app."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from autotune.cli import app
from autotune.sweep.analytic import AnalyticExecutor
from autotune.sweep.orchestrator import run_sweep
from autotune.sweep.spec import parse_spec
from tests.sweep.conftest import make_spec, write_spec

runner = CliRunner()


def _invoke(*args: str) -> Any:
    from autotune.cli import main  # noqa: F401 - the app registers its commands on import

    return runner.invoke(app, list(args), catch_exceptions=True)


def test_sweep_rejects_a_bad_spec_with_its_location(tmp_path: Path) -> None:
    path = write_spec(tmp_path, make_spec(**{"objective.metric": "tp.bogus"}))
    res = _invoke("sweep", str(path), "--db", str(tmp_path / "x.db"))
    assert res.exit_code != 0
    err = res.exception
    assert err is not None and "objective.metric" in str(err) and "bogus" in str(err)
    assert getattr(err, "exit_code", None) == 2


def test_status_lists_and_describes_sweeps(tmp_path: Path) -> None:
    from autotune.store.db import Store

    db = tmp_path / "s.db"
    store = Store(path=db)
    run_sweep(
        parse_spec(make_spec(**{"budget.max_trials": 3})),
        store=store,
        out_dir=tmp_path / "out",
        executor=AnalyticExecutor(1),
        install_signals=False,
    )
    store.close()
    res = _invoke("status", "--db", str(db), "--json")
    assert res.exit_code == 0, res.output
    listing = json.loads(res.output)["sweeps"]
    assert [s["name"] for s in listing] == ["t"] and listing[0]["status"] == "finished"
    res = _invoke("status", "t", "--db", str(db), "--json")
    info = json.loads(res.output)
    assert info["launched"] == 3 and info["counts"]["complete"] >= 3
    assert info["best"]["value"] > 0 and info["baseline"]["number"] == 0
    assert info["planner_correction"]["launches"] == 3
    text = _invoke("status", "t", "--db", str(db))
    assert "best: #" in text.output and "launched 3" in text.output
    missing = _invoke("status", "nope", "--db", str(db))
    assert missing.exit_code != 0 and "no sweep 'nope'" in str(missing.exception)


def test_demo_report_hook_is_optional(tmp_path: Path) -> None:
    import sys
    import types

    from autotune.cli.sweep import write_report_if_available

    calls: list[tuple[Any, str, Path]] = []
    fake = types.ModuleType("autotune.report")
    fake.write_report = lambda store, name, out: calls.append((store, name, out)) or out / "r.md"  # type: ignore[attr-defined]
    saved = sys.modules.get("autotune.report")
    sys.modules["autotune.report"] = fake
    try:
        assert write_report_if_available("store", "demo-1", tmp_path) == tmp_path / "r.md"
        assert calls == [("store", "demo-1", tmp_path)]
        del fake.write_report  # type: ignore[attr-defined]
        assert write_report_if_available("store", "demo-1", tmp_path) is None
    finally:
        if saved is not None:
            sys.modules["autotune.report"] = saved
        else:
            del sys.modules["autotune.report"]
