"""Engine kernel jobs through the service: a request names the engine (and the environment it is
installed in, only where the owner allowed it), the job runs `kernels tune --engine`, and an
ended job's files are installed where that release's own lookup reads them (a dry run unless
the config allows writing), by `autotune kernels install` run as a child process against a
site-packages folder unpacked from SGLang 0.5.17's wheel."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
from pydantic import ValidationError

from autotune.engines.kernel_facts import facts_for
from autotune.errors import HardwareError
from autotune.service import kernel_jobs
from autotune.service.core import Service
from autotune.service.errors import Conflict, Forbidden, NotFound, http_status
from autotune.service.jobs import JobRecord
from autotune.service.kernel_jobs import KERNELS_PREFIX
from autotune.service.policy import Policy, ServiceConfig
from autotune.service.schemas import KernelsInstallRequest, KernelsRequest
from tests.kernels_tuning.test_install import extract_site, tuned
from tests.service.conftest import write_config
from tests.wheels import engine_wheel_or_skip

VERSION = "0.5.17"


# ---------------------------------------------------------------------------------------------
# the request and its command line


def test_engine_fields_reach_the_command_line() -> None:
    req = KernelsRequest(
        name="k", model="qwen3.8-27b-fp8", engine="sglang", engine_version="0.5.23"
    )
    args = req.cli_args("OUT", own_python="/srv/py")
    i = args.index("--engine")
    assert args[i : i + 4] == ["--engine", "sglang", "--engine-version", "0.5.23"]
    assert "--engine-python" not in args  # a named release: the CLI finds it (here or its wheel)
    bare = KernelsRequest(name="k", model="qwen3.8-27b-fp8", engine="vllm")
    assert bare.cli_args("OUT", own_python="/srv/py")[-5:] == [
        "--engine-python",
        "/srv/py",
        "--out",
        "OUT",
        "--json",
    ]  # neither named: the release installed beside the service
    other = bare.model_copy(update={"engine_python": "/opt/vllm/bin/python"})
    assert "/opt/vllm/bin/python" in other.cli_args("OUT", own_python="/srv/py")
    assert "/srv/py" not in other.cli_args("OUT", own_python="/srv/py")
    own = KernelsRequest(name="k", nk=["4096,4096"])
    assert "--engine" not in own.cli_args("OUT", own_python="/srv/py")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"engine_version": "0.5.23"}, "engine_version needs engine"),
        ({"engine_python": "/opt/py"}, "engine_python needs engine"),
        ({"engine": "sglang", "kind": "int4"}, "kind int4"),
        ({"engine": "sglang", "engine_version": "latest; rm"}, "engine_version"),
    ],
)
def test_engine_fields_are_checked(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        KernelsRequest(name="k", nk=["4096,4096"], **fields)


def test_the_cli_takes_every_engine_flag_the_request_writes() -> None:
    from typer.testing import CliRunner

    from autotune.cli import app

    res = CliRunner().invoke(app, ["kernels", "tune", "--help"], terminal_width=300)
    for flag in ("--engine", "--engine-version", "--engine-python"):
        assert flag in res.output


# ---------------------------------------------------------------------------------------------
# what the owner allows


def test_engine_python_only_where_the_owner_allowed_it() -> None:
    cfg = ServiceConfig(
        allowed_engines=["sglang", "llamacpp"],
        allowed_engine_pythons=["/opt/a/bin/python"],
        allowed_launchers=[
            ["/opt/b/bin/python", "-m", "sglang.launch_server"],
            ["docker", "run", "--gpus", "all", "lmsysorg/sglang"],
        ],
    )
    policy = Policy(cfg)
    policy.check_kernel_engine("sglang", None)
    policy.check_kernel_engine("sglang", "/opt/a/bin/python")
    policy.check_kernel_engine("sglang", "/opt/b/bin/python")  # an allowed launcher's module
    with pytest.raises(Forbidden, match="allowed_engine_pythons") as exc:
        policy.check_kernel_engine("sglang", "docker")  # a launcher, but not an interpreter
    assert exc.value.field == "engine_python"
    with pytest.raises(Forbidden, match="engine 'vllm' is not allowed"):
        policy.check_kernel_engine("vllm", None)


# ---------------------------------------------------------------------------------------------
# install through the service


@pytest.fixture(scope="module")
def engine_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    extract_site(engine_wheel_or_skip("sglang", VERSION), facts_for("sglang", VERSION), site)
    return site


def _interpreter(folder: Path, site: Path) -> Path:
    """An engine environment's interpreter: this Python with that site-packages first."""
    py = folder / "engine-python"
    py.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" "$@"\n')
    py.chmod(0o755)
    return py


