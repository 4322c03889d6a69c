"""vLLM V1's multimodal encoder profiling (planner/vllm_encoder.py) against the release wheels
0.12.0 .. 0.27.0 and 0.34.0: profile_run's order (encoder, then the text pass with the outputs and
the dummy inputs still held; on 0.34.0's Model Runner V2 the outputs alone, on the first pipeline
stage), MultiModalBudget's items per batch (its own code run on a grid), the 999 default limit,
the processor's cast to the model dtype and Gemma 3's dummy image; then the rule on the llm-d
Gemma 3 launches, whose logs state the torch peak."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from autotune.calibration.records import load_records
from autotune.calibration.replay import replay
from autotune.models.card import ModelCard
from autotune.models.config_cards import config_card
from autotune.planner.common import GIB
from autotune.planner.vllm import VLLMPlan
from autotune.planner.vllm_encoder import (
    DEFAULT_LIMIT,
    ENCODER_INPUTS_FREED_SINCE,
    encoder_profile,
    image_limit,
    items_per_batch,
)
from autotune.planner.vllm_history import at_least
from tests.wheels import function_def, wheel_text

RELEASES = ("0.12.0", "0.14.0", "0.16.0", "0.19.0", "0.25.1", "0.27.0", "0.34.0")
RUNNER = "vllm/v1/worker/gpu_model_runner.py"
V2_RUNNER = "vllm/v1/worker/gpu/model_runner.py"  # Model Runner V2, the only runner from 0.34.0
V2_ENCODER = "vllm/v1/worker/gpu/mm/encoder_runner.py"


def _runner(version: str) -> str:
    """The release's model runner: V1's, or from 0.34.0 (no V1 runner in the wheel) V2's."""
    if at_least(version, ENCODER_INPUTS_FREED_SINCE):
        with pytest.raises(KeyError):
            wheel_text("vllm", version, RUNNER)
        return wheel_text("vllm", version, V2_RUNNER)
    return wheel_text("vllm", version, RUNNER)


def _budget_file(version: str) -> tuple[str, str]:
    """Where MultiModalBudget's item count lives, and its method's name."""
    text = _runner(version)
    if "from vllm.multimodal.encoder_budget import" in text:
        return "vllm/multimodal/encoder_budget.py", "_get_max_items"
    return "vllm/v1/worker/utils.py", "get_max_items"


def _card(name: str) -> ModelCard:
    card = config_card(name)
    assert card is not None
    return card


@pytest.mark.parametrize("version", RELEASES)
def test_profile_run_keeps_encoder_outputs_and_inputs_through_the_text_pass(version: str) -> None:
    if at_least(version, ENCODER_INPUTS_FREED_SINCE):
        return _v2_profile_run_keeps_the_outputs_alone(version)
    fn = function_def(wheel_text("vllm", version, RUNNER), "profile_run")
    body = ast.unparse(fn)
    enc = body.index("self.model.embed_multimodal(**batched_dummy_mm_inputs)")
    keep = body.index("self.encoder_cache[")
    text = body.index("self._dummy_run(self.max_num_tokens, is_profile=True)")
    sampler = body.index("self._dummy_sampler_run(last_hidden_states)")
    clear = body.index("self.encoder_cache.clear()")
    assert enc < keep < text < sampler < clear
    # the dummy inputs are a local that nothing deletes before the function returns
    assert "del batched_dummy_mm_inputs" not in body


