"""The simulated engine impersonating vLLM (`--sim-engine vllm`): vLLM's options as the vLLM
adapter emits them, its startup lines read back by the adapter's parser, its refusals classified
by the adapter, and the process's HTTP surface (no 503 phase, /v1/models, `vllm:` metrics)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from autotune.engines.base import FailureClass
from autotune.engines.vllm import VLLMAdapter
from autotune.engines.vllm.printer import format_gib
from autotune.hardware import get_gpu
from autotune.models import load_card
from autotune.planner.vllm import plan_vllm
from autotune.process import free_port
from autotune.sim import SIM_ENGINES, sim_launcher
from autotune.sim.args import parse_args
from autotune.sim.vllm_startup import TS, failure_lines, launch_report

FP8, H100 = "qwen3.8-27b-fp8", "h100-80g"
# CUDA graphs outside the budget / profiled into it / the KV cache sized after warmup
VERSIONS = ("0.17.0", "0.33.0", "0.34.0")
# FIELD-NOTES K6's shape (one GPU here): 8 streams, chunked prefill 2048, MTP 2, prefix caching.
K6: dict[str, Any] = {
    "max_model_len": 131072,
    "max_num_seqs": 8,
    "max_num_batched_tokens": 2048,
    "speculative_method": "mtp",
    "num_speculative_tokens": 2,
    "enable_prefix_caching": True,
    "gpu_memory_utilization": 0.9,
    "kv_cache_dtype": "fp8_e4m3",
}
ADAPTER = VLLMAdapter()
ROOT = Path(__file__).resolve().parents[2]


def sim_argv(config: dict[str, Any], version: str, port: int = 8000, *extra: str) -> list[str]:
    cmd = ADAPTER.build_command(
        config, model=FP8, version=version, port=port, launcher=sim_launcher("vllm")
    )
    return [*cmd.argv, "--sim-gpu", H100, "--sim-engine-version", version, *extra]


def test_launcher_is_the_simulator_as_vllm() -> None:
    assert SIM_ENGINES == ("sglang", "vllm")
    assert sim_launcher("vllm")[1:] == ["-m", "autotune.sim", "--sim-engine", "vllm"]
    assert sim_launcher("sglang")[1:] == ["-m", "autotune.sim"]
    argv = sim_argv(K6, "0.33.0")
    # a launcher other than `vllm serve` gets --model MODEL (every release accepts it)
    assert argv[argv.index("--model") + 1] == FP8


@pytest.mark.parametrize("version", VERSIONS)
def test_adapter_argv_parses_into_the_vllm_config(version: str) -> None:
    ns, config, sim = parse_args(sim_argv(K6, version)[3:])
    assert sim.engine == "vllm" and sim.engine_version == version and sim.gpu == H100
    assert ns.model_path == FP8 and ns.port == 8000 and ns.host == "127.0.0.1"
    assert config == {
        "max_model_len": 131072,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 2048,
        "speculative_config": {"method": "mtp", "num_speculative_tokens": 2},
        "enable_prefix_caching": True,
        "gpu_memory_utilization": 0.9,
        "kv_cache_dtype": "fp8_e4m3",
    }
    # the config plans exactly as the sweep's planner planned the search-space fields
    card, gpu = load_card(FP8), get_gpu(H100)
    direct = plan_vllm(card, gpu, K6, version=version)
    via_argv = plan_vllm(card, gpu, config, version=version)
    assert direct.fits and via_argv.kv_pool_tokens == direct.kv_pool_tokens


def test_flexible_spelling_and_positional_model() -> None:
    argv = ["--sim-engine", "vllm", FP8, "--max_num_seqs=4", "--no-enable-prefix-caching"]
    ns, config, _ = parse_args([*argv, "--sim-gpu", H100])
    assert ns.model_path == FP8
    assert config == {"max_num_seqs": 4, "enable_prefix_caching": False}


def test_unknown_and_removed_flags_are_vllms_argparse_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(["--sim-engine", "vllm", "--model", FP8, "--page-size", "1", "--sim-gpu", H100])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "vllm serve: error: unrecognized arguments: --page-size" in err
    failure = ADAPTER.classify_failure(err, 2, was_ready=False)
    assert failure.cls == FailureClass.BAD_ARGUMENTS
    # --cudagraph-capture-sizes exists from 0.11.1 only
    with pytest.raises(SystemExit):
        parse_args(
            ["--sim-engine", "vllm", "--model", FP8, "--cudagraph-capture-sizes", "8"]
            + ["--sim-gpu", H100, "--sim-engine-version", "0.10.0"]
        )


@pytest.mark.parametrize("version", VERSIONS)
def test_startup_lines_read_back_by_the_adapter(version: str) -> None:
    """The figures the planner predicts are what the adapter parses from the simulated log."""
    from autotune.engines.vllm import format_startup_lines

    card, gpu = load_card(FP8), get_gpu(H100)
    plan = plan_vllm(card, gpu, K6, version=version)
    report = launch_report(plan, K6, card, version, startup_s=40.0)
    lines = format_startup_lines(version, report, model=FP8, timestamp=TS, pid=7)
    got = ADAPTER.parse_startup("\n".join(lines))
    assert got.ready and got.engine_version == version
    assert got.kv_pool_tokens == plan.kv_pool_tokens
    assert got.max_concurrency == pytest.approx(plan.max_concurrency, abs=0.005)
    assert got.context_len == 131072 and got.block_size == plan.block_size
    assert got.max_running_requests == 8 and got.chunked_prefill_size == 2048
    assert got.gpu_memory_utilization == 0.9 and got.weights_gib == pytest.approx(
        plan.weights_gib, abs=0.01
    )
    assert got.kv_cache_gib == pytest.approx(plan.kv_cache_gib, abs=0.01)
    assert got.enable_prefix_caching is True and got.kv_dtype == "fp8_e4m3"
    # golden: the capacity line(s) in each release's own shape
    kv = [line for line in lines if "KV cache size" in line or "Maximum concurrency" in line]
    tokens, conc = f"{plan.kv_pool_tokens:,}", f"{plan.max_concurrency:.2f}"
    if version == "0.17.0":
        assert kv == [
            f"(EngineCore_DP0 pid=7) INFO {TS} [kv_cache_utils.py:1305] GPU KV cache size: "
            f"{tokens} tokens",
            f"(EngineCore_DP0 pid=7) INFO {TS} [kv_cache_utils.py:1305] Maximum concurrency "
            f"for 131,072 tokens per request: {conc}x",
        ]
        assert got.graph_estimate_gib is None  # graphs live above the budget before 0.18
    else:
        assert kv == [
            f"(EngineCore_DP0 pid=7) INFO {TS} [kv_cache_utils.py:1305] GPU KV cache size: "
            f"{tokens} tokens, Maximum concurrency for 131,072 tokens per request: {conc}x"
        ]
    if version == "0.34.0":  # no graph estimate; the profiled figure is only the capacity
        assert plan.extensible_kv_cache and got.extensible_kv_cache
        assert got.graph_estimate_gib is None
        assert got.kv_reserve_gib == pytest.approx(plan.kv_reserve_gib, abs=0.01)
        assert got.kv_reserve_gib is not None and got.kv_cache_gib is not None
        assert got.kv_reserve_gib > got.kv_cache_gib
    elif version != "0.17.0":
        assert got.graph_estimate_gib == pytest.approx(plan.graph_gib, abs=0.01)


@pytest.mark.parametrize(
    ("config", "cls", "needle"),
    [
        ({"gpu_memory_utilization": 0.4}, FailureClass.KV_CACHE_OOM, "No available memory"),
        (
            {"max_model_len": 262144, "gpu_memory_utilization": 0.45},
            FailureClass.KV_CACHE_OOM,
            "To serve at least one request",
        ),
        ({"gpu_memory_utilization": 0.999}, FailureClass.CUDA_OOM, "Free memory on device"),
        (
            {"max_num_batched_tokens": 1024, "enable_chunked_prefill": False},
            FailureClass.CRASH,
            "with chunked prefill off",
        ),
    ],
)
def test_refusals_are_vllms_text_and_classified(
    config: dict[str, Any], cls: FailureClass, needle: str
) -> None:
    card, gpu = load_card(FP8), get_gpu(H100)
    plan = plan_vllm(card, gpu, config, version="0.33.0")
    assert not plan.fits
    lines = failure_lines(plan, "0.33.0")
    text = "\n".join(lines)
    assert needle in text and "Engine core initialization failed" in lines[-1]
    failure = ADAPTER.classify_failure(text, 1, was_ready=False)
    assert failure.cls == cls, failure


# 0.34.0 words the advice by the extensible KV cache, gpu_memory_utilization and whether the
# check failed on the profiled capacity (the reserve, plan.kv_reserve_gib) or on the size
# measured after warmup (plan.kv_cache_gib) (kv_cache_planning.py _more_kv_cache_memory_hint).
EXTENSIBLE_ALL = "The extensible KV cache already takes all device memory left after the model"
AFTER_WARMUP = -1  # max_model_len: one the reserve holds but the size after warmup does not
REFUSALS_0_34 = [
    ({"max_model_len": 1048576}, EXTENSIBLE_ALL + " and its activations;", "reserve"),
    (
        {"max_model_len": AFTER_WARMUP},
        EXTENSIBLE_ALL + ", its activations, CUDA graphs and warmup;",
        "final",
    ),
    (
        {"max_model_len": 262144, "gpu_memory_utilization": 0.45},
        "The KV cache gets what is left after the model and its activations within "
        "`gpu_memory_utilization`=0.45;",
        "reserve",
    ),
    (
        {
            "max_model_len": 262144,
            "gpu_memory_utilization": 0.45,
            "enable_extensible_kv_cache": False,
        },
        "Try increasing `gpu_memory_utilization` when initializing the engine (this flag also "
        "controls CPU memory reservation on the CPU backend, despite its name). Decreasing "
        "`max_model_len` also reduces what is needed.",
        "final",
    ),
]


def _after_warmup_len() -> int:
    """A max_model_len between what the size measured after warmup and the reserve hold."""
    card, gpu = load_card(FP8), get_gpu(H100)
    fits = plan_vllm(card, gpu, {"max_model_len": 262144}, version="0.34.0")
    per_token = fits.kv_needed_gib / 262144
    mid = (fits.kv_cache_gib + fits.kv_reserve_gib) / 2
    return int(mid / per_token) // 4096 * 4096


@pytest.mark.parametrize(("config", "hint", "available"), REFUSALS_0_34)
def test_0_34_refusals_word_their_hint(config: dict[str, Any], hint: str, available: str) -> None:
    card, gpu = load_card(FP8), get_gpu(H100)
    if config["max_model_len"] == AFTER_WARMUP:
        config = dict(config, max_model_len=_after_warmup_len())
    plan = plan_vllm(card, gpu, config, version="0.34.0")
    assert not plan.fits
    if available == "final" and plan.extensible_kv_cache:
        assert plan.kv_reserve_gib >= plan.kv_needed_gib > plan.kv_cache_gib
    text = "\n".join(failure_lines(plan, "0.34.0"))
    assert hint in text and "Decreasing `max_model_len` also reduces what is needed." in text
    gib = plan.kv_reserve_gib if available == "reserve" else plan.kv_cache_gib
    assert f"larger than the available KV cache memory ({format_gib(gib)} GiB)" in text
    failure = ADAPTER.classify_failure(text, 1, was_ready=False)
    assert failure.cls == FailureClass.KV_CACHE_OOM, failure
    assert f"max_model_len {plan.max_model_len} needs" in failure.reason


# -- the process ------------------------------------------------------------------------------


@contextmanager
def running(tmp_path: Path, config: dict[str, Any], *extra: str) -> Iterator[tuple[str, Path]]:
    port = free_port("127.0.0.1")
    argv = sim_argv(config, "0.33.0", port, "--sim-time-scale", "50", *extra)
    log = tmp_path / "sim.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            argv, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
        )
    try:
        yield f"http://127.0.0.1:{port}", log
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # its own process group (P9)
        proc.wait(timeout=10)


def test_the_process_speaks_vllms_api(tmp_path: Path) -> None:
    with running(tmp_path, K6, "--sim-max-startup-s", "1.5", "--api-key", "secret-key-1") as (
        url,
        log,
    ):
        refused = 0
        deadline = time.monotonic() + 30
        while True:  # nothing is served until the engine is up: refused, then 200, never 503
            try:
                r = httpx.get(url + "/health", timeout=2)
                break
            except httpx.TransportError:
                refused += 1
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
        assert r.status_code == 200 and refused > 0
        # the startup lines were all out before the port served
        assert "Starting vLLM server on" in log.read_text()
        text = log.read_text()
        assert ADAPTER.is_ready_line(text.splitlines()[-1])
        report = ADAPTER.parse_startup(text)
        assert report.simulated and report.ready and report.max_running_requests == 8
        # /v1 is guarded by --api-key; /health, /metrics, /version are not (vLLM's middleware)
        assert httpx.get(url + "/v1/models").status_code == 401
        auth = {"authorization": "Bearer secret-key-1"}
        models = httpx.get(url + "/v1/models", headers=auth).json()["data"][0]
        assert models["owned_by"] == "vllm" and models["max_model_len"] == 131072
        assert httpx.get(url + "/version").json()["version"] == "0.33.0"
        for path in ("/generate", "/server_info", "/flush_cache"):
            assert httpx.post(url + path, json={}).status_code == 404
        body = {
            "model": FP8,
            "messages": [{"role": "user", "content": "def f(x):\n    return x + 1\n" * 20}],
            "max_tokens": 24,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        with httpx.stream(
            "POST", url + "/v1/chat/completions", json=body, headers=auth, timeout=30
        ) as resp:
            events = [line for line in resp.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]" and '"stop_reason":null' in events[1]
        assert '"completion_tokens":24' in events[-2]
        metrics = httpx.get(url + "/metrics").text
        families = {f.name: f for f in text_string_to_metric_families(metrics)}
        assert not [n for n in families if n.startswith("sglang:")]
        assert families["vllm:generation_tokens"].samples[0].value == 24
        drafts = families["vllm:spec_decode_num_drafts"].samples[0].value
        drafted = families["vllm:spec_decode_num_draft_tokens"].samples[0].value
        assert drafts > 0 and drafted == 2 * drafts  # num_speculative_tokens 2
        success = families["vllm:request_success"].samples[0]
        assert success.labels["finished_reason"] == "length" and success.value == 1
        info = families["vllm:cache_config_info"].samples[0].labels
        assert info["gpu_memory_utilization"] == "0.9" and info["enable_prefix_caching"] == "True"
        too_long = dict(body, max_tokens=200_000, stream=False)
        r = httpx.post(url + "/v1/chat/completions", json=too_long, headers=auth)
        assert r.status_code == 400
        assert "maximum context length is 131072 tokens" in r.json()["message"]


def test_the_process_refuses_a_config_that_does_not_fit(tmp_path: Path) -> None:
    port = free_port("127.0.0.1")
    argv = sim_argv({"gpu_memory_utilization": 0.4}, "0.33.0", port)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 1
    assert "autotune simulated vLLM engine" in done.stderr.splitlines()[0]
    failure = ADAPTER.classify_failure(done.stderr, done.returncode, was_ready=False)
    assert failure.cls == FailureClass.KV_CACHE_OOM


def test_the_process_refuses_a_too_long_max_model_len_on_0_34(tmp_path: Path) -> None:
    config = {"max_model_len": 1048576}
    plan = plan_vllm(load_card(FP8), get_gpu(H100), config, version="0.34.0")
    assert plan.extensible_kv_cache and plan.kv_reserve_gib < plan.kv_needed_gib
    need, have = format_gib(plan.kv_needed_gib), format_gib(plan.kv_reserve_gib)
    port = free_port("127.0.0.1")
    done = subprocess.run(
        sim_argv(config, "0.34.0", port), capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 1
    error = next(ln for ln in done.stderr.splitlines() if "ValueError: " in ln)
    # kv_cache_planning.py _check_enough_kv_cache_memory with _more_kv_cache_memory_hint: the
    # extensible KV cache at gpu_memory_utilization 1.0, failing on the profiled capacity
    assert error.split("ValueError: ", 1)[1] == (
        f"To serve at least one request with the model's max seq len (1048576), ({need} GiB KV "
        f"cache is needed, which is larger than the available KV cache memory ({have} GiB). "
        "Based on the available memory, the estimated maximum model length is "
        f"{plan.estimated_max_model_len}. The extensible KV cache already takes all device "
        "memory left after the model and its activations; decrease `max_model_len` or "
        "`max_num_seqs`, or the model needs a device with more memory. Decreasing "
        "`max_model_len` also reduces what is needed. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    )
    assert "vllm/v1/core/kv_cache_planning.py" in done.stderr
    failure = ADAPTER.classify_failure(done.stderr, done.returncode, was_ready=False)
    assert failure.cls == FailureClass.KV_CACHE_OOM
    assert f"max_model_len 1048576 needs {need} GiB, {have} GiB available" in failure.reason