@pytest.fixture
def setup(tmp_path: Path, engine_site: Path) -> Iterator[tuple[Path, Path, Path]]:
    state = tmp_path / "state"
    py = _interpreter(tmp_path, engine_site)
    write_config(state, allowed_engine_pythons=[str(py)])
    yield state, py, engine_site


@contextmanager
def _service(state: Path, **config: Any) -> Iterator[Service]:
    """The service on `state` (its config.yaml rewritten first when `config` is given)."""
    if config:
        write_config(state, **config)
    svc = Service.open(state, str(state / "autotune.db"))
    try:
        yield svc
    finally:
        svc.shutdown()


def _job(
    service: Service,
    name: str,
    exit_code: int | None = 0,
    files: list[Path] | None = None,
    **overrides: Any,
) -> None:
    """A kernel job as the table holds it once its process has ended, with the result it
    printed (the files it wrote)."""
    out = service.state.root / "kernels" / name
    out.mkdir(parents=True, exist_ok=True)
    result = {"items": 1, "files": [str(f) for f in files or []]}
    (out / "result.json").write_text(json.dumps(result))
    with service.jobs.table.locked() as jobs:
        jobs[KERNELS_PREFIX + name] = JobRecord(
            name=KERNELS_PREFIX + name,
            kind="kernels",
            argv=[],
            log_path="",
            state="exited" if exit_code is not None else "running",
            exit_code=exit_code,
            overrides=overrides,
            # running: this test's own process stands in for the tuner
            pid=None if exit_code is not None else os.getpid(),
            create_time=0.0 if exit_code is not None else psutil.Process().create_time(),
        )


def test_install_an_engine_jobs_files_where_the_release_reads_them(
    setup: tuple[Path, Path, Path],
) -> None:
    state, py, site = setup
    facts = facts_for("sglang", VERSION)
    with _service(state) as svc:
        written = tuned(state / "kernels" / "k", "sglang", VERSION, arch=None)
        # an earlier run's file of the same shape on a release with the same kernel: in the
        # folder, not in this run's result, so not installed (it would clash with this one)
        tuned(state / "kernels" / "k", "sglang", "0.5.16", arch=None)
        _job(svc, "k", files=[written], engine="sglang", engine_python=str(py))
        dest = site / facts.config_dir / written.name
        before = sorted(p.name for p in (site / facts.config_dir).iterdir())

        dry = svc.install_kernels("k")  # a dry run by default
        assert dry.dry_run and dry.result["dry_run"]
        assert dry.result["version"] == VERSION and dry.result["proof"]["ok"]
        assert Path(dry.result["target"]).resolve() == (site / facts.config_dir).resolve()
        assert [f["name"] for f in dry.result["files"]] == [written.name]
        assert sorted(p.name for p in (site / facts.config_dir).iterdir()) == before

        with pytest.raises(Forbidden, match="allow_kernel_install") as exc:
            svc.install_kernels("k", KernelsInstallRequest(dry_run=False))
        assert "autotune kernels install --engine sglang" in str(exc.value)
        assert not dest.exists()

    copied: list[str] = []
    with _service(state, allowed_engine_pythons=[str(py)], allow_kernel_install=True) as svc:
        try:
            done = svc.install_kernels("k", KernelsInstallRequest(dry_run=False))
            copied = done.result["copied"]
            assert not done.dry_run and done.result["proof"]["ok"]
            assert done.result["proof"]["method"] == "engine-source"  # the release's own lookup
            assert dest.read_bytes() == written.read_bytes()
            assert written.name in done.result["copied"]  # with its provenance sidecar
        finally:
            for name in copied:
                (site / facts.config_dir / name).unlink()

    # the owner took the interpreter back: the job's environment is no longer readable
    with _service(state, allow_kernel_install=True) as svc:
        with pytest.raises(Forbidden, match="engine_python"):
            svc.install_kernels("k")


