"""The real llama-server on CPU: launched from the adapter's argv through EngineProcess, a
streamed chat completion through the benchmark client, the startup log parsed and checked
against the planner, and forced failures classified from the real log.

Skipped unless llama-server is built (scripts/build-llama-server) or AUTOTUNE_BUILD_LLAMA=1.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from autotune.bench import DecodeScenario, ThroughputScenario, run_benchmark
from autotune.engines.base import FailureClass, LaunchReport
from autotune.engines.llamacpp import LlamaCppAdapter, parse_startup_details
from autotune.engines.llamacpp.binary import detect_version
from autotune.planner.llamacpp import plan_llamacpp
from autotune.process import EngineProcess, free_port
from tests.integration.llamacpp_env import llama_server, model

pytestmark = pytest.mark.llamacpp

VERSION = "0.3.36"
MIB = 2**20


@pytest.fixture(scope="module")
def binary() -> Path:
    return llama_server()


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gguf")


@pytest.fixture(scope="module")
def adapter(binary: Path) -> LlamaCppAdapter:
    return LlamaCppAdapter(binary=binary)


@contextmanager
def _serve(
    adapter: LlamaCppAdapter, gguf: Path, config: dict[str, object], log: Path
) -> Iterator[tuple[EngineProcess, str]]:
    port = free_port()
    cmd = adapter.build_command(config, model=str(gguf), version=VERSION, port=port)
    with EngineProcess(port=port, label="llamacpp-test") as eng:
        eng.start(cmd.argv, cmd.env, log)
        eng.wait_ready(
            f"http://127.0.0.1:{port}{adapter.health_path()}",
            deadline_s=120,
            is_ready_line=adapter.is_ready_line,
        )
        yield eng, f"http://127.0.0.1:{port}"
    assert eng.stop_report is not None and eng.stop_report.clean


def test_binary_version_is_the_pinned_sdist(binary: Path) -> None:
    v = detect_version(binary)
    assert v.sdist_version == VERSION, v
    assert not v.cuda


DENSE = {"parallel": 2, "ctx_size": 2048, "kv_unified": False, "fit": "off", "threads": 2}


def test_dense_model_serves_and_matches_the_plan(
    adapter: LlamaCppAdapter, models: Path, tmp_path: Path
) -> None:
    gguf = model("tiny", models)
    log = tmp_path / "server.log"
    with _serve(adapter, gguf, DENSE, log) as (_eng, url):
        report = run_benchmark(
            url,
            [
                DecodeScenario(prompt_len=48, output_len=24, num_requests=2),
                ThroughputScenario(prompt_len=64, output_len=16, concurrency=2, num_requests=4),
            ],
        )
    text = log.read_text()
    decode, throughput = report.scenarios
    assert decode.stats.completed == 2 and decode.stats.errors == 0
    assert throughput.stats.completed == 4
    first = decode.requests[0]
    assert first.ok and first.output_tokens == 24  # ignore_eos: every token streamed
    assert decode.metrics.available  # --metrics is on by default

    launch = adapter.parse_startup(text)
    assert launch.ready
    assert launch.max_running_requests == 2
    assert launch.context_len == 1024  # 2048 split over 2 slots (pad 256)
    assert launch.kv_pool_tokens == 2048 and launch.kv_dtype == "f16"
    details = parse_startup_details(text)
    assert details.kv_streams == 2 and details.kv_layers == 2
    plan = plan_llamacpp(gguf, DENSE, version=VERSION, host_free_gib=16)
    assert plan.fits, plan.reasons
    assert plan.kv_pool_tokens == launch.kv_pool_tokens
    assert plan.context_len == launch.context_len
    assert details.kv.total_mib == pytest.approx(plan.kv_pool_gib * 1024, abs=0.006)
    assert launch.weights_gib == pytest.approx(plan.weights_gib, abs=1e-5)
    assert details.output.total_mib == pytest.approx(plan.output_gib * 1024, abs=0.006)
    compute = details.compute.total_mib
    assert compute <= plan.compute_gib * 1024 <= compute * 1.08  # tests/planner CALIBRATION


def test_hybrid_model_has_one_recurrent_slot_per_sequence(
    adapter: LlamaCppAdapter, models: Path, tmp_path: Path
) -> None:
    gguf = model("tiny-hybrid", models)
    log = tmp_path / "server.log"
    config = {"parallel": 3, "ctx_size": 1536, "kv_unified": True, "fit": "off", "threads": 2}
    with _serve(adapter, gguf, config, log) as (_eng, url):
        report = run_benchmark(url, [DecodeScenario(prompt_len=32, output_len=8, num_requests=2)])
    assert report.scenarios[0].stats.completed == 2
    launch = adapter.parse_startup(log.read_text())
    plan = plan_llamacpp(gguf, config, version=VERSION, host_free_gib=16)
    assert launch.mamba_slots == plan.mamba_slots == 3
    assert launch.kv_pool_tokens == plan.kv_pool_tokens == 1536
    assert launch.context_len == 1536  # unified: every slot may use the whole pool
    details = parse_startup_details(log.read_text())
    assert details.rs_layers == 4 and details.kv_layers == 2  # 2 DeltaNet + 2 attention layers
    # the log prints MiB with two decimals
    assert details.rs.total_mib == pytest.approx(plan.mamba_pool_gib * 1024, abs=0.006)
    assert details.kv.total_mib == pytest.approx(plan.kv_pool_gib * 1024, abs=0.006)


def _run_to_exit(argv: list[str], timeout_s: float = 120) -> tuple[int, str]:
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        start_new_session=True,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_bad_flag_is_classified(adapter: LlamaCppAdapter, models: Path) -> None:
    cmd = adapter.build_command({}, model=str(model("tiny", models)), version=VERSION)
    rc, text = _run_to_exit([*cmd.argv, "--no-such-flag"])
    assert rc != 0
    failure = adapter.classify_failure(text, rc, was_ready=False)
    assert failure.cls is FailureClass.BAD_ARGUMENTS, failure
    assert "--no-such-flag" in failure.reason


def test_kv_cache_that_cannot_fit_is_classified_and_predicted(
    adapter: LlamaCppAdapter, models: Path
) -> None:
    gguf = model("tiny", models)
    # 2^27 cells x 256 B = 32 GiB of KV; an 8 GiB address-space limit makes the allocation fail
    # the same way on every machine (and can never take the host's memory).
    config = {"parallel": 1, "ctx_size": 2**27, "fit": "off", "threads": 2}
    plan = plan_llamacpp(gguf, config, version=VERSION, host_free_gib=16)
    assert not plan.fits and "does not fit host RAM" in plan.reasons[0]
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        pytest.skip("prlimit (util-linux) is needed to cap the launch's address space")
    cmd = adapter.build_command(config, model=str(gguf), version=VERSION, port=free_port())
    rc, text = _run_to_exit([prlimit, f"--as={8 << 30}", "--", *cmd.argv])
    assert rc != 0
    failure = adapter.classify_failure(text, rc, was_ready=False)
    assert failure.cls is FailureClass.KV_CACHE_OOM, (failure, text[-2000:])


def test_port_in_use_is_classified(adapter: LlamaCppAdapter, models: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        cmd = adapter.build_command(
            {}, model=str(model("tiny", models)), version=VERSION, port=port
        )
        rc, text = _run_to_exit(cmd.argv)
    assert rc != 0
    failure = adapter.classify_failure(text, rc, was_ready=False)
    assert failure.cls is FailureClass.PORT_IN_USE, (failure, text[-2000:])


def test_report_is_empty_without_startup_lines() -> None:
    assert LlamaCppAdapter(binary="x").parse_startup("") == LaunchReport()
