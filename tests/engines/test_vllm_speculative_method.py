"""A speculative_config without `method`: vLLM infers it from the draft's path (engines.vllm.
speculative.inferred_method), checked against the releases' own SpeculativeConfig."""

from __future__ import annotations

import re

import pytest

from autotune.engines.vllm.flags import build_flags, version_index
from autotune.engines.vllm.speculative import (
    NAME_METHODS,
    inferred_method,
    speculative_config,
    speculative_methods,
)
from autotune.errors import ConfigError
from tests.wheels import wheel_text

LAGUNA_DRAFT = "poolside/Laguna-S-2.1-DFlash-INT4"


SPEC_DECODE = "vllm/v1/worker/gpu/spec_decode"


def _name_checks(version: str) -> list[tuple[str, str]]:
    """(path substring, method) pairs of the release's method detection, in their order."""
    if version_index(version) >= version_index("0.34.0"):
        return _matches_checks(version)
    text = wheel_text("vllm", version, "vllm/config/speculative.py")
    pattern = (
        r'elif \(?\s*"([a-z0-9-]+)" in self\.draft_model_config\.model\.lower\(\)'
        r'[^:]*?:\s+self\.method = "([a-z0-9_]+)"'
    )
    return re.findall(pattern, text, flags=re.DOTALL)


def _matches_checks(version: str) -> list[tuple[str, str]]:
    """From 0.34.0: the methods of _CHECKPOINT_DETECTION_ORDER (speculator_config.py) whose
    SpeculatorConfig.matches tests a substring of the draft's lowercased path, in that order."""
    text = wheel_text("vllm", version, f"{SPEC_DECODE}/speculator_config.py")
    order = re.search(r"_CHECKPOINT_DETECTION_ORDER = \(([^)]*)\)", text)
    assert order is not None
    out = []
    for method in re.findall(r'"([a-z0-9_]+)"', order.group(1)):
        where = re.search(rf'"{method}": _builtin\(\s*"([a-z0-9_.]+)", "(\w+)"\)', text)
        assert where is not None, method
        module, cls = where.groups()
        source = wheel_text("vllm", version, f"{SPEC_DECODE}/{module.replace('.', '/')}.py")
        # the class's own matches (not a later class's): no "class" line in between
        own = rf"class {cls}\((?:(?!\nclass ).)*?def matches\((.*?)\n    (?:@|def )"
        body = re.search(own, source, re.DOTALL)
        assert body is not None, cls
        key = re.search(
            r'return "([a-z0-9-]+)" in spec\.draft_model_config\.model\.lower\(\)', body[1]
        )
        if key is not None:  # mtp matches on the draft's model_type, not its path
            out.append((key.group(1), method))
    return out


@pytest.mark.parametrize(
    "version", ["0.11.0", "0.19.1", "0.20.0", "0.24.0", "0.25.1", "0.33.0", "0.34.0"]
)
def test_name_rules_are_the_releases(version: str) -> None:
    methods = speculative_methods(version)
    ours = [(k, m) for k, m in NAME_METHODS if m in methods]
    assert _name_checks(version) == ours


def test_the_release_defaults_to_draft_model_before_the_name_checks() -> None:
    text = wheel_text("vllm", "0.25.1", "vllm/config/speculative.py")
    body = text[text.index("def __post_init__") :]
    default = body.index('self.method = "draft_model"')
    assert body.index('if self.model in ("ngram", "[ngram]")') < default
    # the custom-class path check comes first (0.22.0 .. 0.25.x: a dot and no slash)
    assert body.index('"/" not in self.model') < default
    assert body.index('"dflash" in self.draft_model_config.model.lower()') > default


def test_from_0_34_0_a_declared_speculator_comes_before_the_names() -> None:
    text = wheel_text("vllm", "0.34.0", f"{SPEC_DECODE}/speculator_config.py")
    body = text[text.index("def _resolve_checkpoint_config_class") :]
    declared = body.index("return declared_cls")
    assert declared < body.index("for method in _CHECKPOINT_DETECTION_ORDER")
    post_init = wheel_text("vllm", "0.34.0", "vllm/config/speculative.py")
    assert "_is_custom_proposer_path" not in post_init  # no custom_class inference any more


def test_inferred_method() -> None:
    assert inferred_method(LAGUNA_DRAFT, "0.25.1") == "dflash"
    assert inferred_method("/models/qwen3.6-27b-dflash", "0.20.0") == "dflash"
    assert inferred_method(LAGUNA_DRAFT, "0.19.1") is None  # no dflash: draft_model
    assert inferred_method("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "0.25.1") == "eagle3"
    assert inferred_method("yuhuili/EAGLE-LLaMA3-Instruct-8B", "0.11.0") == "eagle"
    assert inferred_method("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "0.10.1.1") == "eagle"
    assert inferred_method("ngram", "0.10.0") == "ngram"
    assert inferred_method("meta-llama/Llama-3.2-1B", "0.25.1") is None
    # a bare dotted name is a proposer class from 0.22.0; from 0.26.0 only identifiers
    assert inferred_method("Qwen3.6-27B-DFlash", "0.25.1") == "custom_class"
    assert inferred_method("Qwen3.6-27B-DFlash", "0.26.0") == "dflash"
    assert inferred_method("my_pkg.Proposer", "0.26.0") == "custom_class"
    assert inferred_method("Qwen3.6-27B-DFlash", "0.21.0") == "dflash"
    # 0.34.0 has no custom_class: a dotted name is a draft path like any other
    assert inferred_method("my_pkg.Proposer", "0.33.0") == "custom_class"
    assert inferred_method("my_pkg.Proposer", "0.34.0") is None
    assert inferred_method("Qwen3.6-27B-DFlash", "0.34.0") == "dflash"
    assert inferred_method("yuhuili/EAGLE-LLaMA3-Instruct-8B", "0.34.0") == "eagle"
    assert inferred_method("deepseek-ai/dspark_qwen3_8b_block7", "0.34.0") == "dspark"


def test_a_config_without_method_is_taken_as_vllm_infers_it() -> None:
    whole = {"model": LAGUNA_DRAFT, "num_speculative_tokens": 15}
    assert speculative_config({"speculative_config": whole}, "0.25.1") == whole
    argv, _ = build_flags({"speculative_config": whole}, "0.25.1")
    assert "--speculative-config" in argv  # passed through as given: vLLM infers again
    with pytest.raises(ConfigError, match="without a method"):
        speculative_config(
            {"speculative_config": {"model": "org/plain-draft", "num_speculative_tokens": 3}},
            "0.25.1",
        )
    with pytest.raises(ConfigError, match="needs num_speculative_tokens"):
        speculative_config({"speculative_config": {"model": LAGUNA_DRAFT}}, "0.25.1")
