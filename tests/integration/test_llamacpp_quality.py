"""The quality guard against the real llama-server on CPU (random weights): the f16 KV cache
answers the probe set (the reference), then q8_0 and q4_0 KV caches and n-gram speculation answer
it too; the drift each one shows is printed (the figures of issue 21's closing note), and the
default limit calls the 4-bit cache degraded.

Skipped unless llama-server is built (scripts/build-llama-server) or AUTOTUNE_BUILD_LLAMA=1.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from autotune.engines.llamacpp import LlamaCppAdapter
from autotune.process import EngineProcess, free_port
from autotune.quality.client import fetch_answers
from autotune.quality.compare import Answer, Drift, drift
from autotune.quality.guard import constraints
from autotune.quality.probes import probe_set
from autotune.sweep.spec_models import QualitySpec
from tests.integration.llamacpp_env import llama_server, model

pytestmark = pytest.mark.llamacpp

VERSION = "0.3.36"
BASE: dict[str, Any] = {"parallel": 1, "ctx_size": 4096, "fit": "off", "threads": 2}
PROBES = probe_set(8, tokens=96, long_tokens=1024)


COST: dict[str, float] = {}


def _answers(binary: Path, gguf: Path, config: dict[str, Any], log: Path) -> dict[str, Answer]:
    adapter = LlamaCppAdapter(binary=binary)
    port = free_port()
    cmd = adapter.build_command({**BASE, **config}, model=str(gguf), version=VERSION, port=port)
    with EngineProcess(port=port, label="llamacpp-quality") as eng:
        eng.start(cmd.argv, cmd.env, log)
        url = f"http://127.0.0.1:{port}"
        eng.wait_ready(
            f"{url}{adapter.health_path()}", deadline_s=120, is_ready_line=adapter.is_ready_line
        )
        t0 = time.monotonic()
        out = fetch_answers(url, PROBES, model="m", api="llamacpp", max_tokens=24, top_k=8)
        COST[log.stem] = time.monotonic() - t0
        return out


class _Spec:
    quality = QualitySpec()


def test_kv_cache_types_and_ngram_against_the_f16_reference(tmp_path: Path) -> None:
    binary, gguf = llama_server(), model("small", tmp_path)
    ref = _answers(binary, gguf, {"flash_attn": "on"}, tmp_path / "f16.log")
    again = drift(ref, _answers(binary, gguf, {"flash_attn": "on"}, tmp_path / "f16b.log"))
    assert again.token_agreement == 1.0 and (again.mean_kl or 0.0) < 1e-6  # deterministic
    runs: dict[str, tuple[dict[str, Any], Drift]] = {}
    for name, cfg in {
        "q8_0": {"flash_attn": "on", "cache_type_k": "q8_0", "cache_type_v": "q8_0"},
        "q4_0": {"flash_attn": "on", "cache_type_k": "q4_0", "cache_type_v": "q4_0"},
        "ngram": {"flash_attn": "on", "spec_type": "ngram-simple"},
    }.items():
        runs[name] = cfg, drift(ref, _answers(binary, gguf, cfg, tmp_path / f"{name}.log"))
    for name, (_, d) in runs.items():
        print(
            f"quality {name}: token agreement {d.token_agreement:.3f} (min {d.min_agreement:.3f}), "
            f"first divergence {d.first_divergence}, mean top-k KL {d.mean_kl}"
        )
    print("probe seconds per configuration:", {k: round(v, 2) for k, v in COST.items()})
    q8, q4 = runs["q8_0"][1], runs["q4_0"][1]
    assert q4.mean_kl is not None and q8.mean_kl is not None and q4.mean_kl > q8.mean_kl
    # the default limits: the 4-bit cache is degraded, the 8-bit one and n-gram speculation
    # are not (speculation verifies greedily: it must reproduce the reference)
    verdicts = {
        name: constraints(_Spec(), "llamacpp", cfg, {"drift": d.to_json()})
        for name, (cfg, d) in runs.items()
    }
    assert any(v > 0 for v in verdicts["q4_0"].values()), verdicts
    assert all(v <= 0 for v in verdicts["q8_0"].values()), verdicts
    assert all(v <= 0 for v in verdicts["ngram"].values()), verdicts
    assert runs["ngram"][1].first_divergence is None
