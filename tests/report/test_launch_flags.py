"""Every flag a generated launch.sh passes exists in the SGLang version it names (issue 9,
part 2). The flags are read from the real PyPI wheels' argument definitions with `ast`, without
importing SGLang; the argv is the one the script really hands to the interpreter (run with a
fake python3 that records it). Configurations cover the flags renamed across versions (mamba
strategy, CUDA-graph batch cap: FIELD-NOTES P13), HiCache with the file tier (P4), speculative
decoding, a secret flag, and the winner of a stored sweep.

Wheels are cached across runs in $AUTOTUNE_WHEEL_CACHE or ~/.cache/autotune/wheels. The test is
skipped only when PyPI cannot be reached; any other download failure fails it.
"""

from __future__ import annotations

import os
import subprocess
from functools import cache
from pathlib import Path

import pytest

from autotune.engines.wheels import download_wheel
from autotune.report.launch import build_launch, render_launch_sh
from tests.engines.wheel_flags import flags_from_wheel

from .conftest import build_sweep
from .test_launch import Runner, free_port

VERSIONS = ("0.5.9", "0.5.17", "0.5.23")

CONFIGS: dict[str, dict[str, object]] = {
    "memory-and-batching": {
        "mem_fraction_static": 0.88,
        "chunked_prefill_size": 4096,
        "max_running_requests": 8,
        "max_total_tokens": 185000,
        "context_length": 131072,
        "kv_cache_dtype": "fp8_e4m3",
        "page_size": 64,
        "schedule_policy": "lpm",
        "reasoning_parser": "qwen3",
        "tool_call_parser": "qwen3_coder",
    },
    "mamba-strategy-renamed": {
        "mamba_radix_cache_strategy": "no_buffer",
        "max_mamba_cache_size": 6,
        "mamba_ssm_dtype": "bfloat16",
        "page_size": 1,
    },
    "cuda-graph-renamed": {"cuda_graph_max_bs_decode": 8, "disable_overlap_schedule": True},
    "hicache-file-tier": {
        "enable_hierarchical_cache": True,
        "hicache_size": 12,
        "hicache_write_policy": "write_through",
        "hicache_io_backend": "direct",
        "hicache_mem_layout": "page_first",
        "hicache_storage_backend": "file",
        "page_size": 1,
    },
    "speculative-ngram": {
        "speculative_algorithm": "NGRAM",
        "speculative_num_steps": 5,
        "speculative_num_draft_tokens": 6,
    },
    "speculative-nextn-tree": {
        "speculative_algorithm": "NEXTN",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 2,
        "speculative_num_draft_tokens": 4,
    },
    "secret-and-names": {"api_key": "sk-not-in-the-script-123", "served_model_name": "my model"},
    # issue 24's knobs: kernels per phase, the split cap, scheduling, graph lists, host ratio
    "kernels-and-scheduling": {
        "attention_backend": "triton",
        "decode_attention_backend": "flashinfer",
        "triton_attention_num_kv_splits": 16,
        "schedule_policy": "lpm",
        "schedule_conservativeness": 0.8,
        "enable_mixed_chunk": True,
        "max_prefill_tokens": 8192,
        "sleep_on_idle": True,
        "cuda_graph_bs_decode": [1, 2, 4],
        "enable_hierarchical_cache": True,
        "hicache_ratio": 2.0,
        "hicache_io_backend": "direct",
    },
}

# The renamed flags and which spelling each version must get (sglang-internals §1.3).
RENAMED = {
    "0.5.9": ("--mamba-scheduler-strategy", "--cuda-graph-max-bs"),
    "0.5.17": ("--mamba-radix-cache-strategy", "--cuda-graph-max-bs-decode"),
    "0.5.23": ("--mamba-radix-cache-strategy", "--cuda-graph-max-bs-decode"),
}


