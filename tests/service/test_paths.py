"""Paths in a submitted spec (issue 19, items 3 and 9): a job runs in its own working folder,
never the state folder; a relative value of a path-valued field is what the job would open
there, so it is resolved there before the policy check; nothing in the state folder (token,
config, database) is readable through a request even under an allowed root; a refusal names
the value as sent, never a resolved path or the allowed roots."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from fastapi.testclient import TestClient

from autotune.service.app import create_app
from autotune.service.core import Service
from autotune.service.errors import Forbidden
from autotune.service.jobs import JobManager
from autotune.service.policy import Policy, ServiceConfig, path_valued
from autotune.service.state import StateDir
from autotune.sweep.spec import parse_spec
from tests.service.conftest import fake_python, tiny_spec, wait_for, write_config

# What the fault campaign slipped past the policy: bare names the engine opens in its cwd.
RELATIVE: dict[str, dict[str, Any]] = {
    "space.fixed.chat_template": {"space.fixed": {"chat_template": "token"}},
    "space.fixed.tokenizer_path": {"space.fixed": {"tokenizer_path": "config.yaml"}},
    "space.fixed.download_dir": {"space.fixed": {"download_dir": "reports"}},
    "space.fixed.hicache_file_storage_dir": {"space.fixed": {"hicache_file_storage_dir": "specs"}},
    "engine.env.SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": {
        "engine.env": {"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": "specs"}
    },
    "target.model_path": {"target.model_path": "autotune.db"},
    "space.overrides.chat_template.choices[0]": {
        "space.overrides": {"chat_template": {"choices": ["token"]}}
    },
}


@pytest.fixture(params=["state-is-cwd", "root-holds-state"])
def service(
    request: pytest.FixtureRequest, state: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Service]:
    """The two set-ups of the campaign: the service started in its state folder, and an
    allowed root (the state folder's parent) that holds the state folder."""
    if request.param == "state-is-cwd":
        state.mkdir(parents=True, exist_ok=True)
        monkeypatch.chdir(state)
    else:
        write_config(state, allowed_paths=[str(state.parent)])
    svc = Service.open(state, str(state / "autotune.db"))
    svc.jobs.python = fake_python(state.parent)
    yield svc
    svc.shutdown()


@pytest.mark.parametrize("field", list(RELATIVE))
def test_relative_path_values_are_refused(service: Service, field: str) -> None:
    with pytest.raises(Forbidden) as err:
        service.submit_sweep(data=tiny_spec("rel", **RELATIVE[field]))
    assert err.value.field == field
    assert "relative path" in str(err.value)
    assert str(service.state.root) not in str(err.value)
    assert service.jobs.table.snapshot() == {}  # nothing started


def test_the_state_folder_is_never_readable(service: Service) -> None:
    root = service.state.root
    (root.parent / "models").mkdir(exist_ok=True)
    into_state = root.parent / "models" / "to-state"
    into_state.symlink_to(root)
    for value in (root / "token", root / "config.yaml", root / "autotune.db", into_state / "x"):
        with pytest.raises(Forbidden, match="outside the folders") as err:
            service.submit_sweep(
                data=tiny_spec("st", **{"space.fixed": {"chat_template": str(value)}})
            )
        assert err.value.field == "space.fixed.chat_template"
    with pytest.raises(Forbidden):
        service.policy.allowed_path(str(root / "autotune.db-wal"), field="f")


def test_an_absolute_path_under_an_allowed_root_passes(tmp_path: Path) -> None:
    models = tmp_path / "models"
    (models / "m").mkdir(parents=True)
    state = StateDir.open(tmp_path / "state")
    p = Policy(ServiceConfig(allowed_paths=[str(tmp_path)]), private=[state.root])
    work = state.work_dir("sweep", "ok")
    spec = tiny_spec(
        "ok",
        **{
            "target.model_path": str(models / "m"),
            "space.fixed": {
                "chat_template": str(models / "t.jinja"),
                "enable_metrics": True,
            },
            "engine.env": {"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": str(models / "hc")},
        },
    )
    p.check_spec(parse_spec(spec), base=work)
    # A relative value that climbs out of the job's folder to an allowed one is what the job
    # opens there: allowed.
    p.check_spec(
        parse_spec(tiny_spec("ok", **{"space.fixed": {"chat_template": "../../../../models/t"}})),
        base=work,
    )
    assert path_valued("chat_template") and path_valued("--tokenizer-path")
    assert path_valued("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR") and path_valued("mmproj")
    assert not path_valued("kv_cache_dtype") and not path_valued("mamba_max_states_per_path")


def test_a_job_runs_in_its_own_folder(service: Service) -> None:
    rec = service.submit_sweep(data=tiny_spec("cwd")).job
    assert rec.pid is not None
    table = service.jobs.table.snapshot()["cwd"]
    work = service.state.work_dir("sweep", "cwd")
    assert table.cwd == str(work) and Path(table.cwd) != service.state.root
    assert psutil.Process(rec.pid).cwd() == str(work)
    assert list(work.glob("spec.*.yaml"))  # the spec it runs sits in that folder


def test_job_manager_default_cwd_is_not_the_state_root(tmp_path: Path) -> None:
    state = StateDir.open(tmp_path / "state")
    jobs = JobManager(state, python=fake_python(tmp_path))
    rec = jobs.start("k", ["kernels", "tune"], kind="kernels")
    try:
        assert rec.pid is not None and rec.cwd is not None
        assert Path(rec.cwd) == state.work_dir("kernels", "k") != state.root
        wait_for(lambda: psutil.Process(rec.pid).cwd() == rec.cwd, 10, "the job's cwd")
    finally:
        jobs.signal("k", force=True)
        jobs.wait("k", 10)


def test_403_names_the_value_not_where_it_resolves(tmp_path: Path) -> None:
    """A symlink under an allowed root that points outside: the answer must not tell the
    client where it points, nor which folders the service may read."""
    models, secret = tmp_path / "models", tmp_path / "elsewhere" / "secret-target"
    models.mkdir()
    secret.mkdir(parents=True)
    link = models / "innocent"
    link.symlink_to(secret)
    state = tmp_path / "state"
    write_config(state, allowed_paths=[str(models)])
    svc = Service.open(state, str(state / "autotune.db"))
    try:
        client = TestClient(create_app(svc, token="t" * 40, recover=False))
        auth = {"Authorization": "Bearer " + "t" * 40}
        answers = [
            client.post("/v1/inspect", json={"path": str(link)}, headers=auth),
            client.post(
                "/v1/sweeps",
                json={"spec": tiny_spec("leak", **{"target.model_path": str(link / "m")})},
                headers=auth,
            ),
            client.post(
                "/v1/sweeps",
                json={"spec": tiny_spec("leak", **{"space.fixed": {"chat_template": "t"}})},
                headers=auth,
            ),
        ]
        for r in answers:
            assert r.status_code == 403, r.text
            body = r.text
            assert "secret-target" not in body and str(secret) not in body
            assert "allowed roots" not in body and str(state.resolve()) not in body
            assert "allowed_paths" in body  # what the client can act on
        assert str(link) in answers[0].json()["detail"]  # the value as sent
        assert str(models) not in answers[2].text  # nor the roots, for a value outside them
    finally:
        svc.shutdown()


def test_a_model_folder_cannot_link_a_file_out_of_the_allowed_roots(tmp_path: Path) -> None:
    # the loaders open config.json by name: a link to the token must not be followed
    state = StateDir.open(tmp_path / "state")
    (state.root / "token").write_text("secret")
    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    p = Policy(ServiceConfig(allowed_paths=[str(tmp_path)]), private=[state.root])
    (model / "tokenizer.json").write_text("{}")
    (model / "weights.safetensors").symlink_to(model / "tokenizer.json")  # inside: fine
    assert p.check_model(str(model), field="target.model") == str(model.resolve())
    (model / "config.json").symlink_to(state.root / "token")
    with pytest.raises(Forbidden) as err:
        p.check_model(str(model), field="target.model")
    assert err.value.field == "target.model" and "config.json" in str(err.value)
    assert str(state.root) not in str(err.value)  # the link's target is not told