def test_install_refusals(setup: tuple[Path, Path, Path]) -> None:
    state, py, _ = setup
    kernels = state / "kernels"
    with _service(state) as svc:
        with pytest.raises(NotFound, match="no kernel tuning job 'nope'"):
            svc.install_kernels("nope")
        _job(svc, "own")  # autotune's own kernels: no engine reads them
        with pytest.raises(Conflict, match="autotune's own kernels"):
            svc.install_kernels("own")
        f = tuned(kernels / "busy", "sglang", VERSION, arch=None)
        _job(svc, "busy", exit_code=None, files=[f], engine="sglang", engine_python=str(py))
        with pytest.raises(Conflict, match="is running; only a finished job"):
            svc.install_kernels("busy")
        f = tuned(kernels / "failed", "sglang", VERSION, arch=None)
        _job(svc, "failed", exit_code=3, files=[f], engine="sglang", engine_python=str(py))
        with pytest.raises(Conflict, match="is failed"):
            svc.install_kernels("failed")
        _job(svc, "empty", files=[], engine="sglang", engine_python=str(py))
        with pytest.raises(Conflict, match="wrote no tuned files"):
            svc.install_kernels("empty")
        # files tuned on another release's kernel: the install's own check refuses them, and
        # the answer says which job tuned what
        f = tuned(kernels / "other", "sglang", "0.5.23", arch=None)
        _job(svc, "other", files=[f], engine="sglang", engine_python=str(py))
        with pytest.raises(Conflict, match=r"kernel job 'other' tuned sglang 0\.5\.23; ") as exc:
            svc.install_kernels("other")
        assert "0.5.17" in str(exc.value)  # the release installed there
        assert exc.value.field is None  # the CLI's flags are not the request's fields
        with pytest.raises(ValidationError):
            KernelsInstallRequest(device_name="../etc")


def test_the_owner_can_take_the_engine_back(setup: tuple[Path, Path, Path]) -> None:
    """A job that read the service's own environment is checked against the config too."""
    state, _, _ = setup
    with _service(state, allowed_engines=["vllm"]) as svc:
        f = tuned(state / "kernels" / "k", "sglang", VERSION, arch=None)
        _job(svc, "k", files=[f], engine="sglang")
        with pytest.raises(Forbidden, match="engine 'sglang' is not allowed"):
            svc.install_kernels("k")