def wheel_cache() -> Path:
    env = os.environ.get("AUTOTUNE_WHEEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "autotune" / "wheels"


def pypi_reachable() -> bool:
    import httpx

    try:
        httpx.head("https://pypi.org/simple/sglang/", timeout=10.0, follow_redirects=True)
    except httpx.HTTPError:
        return False
    return True


@cache
def wheel_flags(version: str) -> frozenset[str]:
    try:
        wheel = download_wheel("sglang", version, wheel_cache())
    except (subprocess.SubprocessError, OSError) as exc:
        if not pypi_reachable():
            pytest.skip(f"PyPI is unreachable, cannot download sglang=={version}: {exc}")
        raise
    flags = flags_from_wheel(wheel, "sglang")
    assert len(flags) > 200, f"read only {len(flags)} flags from {wheel.name}"
    return frozenset(flags)


def argv_flags(argv: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in argv if a.startswith("--")]


def run_script(runner: Runner, config: dict[str, object], version: str, name: str) -> list[str]:
    spec = build_launch(
        config,
        engine="sglang",
        engine_version=version,
        sweep=f"flags-{name}",
        model_path="/models/qwen3.8-27b",
        tp=2,
    )
    script = runner.write(spec, name=f"launch-{version}-{name}.sh")
    assert f"# engine: sglang=={version}" in script.read_text().splitlines()
    port = free_port()
    res = runner.run(script, {"API_KEY": "k"}, port=port)
    assert res.returncode == 0, res.stderr
    argv = runner.argv()
    assert argv[:2] == ["-m", "sglang.launch_server"]
    return argv


@pytest.mark.parametrize("version", VERSIONS)
def test_every_flag_exists_in_the_named_version(version: str, tmp_path: Path) -> None:
    known = wheel_flags(version)
    runner = Runner(tmp_path)
    seen: set[str] = set()
    for name, config in CONFIGS.items():
        argv = run_script(runner, dict(config), version, name)
        flags = argv_flags(argv)
        missing = sorted(set(flags) - known)
        assert not missing, f"sglang {version} has no {missing} (config {name}: {argv})"
        seen.update(flags)
        if name == "kernels-and-scheduling":  # a list flag keeps its values as words
            i = argv.index("--cuda-graph-bs-decode" if version != "0.5.9" else "--cuda-graph-bs")
            assert argv[i + 1 : i + 4] == ["1", "2", "4"]
    # The renamed spellings are the ones this version has, so the check is not vacuous.
    for flag in RENAMED[version]:
        assert flag in seen and flag in known
    assert "--tp-size" in seen
    assert {"--attention-backend", "--schedule-policy", "--hicache-ratio"} <= seen


def test_removed_spellings_are_absent_from_new_wheels() -> None:
    """The wheel reader sees the removals, so a stale spelling would fail the test above."""
    new = wheel_flags("0.5.23")
    assert "--cuda-graph-max-bs" not in new and "--mamba-scheduler-strategy" not in new
    old = wheel_flags("0.5.9")
    assert "--cuda-graph-max-bs-decode" not in old and "--mamba-radix-cache-strategy" not in old


@pytest.mark.parametrize("version", VERSIONS)
def test_stored_sweep_winner_flags_exist(version: str, tmp_path: Path) -> None:
    known = wheel_flags(version)
    built = build_sweep(tmp_path, n_complete=4, with_failures=False, with_study=False)
    from autotune.report.collect import collect

    winner = collect(built.store, built.sweep).winner
    built.store.close()
    assert winner is not None
    spec = build_launch(
        winner.config,
        engine="sglang",
        engine_version=version,
        sweep=built.sweep,
        model_path="/models/x",
    )
    (tmp_path / "run").mkdir()
    runner = Runner(tmp_path / "run")
    script = runner.write(spec)
    assert render_launch_sh(spec)  # renders for every version
    res = runner.run(script, {"HF_TOKEN": "t"})
    assert res.returncode == 0, res.stderr
    flags = argv_flags(runner.argv())
    assert "--mem-fraction-static" in flags
    assert not sorted(set(flags) - known)
