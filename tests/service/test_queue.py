"""The service's queue: jobs on the same GPUs run one at a time, first in, first out, with their
place visible; jobs on disjoint GPUs run at once; stopping a queued job takes it out; a restart
keeps the queue. Jobs run a stand-in interpreter (fake_python) that sleeps until signalled, so
no sweep does real work."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from autotune.service.core import Service
from autotune.service.errors import Conflict
from autotune.service.jobs import gpus_overlap
from autotune.service.schemas import StopRequest
from tests.service.conftest import fake_python, tiny_spec, wait_for


def on_gpu(name: str, gpus: str) -> dict[str, object]:
    return tiny_spec(name, **{"engine.env": {"CUDA_VISIBLE_DEVICES": gpus}})


def open_service(state: Path) -> Service:
    svc = Service.open(state, str(state / "autotune.db"))
    svc.jobs.python = fake_python(state.parent)
    return svc


@pytest.fixture
def service(state: Path) -> Iterator[Service]:
    svc = open_service(state)
    yield svc
    svc.shutdown()


def job_state(svc: Service, name: str) -> tuple[str, int | None]:
    st = svc.sweep_status(name)
    assert st.job is not None
    return st.state, st.job.queue_position


def test_same_gpu_jobs_queue_in_order_disjoint_ones_run(service: Service, state: Path) -> None:
    first = service.submit_sweep(data=on_gpu("a", "0"))
    assert first.state == "starting" and first.job.state == "running"
    assert first.job.queue_position is None and first.job.gpus == ["0"]
    queued = [service.submit_sweep(data=on_gpu(n, "0")) for n in ("b", "c", "d")]
    assert [(q.state, q.job.queue_position, q.job.pid) for q in queued] == [
        ("queued", 1, None),
        ("queued", 2, None),
        ("queued", 3, None),
    ]
    assert job_state(service, "c") == ("queued", 2)
    assert any("queued" in s for s in service.sweep_status("c").next_steps)
    listed = {s.name: s for s in service.list_sweeps().sweeps}
    assert listed["d"].state == "queued" and listed["d"].queue_position == 3
    with pytest.raises(Conflict, match="queued"):
        service.submit_sweep(data=on_gpu("b", "0"))

    # Another GPU: not held by anyone, so it starts at once, ahead of the queue.
    other = service.submit_sweep(data=on_gpu("e", "1"))
    assert other.state == "starting" and other.job.pid is not None

    # Stopping a queued job takes it out of the queue; those behind it move up.
    gone = service.stop_sweep("c", StopRequest())
    assert gone.state == "cancelled" and gone.job is not None
    assert gone.job.state == "cancelled" and gone.job.pid is None
    assert job_state(service, "b") == ("queued", 1)
    assert job_state(service, "d") == ("queued", 2)

    # The GPU frees: the next in line starts (the monitor, without anyone asking), in order.
    service.startup(recover=False)
    service.stop_sweep("a", StopRequest(wait_s=20))
    b = wait_for(
        lambda: (r := service.jobs.table.snapshot()["b"]).state == "running" and r,
        20,
        "b to start when a ended",
    )
    assert psutil.Process(b.pid).is_running()
    assert job_state(service, "d") == ("queued", 1)
    service.stop_sweep("b", StopRequest(wait_s=20))
    wait_for(lambda: service.jobs.table.snapshot()["d"].state == "running", 20, "d to start")
    table = service.jobs.table.snapshot()
    assert table["c"].state == "cancelled" and table["c"].pid is None  # never started
    assert table["a"].ended_at is not None and table["b"].started_at is not None
    assert table["a"].ended_at <= table["b"].started_at  # one at a time on GPU 0
    assert table["b"].ended_at is not None and table["d"].started_at is not None
    assert table["b"].ended_at <= table["d"].started_at


def test_no_gpus_named_means_all_and_a_restart_keeps_the_queue(state: Path) -> None:
    first = open_service(state)
    first.submit_sweep(data=tiny_spec("x"))  # no CUDA_VISIBLE_DEVICES: every GPU
    assert first.submit_sweep(data=on_gpu("y", "3")).state == "queued"
    assert first.submit_sweep(data=tiny_spec("z")).job.queue_position == 2
    first.shutdown()  # the jobs outlive the service; the queue is in the job table

    second = open_service(state)
    try:
        assert job_state(second, "y") == ("queued", 1)
        assert job_state(second, "z") == ("queued", 2)
        second.stop_sweep("x", StopRequest(wait_s=20))  # adopted: not second's child
        wait_for(lambda: second.sweep_status("y").state == "starting", 20, "y to start")
        assert job_state(second, "z") == ("queued", 1)
    finally:
        second.shutdown()


def test_gpu_overlap_rule() -> None:
    assert gpus_overlap(None, ["0"]) and gpus_overlap(["0"], None) and gpus_overlap(None, None)
    assert gpus_overlap(["0", "1"], ["1"]) and not gpus_overlap(["0"], ["1"])
    assert gpus_overlap(["0"], ["GPU-5d1c"])  # an index and a UUID may be the same device
    assert not gpus_overlap(["cpu"], ["0"]) and gpus_overlap(["cpu"], ["cpu"])
