"""Secrets through the service: a submitted spec cannot name the service's environment, and a
resume runs with the file the sweep was submitted with (the database keeps references only)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.service.core import Service
from autotune.service.errors import Forbidden
from autotune.service.schemas import StopRequest
from tests.service.conftest import fake_python, tiny_spec, wait_for


@pytest.fixture
def service(state: Path) -> Iterator[Service]:
    svc = Service.open(state, str(state / "autotune.db"))
    svc.jobs.python = fake_python(state.parent)
    yield svc
    svc.shutdown()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"engine.env": {"HF_TOKEN": "${env:HF_TOKEN}"}}, "engine.env.HF_TOKEN"),
        ({"space.fixed": {"api_key": "${env:API_KEY}"}}, "space.fixed.api_key"),
    ],
)
def test_a_submitted_spec_cannot_refer_to_the_service_environment(
    service: Service, change: dict[str, object], field: str
) -> None:
    with pytest.raises(Forbidden) as err:
        service.submit_sweep(data=tiny_spec("refs", **change))
    assert err.value.field == field


def test_resume_runs_with_the_submitted_spec_file(service: Service, state: Path) -> None:
    from autotune.store.models import SweepStatus

    service.submit_sweep(data=tiny_spec("r", **{"space.fixed": {"api_key": "sk-x123456"}}))
    rec = service.jobs.refresh()["r"]
    spec_file = next(a for a in rec.argv if a.endswith(".yaml"))
    service.stop_sweep("r", StopRequest(force=True, wait_s=10))
    wait_for(lambda: not service.jobs.busy("r"), 20, "the job to end")
    # the stand-in interpreter wrote no sweep row: make the one a real sweep would have left
    service.store.create_sweep(
        "r", spec_yaml=Path(spec_file).read_text(), engine="sglang", model="m", gpu="g"
    )
    service.store.update_sweep_status(service.store.get_sweep("r").id or 0, SweepStatus.STOPPED)
    service.resume_sweep("r")
    argv = service.jobs.refresh()["r"].argv
    assert spec_file in argv and argv.index(spec_file) < argv.index("--resume")
