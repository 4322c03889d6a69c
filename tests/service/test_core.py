"""The service layer without HTTP: one state word from the database status and the job;
recovery resumes only sweeps whose job died while the database says running; submitted specs
are validated and checked before any job starts."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import pytest

from autotune.errors import UnknownNameError
from autotune.service.core import Service
from autotune.service.errors import Conflict, Forbidden, Invalid, NotFound
from autotune.service.jobs import JobRecord
from autotune.service.views import sweep_state
from tests.service.conftest import tiny_spec, tiny_yaml, write_config

NOW = datetime.now(UTC)


def rec(state: str = "running", stop: str | None = None, started: datetime = NOW) -> JobRecord:
    return JobRecord(
        name="s",
        argv=[],
        pid=1,
        create_time=0.0,
        log_path="",
        started_at=started,
        state=state,  # type: ignore[arg-type]
        stop_requested=stop,
    )


def test_sweep_state() -> None:
    earlier, later = NOW - timedelta(seconds=5), NOW + timedelta(seconds=5)
    assert sweep_state(None, rec(), None) == "starting"
    assert sweep_state(None, rec("exited"), None) == "failed_to_start"
    # stopped right after submit, before the sweep wrote its row
    assert sweep_state(None, rec(stop="SIGTERM"), None) == "stopping"
    assert sweep_state(None, rec("exited", stop="SIGTERM"), None) == "cancelled"
    assert sweep_state("running", rec(), later) == "running"
    assert sweep_state("running", rec(stop="SIGTERM"), later) == "stopping"
    assert sweep_state("stopped", rec(), earlier) == "starting"  # resumed, row not yet written
    assert sweep_state("finished", rec(), later) == "finished"  # written, process exiting
    assert sweep_state("running", rec("exited"), later) == "interrupted"
    assert sweep_state("running", None, later) == "running"  # a sweep run from a terminal
    assert sweep_state("stopped", rec("exited"), later) == "stopped"


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    state = tmp_path / "state"
    write_config(state)
    svc = Service.open(state, str(state / "autotune.db"))
    yield svc
    svc.shutdown()


def test_submit_checks_before_starting_a_job(service: Service) -> None:
    with pytest.raises(Invalid, match="exactly one"):
        service.submit_sweep()
    with pytest.raises(UnknownNameError, match="unknown GPU"):
        service.submit_sweep(data=tiny_spec("a", **{"target.gpu": "rtx-0"}))
    with pytest.raises(Forbidden):
        service.submit_sweep(data=tiny_spec("a", **{"engine.launcher": ["/bin/true"]}))
    with pytest.raises(Invalid, match="aliases"):
        service.submit_sweep(text="a: &x [1]\nb: *x\n")
    service.store.create_sweep("taken", spec_yaml=tiny_yaml("taken"))
    with pytest.raises(Conflict, match="already exists"):
        service.submit_sweep(text=tiny_yaml("taken"))
    assert service.jobs.table.snapshot() == {}  # nothing was started
    with pytest.raises(NotFound, match="did you mean 'taken'"):
        service.sweep_status("takn")


def test_recover_only_resumes_what_died_running(service: Service) -> None:
    gone = psutil.Process().create_time() - 1000.0  # a PID that is not that process any more
    with service.jobs.table.locked() as jobs:
        for name, kind in (("done", "sweep"), ("kern", "kernels")):
            jobs[name] = rec().model_copy(
                update={"name": name, "kind": kind, "pid": os.getpid(), "create_time": gone}
            )
    service.store.create_sweep("done", spec_yaml=tiny_yaml("done"), status="finished")
    assert service.recover() == []
    table = service.jobs.table.snapshot()
    assert table["done"].state == "exited" and table["done"].note is None
    assert "resubmit" in (table["kern"].note or "")
    st = service.sweep_status("done")
    assert st.state == "finished" and st.job is not None and st.job.state == "exited"


def test_a_dead_sweep_not_resumed_has_its_trials_interrupted(service: Service) -> None:
    # a restart with --no-recover (or a SIGKILL) leaves the rows the job wrote: a trial it was
    # running is interrupted, not "still running" in status and report
    gone = psutil.Process().create_time() - 1000.0
    with service.jobs.table.locked() as jobs:
        jobs["dead"] = rec().model_copy(
            update={"name": "dead", "kind": "sweep", "pid": os.getpid(), "create_time": gone}
        )
    row = service.store.create_sweep("dead", spec_yaml=tiny_yaml("dead"), status="running")
    assert row.id is not None
    trial = service.store.add_trial(row.id, number=0)
    assert service.startup(recover=False) == []
    assert service.store.get_trial(trial.id or 0).status == "interrupted"
    assert service.sweep_status("dead").state == "interrupted"  # resumable, as before
