"""Issue 19.10, secrets at rest: a sweep whose spec holds HF_TOKEN, OPENAI_API_KEY (engine.env)
and an api_key flag (space.fixed) leaves none of them in the database, the report folder or
the JSON of `sweep --json` / `status --json`, while the engine and the benchmark client get the
real values; `--resume` reads them back from the environment or the spec file given again."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.store.db import Store
from autotune.store.models import TrialStatus
from autotune.sweep.orchestrator import run_sweep
from autotune.sweep.spec import parse_spec
from tests.sweep.conftest import make_spec, write_spec

RECORDING_SIM = Path(__file__).with_name("recording_sim.py")
SECRETS = {
    "HF_TOKEN": "hf_SECRETVALUE123",
    "OPENAI_API_KEY": "sk-SECRET456",
    "API_KEY": "SECRET789",
}
runner = CliRunner()


def secret_spec(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    return make_spec(
        **{
            "engine.launcher": [sys.executable, str(RECORDING_SIM)],
            "engine.env": {
                "HF_TOKEN": SECRETS["HF_TOKEN"],
                "OPENAI_API_KEY": SECRETS["OPENAI_API_KEY"],
                "SIM_RECORD": str(tmp_path / "record.jsonl"),
            },
            "space.fixed": {"api_key": SECRETS["API_KEY"]},
            "budget.max_trials": 2,
            "search.known_good": False,
            "workload.prune_below": 0,  # every trial runs to the end: counts are exact
            **changes,
        }
    )


@pytest.fixture(autouse=True)
def _no_secrets_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # the values must come from the spec, not from the test's own environment
    for name in SECRETS:
        monkeypatch.delenv(name, raising=False)


def _invoke(*args: str) -> Any:
    from autotune.cli import main  # noqa: F401 - the app registers its commands on import

    return runner.invoke(app, list(args), catch_exceptions=True)


def leaks(root: Path, *outputs: str, skip: Path | None = None) -> list[str]:
    """'where: value' for every secret value found in a file under `root` (the database and
    its WAL, the PID registry, the report folder, server logs) or in an output."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p != skip):
        data = path.read_bytes()
        found += [f"{path}: {v}" for v in SECRETS.values() if v.encode() in data]
    for i, text in enumerate(outputs):
        found += [f"output {i}: {v}" for v in SECRETS.values() if v in text]
    return found


def recorded(tmp_path: Path) -> list[dict[str, str | None]]:
    lines = (tmp_path / "record.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def test_sweep_stores_and_prints_no_secret(tmp_path: Path) -> None:
    spec_path = write_spec(tmp_path, secret_spec(tmp_path))
    db = tmp_path / "s.db"
    out = tmp_path / "out"
    res = _invoke("sweep", str(spec_path), "--db", str(db), "--out", str(out), "--json")
    assert res.exit_code == 0, res.output
    outcome = json.loads(res.stdout)
    assert outcome["counts"] == {"complete": 2} and outcome["failures_by_class"] == {}
    assert outcome["best"]["config"]["api_key"] == "${env:API_KEY}"  # the reference, shown
    # the engine got the real values (the benchmark client sent the key: every trial completed)
    want = {k: sha(v) for k, v in SECRETS.items() if k != "API_KEY"}
    want["api_key"] = sha(SECRETS["API_KEY"])
    assert recorded(tmp_path) == [want, want]

    listing = _invoke("status", "--db", str(db), "--json")
    info = _invoke("status", "t", "--db", str(db), "--json")
    assert listing.exit_code == 0 and info.exit_code == 0, info.output
    assert (out / "report.md").is_file() and (out / "launch.sh").is_file()
    assert "server_args" in (out / "trials" / "0000" / "server.log").read_text()
    assert leaks(tmp_path, res.output, listing.output, info.output, skip=spec_path) == []

    store = Store(path=db)
    try:
        stored = store.get_sweep("t").spec_yaml
        assert "HF_TOKEN: '${env:HF_TOKEN}'" in stored and "api_key: '${env:API_KEY}'" in stored
        rows = store.get_trials(store.get_sweep("t").id or 0)
        assert {r.config["api_key"] for r in rows} == {"${env:API_KEY}"}
    finally:
        store.close()
    launch = (out / "launch.sh").read_text()
    assert "API_KEY" in launch and "HF_TOKEN" in launch  # required from the environment


def test_resume_reads_secrets_from_the_environment_or_the_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec_path = write_spec(tmp_path, secret_spec(tmp_path, **{"budget.max_trials": 1}))
    db = tmp_path / "s.db"
    common = ["--db", str(db), "--out", str(tmp_path / "out"), "--json", "--no-report"]
    first = _invoke("sweep", str(spec_path), *common)
    assert first.exit_code == 0, first.output

    # the stored spec holds references only: without the values, a clear error naming the field
    missing = _invoke("sweep", "--resume", "t", "--max-trials", "2", *common)
    assert getattr(missing.exception, "exit_code", None) == 2, missing.output  # ConfigError
    msg = str(missing.exception)
    assert "engine.env.HF_TOKEN" in msg and "set HF_TOKEN" in msg and "--resume" in msg
    store = Store(path=db)
    try:
        assert store.get_sweep("t").status == "finished"  # nothing was started
    finally:
        store.close()

    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    from_env = _invoke("sweep", "--resume", "t", "--max-trials", "2", *common)
    assert from_env.exit_code == 0, from_env.output
    assert json.loads(from_env.stdout)["counts"] == {"complete": 2}
    for name in SECRETS:
        monkeypatch.delenv(name)

    # the spec file given again brings the values itself
    from_file = _invoke("sweep", str(spec_path), "--resume", "t", "--max-trials", "3", *common)
    assert from_file.exit_code == 0, from_file.output
    assert json.loads(from_file.stdout)["counts"] == {"complete": 3}
    assert len({json.dumps(r, sort_keys=True) for r in recorded(tmp_path)}) == 1  # same values
    outs = (first.output, missing.output, from_env.output, from_file.output)
    assert leaks(tmp_path, *outs, skip=spec_path) == []


def test_failed_trial_log_tail_holds_no_secret(tmp_path: Path) -> None:
    """The engine printed its api key, then failed: the stored log tail and server.log have
    the key replaced."""
    spec = secret_spec(tmp_path, **{"budget.max_trials": 1, "budget.stop_after_env_failures": 0})
    spec["engine"]["env"]["SIM_FAIL"] = "1"
    store = Store(path=tmp_path / "s.db")
    try:
        outcome = run_sweep(
            parse_spec(spec), store=store, out_dir=tmp_path / "out", install_signals=False
        )
        assert outcome.counts == {TrialStatus.FAILED.value: 1}
        failures = store.get_failures(outcome.sweep_id)
        assert failures and "server_args" in (failures[0].log_tail or "")
        assert "<redacted>" in (failures[0].log_tail or "")
    finally:
        store.close()
    assert leaks(tmp_path) == []
