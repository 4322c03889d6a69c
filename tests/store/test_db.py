"""Store on real SQLite files (and Optuna's RDBStorage on the same file)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from autotune.errors import StorageError
from autotune.store import (
    FailureRow,
    KernelResultRow,
    Store,
    SweepStatus,
    TrialRow,
    TrialStatus,
    mask_url,
)
from autotune.store.models import TABLES

SPEC = "engine: sglang\nmodel: qwen3.8-27b-fp8\n"


@pytest.fixture
def store(tmp_path: Path) -> Store:
    with Store(path=tmp_path / "db" / "autotune.db") as s:
        yield s


def _sweep(store: Store, name: str = "night-1"):
    return store.create_sweep(
        name, spec_yaml=SPEC, engine="sglang", model="qwen3.8-27b-fp8", gpu="h200-141g"
    )


def test_sweep_crud(store: Store) -> None:
    sw = _sweep(store)
    assert sw.id is not None and sw.status == "running" and sw.optuna_study_name == "night-1"
    assert len(sw.spec_hash) == 16 and sw.created_at.tzinfo is not None
    got = store.get_sweep("night-1")
    assert got.spec_yaml == SPEC and got.model == "qwen3.8-27b-fp8"
    later = store.update_sweep_status(sw.id, SweepStatus.FINISHED)
    assert later.status == "finished" and later.updated_at >= sw.updated_at
    _sweep(store, "night-2")
    assert [s.name for s in store.list_sweeps()] == ["night-1", "night-2"]

    with pytest.raises(StorageError, match="already exists"):
        _sweep(store)
    with pytest.raises(StorageError, match=r"no sweep 'night-3'.*did you mean.*night-1"):
        store.get_sweep("night-3")
    with pytest.raises(StorageError, match="sweep status must be one of running, finished"):
        store.update_sweep_status(sw.id, "done")
    with pytest.raises(StorageError, match="unknown or read-only field.*colour"):
        store.update_sweep(sw.id, colour="red")


def test_get_sweep_on_empty_db(store: Store) -> None:
    with pytest.raises(StorageError, match="has no sweeps yet"):
        store.get_sweep("x")


def test_trials_json_roundtrip_and_best(store: Store) -> None:
    sw = _sweep(store)
    cfg = {"page_size": 64, "speculative_algorithm": "EAGLE", "cuda_graph_bs": [1, 2, 4]}
    pred = {"fits": True, "kv_pool_tokens": 123456, "reasons": []}
    t0 = store.add_trial(sw.id, number=0, config=cfg, params={"page_size": 64}, prediction=pred)
    assert t0.status == "running" and t0.started_at is not None
    launch = {"kv_pool_tokens": 120000, "warnings": ["x"], "nested": {"a": [1.5, None]}}
    done = store.update_trial(t0.id, status="complete", values=[812.5, 0.31], launch=launch)
    assert done.value == 812.5 and done.values == [812.5, 0.31]
    assert done.finished_at is not None and done.duration_s is not None and done.duration_s >= 0

    t1 = store.add_trial(sw.id, number=1, config={"page_size": 16})
    store.update_trial(t1.id, status=TrialStatus.COMPLETE, values=[900.0])
    t2 = store.add_trial(sw.id, number=2)
    store.update_trial(t2.id, status="failed")

    fresh = store.get_trial(t0.id)
    assert fresh.config == cfg and fresh.prediction == pred and fresh.launch == launch
    assert [t.number for t in store.get_trials(sw.id)] == [0, 1, 2]
    assert [t.number for t in store.get_trials(sw.id, status="complete")] == [0, 1]
    assert [t.number for t in store.get_trials(sw.id, status=["failed", "running"])] == [2]
    best = store.best_trial(sw.id)
    assert best is not None and best.number == 1
    worst = store.best_trial(sw.id, "minimize")
    assert worst is not None and worst.number == 0
    with pytest.raises(StorageError, match="trial status must be one of"):
        store.get_trials(sw.id, status="done")
    with pytest.raises(StorageError, match="UNIQUE|unique|IntegrityError"):
        store.add_trial(sw.id, number=1)  # one row per Optuna trial number
    with pytest.raises(StorageError, match="no trial with id 999"):
        store.get_trial(999)
    with pytest.raises(StorageError, match="no at_trials row with id 999"):
        store.update_trial(999, status="failed")


def test_foreign_key_enforced(store: Store) -> None:
    with pytest.raises(StorageError, match="FOREIGN KEY"):
        store.add_trial(12345, number=0)


def test_mark_interrupted(store: Store) -> None:
    sw = _sweep(store)
    other = _sweep(store, "other")
    running = store.add_trial(sw.id, number=0)
    store.update_trial(running.id, started_at=datetime.now(UTC) - timedelta(seconds=30))
    done = store.add_trial(sw.id, number=1)
    store.update_trial(done.id, status="complete", values=[1.0])
    elsewhere = store.add_trial(other.id, number=0)

    cut = store.mark_interrupted(sw.id)

    assert [t.id for t in cut] == [running.id]
    assert cut[0].status == "interrupted" and cut[0].duration_s is not None
    assert cut[0].duration_s >= 30
    assert store.get_trial(done.id).status == "complete"
    assert store.get_trial(elsewhere.id).status == "running"  # another sweep: untouched
    assert store.mark_interrupted(sw.id) == []


def test_measurements_and_failures(store: Store) -> None:
    sw = _sweep(store)
    t = store.add_trial(sw.id, number=0)
    metrics = {"ttft_ms": {"p50": 81.2, "p99": 140.0}, "output_tok_s": 54.3, "ok": True}
    store.add_measurement(t.id, "decode_1", metrics, repeat=1, value=54.3)
    store.add_measurement(t.id, "decode_1", {**metrics, "output_tok_s": 55.0}, value=55.0)
    ms = store.get_measurements(t.id)
    assert [(m.repeat, m.value) for m in ms] == [(0, 55.0), (1, 54.3)]
    assert ms[1].metrics == metrics

    t2 = store.add_trial(sw.id, number=1)
    t3 = store.add_trial(sw.id, number=2)
    store.add_failure(t.id, "cuda_oom", "OOM at graph capture", evidence="torch.OutOfMemoryError")
    store.add_failure(t2.id, "cuda_oom", "OOM at load", log_tail="line1\nline2")
    store.add_failure(t3.id, "never_ready", "not ready after 900 s")
    other = _sweep(store, "other")
    store.add_failure(store.add_trial(other.id, number=0).id, "crash", "segfault")

    assert store.failures_by_class(sw.id) == {"cuda_oom": 2, "never_ready": 1}
    fs = store.get_failures(sw.id)
    assert all(isinstance(f, FailureRow) for f in fs) and len(fs) == 3
    assert fs[1].log_tail == "line1\nline2"


def test_kernel_results(store: Store) -> None:
    base = dict(gpu="NVIDIA_H200", dtype="fp8_w8a8", quant_block="128x128", n=16384, k=5120)
    cfg = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "num_warps": 4}
    store.add_kernel_result(
        **base, m=16, config=cfg, time_us=52.0, tflops=51.6, provenance={"triton": "3.6.0"}
    )
    store.add_kernel_result(
        **base, m=16, config={**cfg, "num_warps": 8}, time_us=None, error="failed correctness gate"
    )
    store.add_kernel_result(**base, m=16, config={**cfg, "num_stages": 3}, time_us=40.5)
    store.add_kernel_result(**base, m=1, config=cfg, time_us=20.0)
    rows = store.get_kernel_results(gpu="NVIDIA_H200", dtype="fp8_w8a8", n=16384, k=5120, m=16)
    assert [r.time_us for r in rows] == [40.5, 52.0, None]
    assert isinstance(rows[1], KernelResultRow) and rows[1].provenance == {"triton": "3.6.0"}
    all_m = store.get_kernel_results(gpu="NVIDIA_H200", dtype="fp8_w8a8", n=16384, k=5120)
    assert [r.m for r in all_m] == [1, 16, 16, 16]


def test_table_names_do_not_clash_with_optuna() -> None:
    from optuna.storages._rdb.models import BaseModel

    ours = {t.__tablename__ for t in TABLES}
    assert all(name.startswith("at_") for name in ours)
    assert not ours & set(BaseModel.metadata.tables)


def test_optuna_shares_the_database(tmp_path: Path) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    path = tmp_path / "autotune.db"
    store = Store(path=path)
    sw = _sweep(store)
    storage = optuna.storages.RDBStorage(store.storage_url)
    study = optuna.create_study(
        study_name=sw.optuna_study_name, storage=storage, direction="maximize"
    )
    for _ in range(3):
        trial = study.ask()
        x = trial.suggest_int("page_size", 1, 64, log=True)
        row = store.add_trial(sw.id, number=trial.number, params=trial.params)
        study.tell(trial, float(x))
        store.update_trial(row.id, status="complete", values=[float(x)])
    best = store.best_trial(sw.id)
    assert best is not None and best.number == study.best_trial.number
    assert best.value == study.best_value
    store.close()

    # Both survive a reopen of the same file from scratch.
    again = Store(path=path)
    loaded = optuna.load_study(study_name="night-1", storage=again.storage_url)
    assert len(loaded.trials) == 3 and len(again.get_trials(sw.id)) == 3
    again.close()


_READER = textwrap.dedent(
    """
    import sys, time
    from autotune.store import Store
    store = Store(path=sys.argv[1])
    sweep = store.get_sweep("night-1")
    seen = [len(store.get_trials(sweep.id))]
    print("ready", flush=True)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        n = len(store.get_trials(sweep.id))
        if n != seen[-1]:
            seen.append(n)
        if n >= 20:
            break
        time.sleep(0.005)
    print(" ".join(map(str, seen)), flush=True)
    """
)


def test_reader_in_another_process_while_writing(tmp_path: Path) -> None:
    path = tmp_path / "autotune.db"
    root = Path(__file__).resolve().parents[2]
    pp = os.environ.get("PYTHONPATH", "")
    with Store(path=path) as store:
        sw = _sweep(store)
        reader = subprocess.Popen(
            [sys.executable, "-c", _READER, str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=root,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), pp]))},
        )
        try:
            assert reader.stdout is not None
            assert reader.stdout.readline().strip() == "ready"  # it has the file open
            for i in range(20):
                t = store.add_trial(sw.id, number=i, config={"i": i})
                store.add_measurement(t.id, "decode_1", {"i": i}, value=float(i))
                time.sleep(0.02)
            out, err = reader.communicate(timeout=20)
        finally:
            if reader.poll() is None:
                reader.kill()
                reader.wait()
        assert reader.returncode == 0, err
        seen = [int(x) for x in out.split()]
        assert seen[0] == 0 and seen[-1] == 20, out
        # It read intermediate states, i.e. while the writer was writing.
        assert len(seen) >= 3 and seen == sorted(seen), out
        with store.engine.connect() as con:
            assert con.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


def test_bad_url_and_paths(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="cannot open database"):
        Store(url="not a url")
    with pytest.raises(StorageError, match="nosuchdb"):
        Store(url="nosuchdb://x/y")
    with pytest.raises(StorageError, match="is a folder"):
        Store(path=tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StorageError, match="cannot create the folder"):
        Store(path=blocker / "sub" / "autotune.db")
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StorageError, match=r"garbage\.db.*not a database"):
        Store(path=garbage)
    with pytest.raises(StorageError, match="not both"):
        Store(url="sqlite://", path=tmp_path / "x.db")


def test_password_is_masked() -> None:
    url = "postgresql+psycopg2://autotune:s3cr3t@127.0.0.1:1/sweeps"
    assert "s3cr3t" not in mask_url(url) and "***" in mask_url(url)
    with pytest.raises(StorageError) as ei:
        Store(url=url)  # no driver installed, or no server on port 1: either way, no password
    assert "s3cr3t" not in str(ei.value)
    assert "127.0.0.1" in str(ei.value) and "***" in str(ei.value)


def test_in_memory_and_env_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mem = Store(url="sqlite://")
    _sweep(mem)
    assert [s.name for s in mem.list_sweeps()] == ["night-1"]  # one shared connection
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "env.db"))
    env_store = Store()
    assert env_store.storage_url == f"sqlite:///{tmp_path / 'env.db'}"
    env_store.close()


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "autotune.db"
    Store(path=path).close()
    import sqlite3

    with sqlite3.connect(path) as con:
        con.execute("UPDATE at_meta SET value='99' WHERE key='schema_version'")
    with pytest.raises(StorageError, match="schema version 99"):
        Store(path=path)


def test_rows_are_plain_models(store: Store) -> None:
    sw = _sweep(store)
    t = store.add_trial(sw.id, number=0, config={"a": 1})
    dumped = TrialRow.model_validate(t).model_dump(mode="json")
    assert dumped["config"] == {"a": 1} and dumped["status"] == "running"
