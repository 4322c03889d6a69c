"""Shared helpers for the sweep tests: small specs, a store in a temp folder, process checks."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

FAKE_ENGINE = Path(__file__).with_name("fake_engine.py")

# A small space: everything fixed except the fields a test opens up.
BASE_SPEC: dict[str, Any] = {
    "name": "t",
    "target": {
        "engine": "sglang",
        "engine_version": "0.5.17",
        "model": "qwen3.8-27b-awq-int4",
        "gpu": "rtx-4080-super-32g",
        "host_free_gib": 64,
    },
    "simulate": {"time_scale": 20, "max_startup_s": 0.2},
    "space": {
        "overrides": {
            "mem_fraction_static": {"low": 0.86, "high": 0.94, "step": 0.02},
            "max_running_requests": {"choices": [None, 2, 4, 8]},
            "max_mamba_cache_size": {"choices": [None, 6, 12]},
            "chunked_prefill_size": {"choices": [2048, 4096]},
            "kv_cache_dtype": {"choices": ["fp8_e4m3", "bf16"]},
            "page_size": 1,
            "enable_hierarchical_cache": False,
            "speculative_algorithm": None,
            "cuda_graph_max_bs_decode": None,
            "mamba_radix_cache_strategy": None,
            # the scheduling and kernel knobs stay at the engine's choice
            "attention_backend": None,
            "schedule_policy": None,
            "prefill_attention_backend": None,
            "decode_attention_backend": None,
            "linear_attn_backend": None,
            "schedule_conservativeness": None,
            "max_prefill_tokens": None,
            "mamba_ssm_dtype": None,
            "cuda_graph_bs_decode": None,
            "hicache_ratio": None,
            "triton_attention_num_kv_splits": None,
            "disable_overlap_schedule": False,
            "enable_mixed_chunk": False,
            "sleep_on_idle": False,
        },
    },
    "workload": {
        "scenarios": [
            {
                "kind": "decode",
                "name": "probe",
                "prompt_len": 64,
                "output_len": 8,
                "num_requests": 1,
                "warmup_requests": 0,
            },
            {
                "kind": "throughput",
                "name": "tp",
                "prompt_len": 128,
                "output_len": 16,
                "concurrency": 4,
                "num_requests": 4,
                "warmup_requests": 0,
            },
        ]
    },
    "objective": {"metric": "tp.output_tok_s"},
    "budget": {"max_trials": 6},
    # launch counts stay what the tests set: confirmation re-runs have tests of their own
    # (tests/sweep/test_confirm.py)
    "search": {"seed": 1, "n_startup_trials": 3, "confirm_runs": 1},
    "finalists": {"top_k": 0},
    "engine": {"startup_timeout_s": 20, "bench_timeout_s": 60, "stop_grace_s": 3},
    # the fake engines answer any POST with a stream and count requests (fault injection):
    # the tests that want the quality guard turn it on
    "quality": {"enabled": False},
    "execution": {"workers": 1},
}


def make_spec(_base: dict[str, Any] | None = None, **changes: Any) -> dict[str, Any]:
    """BASE_SPEC (or `_base`) with dotted-key changes: make_spec(**{"budget.max_trials": 3})."""
    spec = copy.deepcopy(BASE_SPEC if _base is None else _base)
    for dotted, value in changes.items():
        node = spec
        *parents, last = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        if value is _DROP:
            node.pop(last, None)
        else:
            node[last] = value
    return spec


_DROP = object()
DROP = _DROP


def write_spec(tmp_path: Path, spec: dict[str, Any], name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def fake_launcher() -> list[str]:
    return [sys.executable, str(FAKE_ENGINE)]


def live_children() -> list[psutil.Process]:
    """Descendants of this test process that are still running (zombies excluded)."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def procs_matching(marker: str) -> list[psutil.Process]:
    """Running processes whose command line contains `marker` (a test's unique model path):
    engines started for that test, whichever process started them."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in p.info["cmdline"] or []) and (
                p.status() != psutil.STATUS_ZOMBIE
            ):
                found.append(p)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def store(tmp_path: Path) -> Any:
    from autotune.store.db import Store

    s = Store(path=tmp_path / "autotune.db")
    yield s
    s.close()