def test_a_new_run_starts_from_an_empty_folder(
    setup: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Re-submitting a name drops the earlier run's files (they would pass for this run's)
    and keeps its result cache (the same items are not timed again)."""
    state, py, _ = setup
    out = state / "kernels" / "k"
    monkeypatch.setattr(kernel_jobs, "tuning_gpus_here", lambda _: None)  # the tuner fails later
    with _service(state) as svc:
        old = tuned(out, "sglang", VERSION, arch=None)
        _job(svc, "k", files=[old], engine="sglang", engine_python=str(py))
        (out / "cache.jsonl").write_text("{}\n")
        svc.submit_kernels(
            KernelsRequest(name="k", nk=["4096,4096"], engine="sglang", engine_python=str(py))
        )
        svc.jobs.wait(KERNELS_PREFIX + "k", 120)
        assert not old.exists() and (out / "cache.jsonl").read_text().startswith("{}")
        if svc.kernels_status("k").state != "finished":  # no GPU here: nothing to install
            with pytest.raises(Conflict, match="only a finished job"):
                svc.install_kernels("k")


@pytest.mark.parametrize(
    ("used", "visible", "torch_cuda", "says"),
    [
        ({}, None, True, "the NVIDIA driver reports no GPU"),
        ({0: 0, 1: 0}, "", True, "CUDA_VISIBLE_DEVICES='' hides them"),
        ({0: 0, 1: 0}, "2,3", True, "CUDA_VISIBLE_DEVICES='2,3' hides them"),
        # NVML sees the GPUs, but the tuner's torch is a CPU build: it would fail at start
        ({0: 0}, None, False, "sees no CUDA device"),
        # no NVML library (a container without it): the tuner's own check decides
        (None, None, False, "sees no CUDA device"),
    ],
)
def test_a_job_that_can_only_fail_is_refused_and_nothing_is_dropped(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    used: dict[int, int] | None,
    visible: str | None,
    torch_cuda: bool,
    says: str,
) -> None:
    """No GPU the tuner could time kernels on: refused at submission (a 503, HardwareError)
    rather than accepted to fail, and an earlier run's files under that name stay."""
    state = tmp_path / "state"
    write_config(state)
    monkeypatch.setattr("autotune.process.gpu.gpu_memory_used", lambda *a: used)
    monkeypatch.setattr(kernel_jobs, "torch_sees_cuda", lambda *a: torch_cuda)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    out = state / "kernels" / "k"
    with _service(state) as svc:
        old = tuned(out, "sglang", VERSION, arch=None)
        with pytest.raises(HardwareError, match="NVIDIA GPU of the service's host") as exc:
            svc.submit_kernels(KernelsRequest(name="k", nk=["4096,4096"]))
        assert says in str(exc.value) and http_status(exc.value) == 503
        assert old.exists() and svc.jobs.table.snapshot() == {}


@pytest.mark.parametrize("used", [{0: 0, 1: 0}, None])
def test_a_job_on_a_visible_gpu_passes_the_check(
    monkeypatch: pytest.MonkeyPatch, used: dict[int, int] | None
) -> None:
    monkeypatch.setattr("autotune.process.gpu.gpu_memory_used", lambda *a: used)
    monkeypatch.setattr(kernel_jobs, "torch_sees_cuda", lambda *a: True)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    kernel_jobs.tuning_gpus_here(sys.executable)


def test_the_tuners_interpreter_is_asked_as_the_tuner_asks() -> None:
    """torch_sees_cuda runs torch.cuda.is_available() in the given interpreter: this one's
    answer, and False for an interpreter without torch."""
    try:
        import torch

        here = torch.cuda.is_available()
    except ImportError:
        here = False
    kernel_jobs.torch_sees_cuda.cache_clear()
    assert kernel_jobs.torch_sees_cuda(sys.executable, None) is here
    assert kernel_jobs.torch_sees_cuda("/nonexistent/python", None) is False


def test_a_submitted_engine_job_is_checked_first(setup: tuple[Path, Path, Path]) -> None:
    state, _, _ = setup
    with _service(state) as svc:
        with pytest.raises(Forbidden, match="engine_python"):
            svc.submit_kernels(
                KernelsRequest(
                    name="k", nk=["4096,4096"], engine="sglang", engine_python="/bin/sh"
                )
            )
        assert svc.jobs.table.snapshot() == {}


def test_a_job_whose_exit_the_service_missed_is_judged_by_its_result(
    setup: tuple[Path, Path, Path],
) -> None:
    """A service restarted while a job ran never sees its exit code: the tuner's summary
    (written only once it is done) says it finished, and its files can be installed; without
    one the job is lost."""
    state, py, _ = setup
    with _service(state) as svc:
        f = tuned(state / "kernels" / "k", "sglang", VERSION, arch=None)
        _job(svc, "k", files=[f], engine="sglang", engine_python=str(py))
        _job(svc, "gone", files=[], engine="sglang", engine_python=str(py))
        (state / "kernels" / "gone" / "result.json").unlink()
        with svc.jobs.table.locked() as jobs:
            for key in (KERNELS_PREFIX + "k", KERNELS_PREFIX + "gone"):
                jobs[key] = jobs[key].model_copy(update={"exit_code": None})
        assert svc.kernels_status("k").state == "finished"
        assert svc.install_kernels("k").result["proof"]["ok"]
        assert svc.kernels_status("gone").state == "lost"