def _v2_profile_run_keeps_the_outputs_alone(version: str) -> None:
    """Model Runner V2: the first stage runs the encoder through
    EncoderRunner.profile_encoder_cache, whose outputs stay in the encoder cache through the text
    pass and the sampler; the device copy of the dummy inputs is execute_mm_encoder's own local,
    made from host items, so it is gone when the text pass runs."""
    body = ast.unparse(function_def(wheel_text("vllm", version, V2_RUNNER), "profile_run"))
    assert "if self.supports_mm_inputs and self.is_first_pp_rank:" in body
    enc = body.index("self.model_state.encoder_runner.profile_encoder_cache(dummy_mm_inputs")
    text = body.index("self._dummy_run(self.max_num_tokens")
    sampler = body.index("self._dummy_sampler_run(sample_hidden_states)")
    clear = body.index("self.reset_encoder_cache()")
    assert enc < text < sampler < clear
    runner = wheel_text("vllm", version, V2_ENCODER)
    profile = ast.unparse(function_def(runner, "profile_encoder_cache"))
    assert "dummy_encoder_outputs = self.execute_mm_encoder(dummy_mm_inputs)" in profile
    assert "self.encoder_cache.encoder_outputs.update(" in profile
    execute = ast.unparse(function_def(runner, "execute_mm_encoder"))
    assert "group_and_batch_mm_kwargs(" in execute and "device=self.device" in execute
    assert "self.model.embed_multimodal(**mm_kwargs_batch)" in execute
    assert "self.encoder_cache" not in execute  # the device batch is not kept
    budget = wheel_text("vllm", version, "vllm/multimodal/encoder_budget.py")
    dummy = ast.unparse(function_def(budget, "get_dummy_encoder_profile_inputs"))
    assert "return [(modality, dummy_mm_item)] * max_items_per_batch" in dummy
    assert "device" not in dummy  # host items
    context = wheel_text("vllm", version, "vllm/multimodal/processing/context.py")
    host = "if not tensor.is_cpu and not keep_on_device:\n                tensor = tensor.cpu()"
    assert host in context


@pytest.mark.parametrize("version", RELEASES)
def test_items_per_batch_is_the_wheels_own_arithmetic(version: str) -> None:
    path, name = _budget_file(version)
    method = function_def(wheel_text("vllm", version, path), name)
    budget_fn = function_def(
        wheel_text("vllm", version, "vllm/v1/core/encoder_cache_manager.py"),
        "compute_mm_encoder_budget",
    )
    scope: dict[str, Any] = {"logger": SimpleNamespace(warning=print)}
    for node in (budget_fn, method):
        node.returns = None
        for a in node.args.args:
            a.annotation = None
        exec(compile(ast.fix_missing_locations(ast.Module([node], [])), path, "exec"), scope)
    sched_src = wheel_text("vllm", version, "vllm/config/scheduler.py")
    assert "self.max_num_encoder_input_tokens = self.max_num_batched_tokens" in sched_src
    assert "self.encoder_cache_size = self.max_num_batched_tokens" in sched_src
    grid = itertools.product(
        (256, 1369, 3080, 16384), (2048, 8192, 16384), (4096, 8192, 131072), (1, 256, 1024),
        (True, False), (1, 5, DEFAULT_LIMIT),
    )  # fmt: skip
    for tokens, mnbt, mml, seqs, chunked, limit in grid:
        sched = SimpleNamespace(
            max_num_batched_tokens=mnbt,
            max_num_encoder_input_tokens=mnbt,
            encoder_cache_size=mnbt,
            enable_chunked_prefill=chunked,
            disable_chunked_mm_input=False,
        )
        compute, size = scope["compute_mm_encoder_budget"](sched, {"image": tokens})
        this = SimpleNamespace(
            get_encoder_budget=lambda c=compute, s=size: min(c, s),
            mm_limits={"image": limit},
            max_model_len=mml,
            max_num_reqs=seqs,
            scheduler_config=sched,
        )
        _, want = scope[name](this, "image", tokens)
        got = items_per_batch(
            tokens,
            max_num_batched_tokens=mnbt,
            max_model_len=mml,
            max_num_seqs=seqs,
            chunked_prefill=chunked,
            limit=limit,
        )
        assert got == want, (tokens, mnbt, mml, seqs, chunked, limit)


@pytest.mark.parametrize("version", RELEASES)
def test_default_limit_and_the_cast_to_the_model_dtype(version: str) -> None:
    mm = function_def(
        wheel_text("vllm", version, "vllm/config/multimodal.py"), "get_limit_per_prompt"
    )
    assert f"return {DEFAULT_LIMIT}" in ast.unparse(mm)
    path = (
        "vllm/multimodal/processing/context.py"
        if at_least(version, "0.16.0")
        else "vllm/multimodal/processing.py"
    )
    # (0.34.0 names the local `tensor`)
    cast = re.search(
        r"if (\w+)\.is_floating_point\(\):\n\s+\1 = \1\.to\(dtype=self\.model_config\.dtype\)",
        wheel_text("vllm", version, path),
    )
    assert cast is not None


