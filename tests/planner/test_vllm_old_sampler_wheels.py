"""V0's sampler in the profiling run, read from the release wheels (full `vllm` wheels): where
the logits are cast to float32 and how the top-p step re-sorts (planner.vllm_legacy
sampler_bytes_per_logit), and the replay script's op table (benchmarks/vllm_old_sampler_peak.py)
against both."""

from __future__ import annotations

import ast
import sys
import zipfile
from pathlib import Path

import pytest

from autotune.planner.vllm_history import at_least
from autotune.planner.vllm_legacy import (
    SAMPLER_FP32_SINCE,
    SAMPLER_SCATTER_SINCE,
    sampler_bytes_per_logit,
)
from tests.wheels import full_vllm_wheel_or_skip

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
import vllm_old_sampler_peak as replay  # noqa: E402  (benchmarks/vllm_old_sampler_peak.py)

SAMPLER = "vllm/model_executor/layers/sampler.py"


def _function(version: str, name: str) -> str:
    with zipfile.ZipFile(full_vllm_wheel_or_skip(version)) as z:
        tree = ast.parse(z.read(SAMPLER).decode())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)
    return ast.unparse(node)


@pytest.mark.parametrize("version", ["0.4.1", "0.5.0", "0.5.4", "0.5.5", "0.6.1", "0.6.2"])
def test_cast_and_resort_are_the_releases(version: str) -> None:
    forward = _function(version, "forward")
    cast = "logits = logits.to(torch.float)" in forward
    assert cast == at_least(version, SAMPLER_FP32_SINCE)
    top = _function(version, "_apply_top_k_top_p")
    assert "logits_sort, logits_idx = logits.sort(dim=-1, descending=False)" in top
    assert "top_k_mask = logits_sort < top_k_mask" in top
    assert "probs_sum = probs_sort.cumsum(dim=-1)" in top
    scatter = "torch.empty_like(logits_sort).scatter_(" in top
    gather = "torch.gather(logits_sort, dim=-1, index=logits_idx_inv)" in top
    assert scatter == at_least(version, SAMPLER_SCATTER_SINCE) != gather
    assert (
        sampler_bytes_per_logit(version, 2)
        == {
            (False, False): 28,
            (True, False): 40,
            (True, True): 32,
        }[(cast, scatter)]
    )


@pytest.mark.parametrize("version", ["0.4.1", "0.5.0"])
def test_profile_run_samples_top_k_and_top_p(version: str) -> None:
    with zipfile.ZipFile(full_vllm_wheel_or_skip(version)) as z:
        runner = z.read("vllm/worker/model_runner.py").decode()
        worker = z.read("vllm/worker/worker.py").decode()
    assert "SamplingParams(top_p=0.99, top_k=self.vocab_size - 1)" in runner
    assert "peak_memory = self.init_gpu_memory - free_gpu_memory" in worker
    ranks = _function(version, "_get_ranks")
    assert (".long()" in ranks) is (version == "0.4.1")  # the replay's ranks phase


def test_replay_table_matches_the_planner() -> None:
    """The script's counted set at _apply_top_k_top_p's end is the planner's figure for the
    releases it replays (model-dtype logits, inverse index and gather)."""
    for dtype, b in (("bfloat16", 2), ("float16", 2), ("float32", 4)):
        assert replay.expected_peak_per_logit(dtype) == sampler_bytes_per_logit("0.5.0", b)
        assert replay.expected_bytes_per_logit("gather", dtype) == 5 * b + 18


def test_replay_pure_parts() -> None:
    assert replay.padded(128256, 64) == 128256 and replay.padded(32000, 64) == 32000
    assert replay.padded(32001, 64) == 32064
    idx = replay.last_token_indices(3, 10)  # prompts of 4, 3, 3 tokens
    assert idx == [3, 6, 9]
    assert replay.last_token_indices(256, 8192)[-1] == 8191
    args = replay.parse_args(["--rows", "4", "--vocab", "100", "--hidden", "8", "--tokens", "9"])
    assert args.dtype == "bfloat16" and args.version == "0.4.1" and args.device == "cuda"
    with pytest.raises(SystemExit):
        replay.parse_args(["--rows", "10", "--vocab", "100", "--hidden", "8", "--tokens", "9"])


@pytest.mark.parametrize("version", ["0.4.1", "0.5.0"])
def test_replay_runs_on_cpu(version: str) -> None:
    pytest.importorskip("torch")
    argv = ["--rows", "4", "--vocab", "100", "--hidden", "8", "--tokens", "9", "--device", "cpu"]
    argv += ["--version", version, "--forward-intermediate", "16"]
    out = replay.run(replay.parse_args(argv))
    names = [p["phase"] for p in out["phases"]]
    assert names[0] == "forward" and names[-1] == "topk"
    assert names[1:] == list(replay.EXPECTED_ALIVE)
    assert out["expected_peak_bytes_per_logit"] == 28


RESULTS = BENCH / "results" / "vllm_old_sampler_peak"
RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches" / "vllm"


@pytest.mark.parametrize(
    ("record", "result"),
    [
        ("repo-meta-llama-3-8b-rtx3090-tp1", "h200-llama3-8b-0.4.1-forward-then-sampler.json"),
        ("v-deepseek-coder-6.7b-instruct-t4-tp2", "h200-deepseek-coder-6.7b-0.5.0-tp2.json"),
    ],
)
def test_old_records_peak_between_the_replays_allocated_and_reserved(
    record: str, result: str
) -> None:
    """The two 0.4.1 / 0.5.0 misses' planner gap: the peak their logged blocks imply (the budget
    less the planner's weights, non-torch memory and the logged KV) lies above the replay's
    allocated peak, which the planner models, and at most its reserved pool, which the release
    measures (free memory before minus after, no empty_cache between)."""
    import json

    from autotune.calibration.records import load_record
    from autotune.calibration.replay import replay as replay_record
    from autotune.planner.common import GIB

    r = replay_record(load_record(RECORDS / f"{record}.yaml"))
    p = r.plan
    assert p is not None and r.observed_kv is not None
    assert any("reserved pool" in gap for gap in r.record.planner_gap)
    logged_kv = r.observed_kv * p.kv_cell_bytes / GIB
    implied = p.requested_gib - p.weights_gib - p.non_torch_gib - logged_kv
    run = json.loads((RESULTS / result).read_text())
    assert run["peak_allocated"] / GIB <= p.activation_gib + 0.1  # the planner: the allocated peak
    assert run["peak_allocated"] / GIB < implied <= run["peak_reserved"] / GIB