@pytest.mark.parametrize("version", RELEASES)
def test_gemma3_dummy_image_is_one_native_square_of_mm_tokens_per_image(version: str) -> None:
    src = wheel_text("vllm", version, "vllm/model_executor/models/gemma3_mm.py")
    crops = ast.unparse(function_def(src, "get_num_crops"))
    assert "if not do_pan_and_scan:\n        return 0" in crops
    tokens = ast.unparse(function_def(src, "get_num_image_tokens"))
    assert "image_seq_len = processor.image_seq_length" in tokens
    assert "return (num_crops + 1) * image_seq_len" in tokens
    # pixel_values are (crops, 3, image_size, image_size); the tower runs on the whole batch
    assert 'resolve_bindings={"h": image_size, "w": image_size}' in src
    assert "self.multi_modal_projector(image_features)" in src


def _profile(card: ModelCard, cfg: dict[str, Any], version: str = "0.19.0") -> Any:
    return encoder_profile(
        card,
        cfg,
        version,
        max_num_batched_tokens=8192,
        max_model_len=8192,
        max_num_seqs=1024,
        chunked_prefill=True,
    )


def test_gemma3_profile_keeps_pixels_and_outputs() -> None:
    card = _card("google/gemma-3-12b-it")
    prof = _profile(card, {})
    assert prof is not None and prof.items == 32  # 8192 // 256
    assert prof.kept_bytes == 32 * (3 * 896 * 896 + 256 * 3840) * 2
    # the SigLIP pass over 32 x 4096 patches stays below the text pass's sampler peak
    assert prof.peak(int(3.73 * GIB)) == prof.kept_bytes + int(3.73 * GIB)


def test_v2_holds_the_outputs_alone_on_the_first_stage() -> None:
    """0.34.0: the text pass holds the 32 outputs but not the pixel values; a later pipeline
    stage profiles no encoder (0.27.0's V1 runner profiles it on every stage)."""
    card = _card("google/gemma-3-12b-it")
    old, new = _profile(card, {}, "0.27.0"), _profile(card, {}, "0.34.0")
    assert old is not None and new is not None and new.items == old.items == 32
    assert new.kept_bytes == 32 * 256 * 3840 * 2
    assert old.kept_bytes - new.kept_bytes == 32 * 3 * 896 * 896 * 2
    assert new.encoder_peak_bytes == old.encoder_peak_bytes  # the batch is on the GPU there
    later = {"max_num_batched_tokens": 8192, "max_model_len": 8192, "max_num_seqs": 1024,
             "chunked_prefill": True, "first_stage": False}  # fmt: skip
    assert encoder_profile(card, {}, "0.34.0", **later) is None
    assert encoder_profile(card, {}, "0.27.0", **later) == old


def test_no_encoder_profiling_where_vllm_runs_none() -> None:
    card = _card("google/gemma-3-12b-it")
    assert _profile(card, {"limit_mm_per_prompt": {"image": 0}}) is None
    assert _profile(card, {"skip_mm_profiling": True}) is None
    assert _profile(card, {"language_model_only": True}) is None
    assert _profile(card, {}, version="0.11.0") is None
    assert _profile(_card("google/gemma-2-9b-it"), {}) is None
    assert image_limit({"limit_mm_per_prompt": {"image": {"count": 2}}}) == 2
    assert image_limit({"limit_mm_per_prompt": '{"image": 0, "audio": 0}'}) == 0
    assert _profile(card, {"mm_processor_kwargs": '{"do_pan_and_scan": true}'}) is None


@pytest.mark.parametrize(
    ("name", "logged_gib"),
    [  # "torch peak memory increase", llm-d-planner v0.19.0 H100 logs (real_launches/vllm/llmd-*)
        ("google/gemma-3-4b-it", 3.89),
        ("google/gemma-3-12b-it", 3.94),
        ("google/gemma-3-27b-it", 3.99),
    ],
)
def test_gemma3_profiling_peak_matches_the_logs(name: str, logged_gib: float) -> None:
    root = Path(__file__).resolve().parents[1] / "data" / "real_launches"
    rec = next(r for r in load_records(root) if r.engine == "vllm" and r.model == name)
    plan = replay(rec).plan
    assert isinstance(plan, VLLMPlan)
    assert plan.activation_gib == pytest.approx(logged_gib, abs=0.02)
