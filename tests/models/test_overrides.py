"""A launch's config overrides (SGLang's --json-model-override-args): merged into config.json as
the engine merges them, and the card built again from the result (tests/models/
test_overrides_wheels.py checks the merge and the cut against SGLang 0.5.2 itself)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.errors import ConfigError
from autotune.models.builtin import BUILTIN_CARDS
from autotune.models.config_cards import card_with_overrides, config_card, read_card
from autotune.models.hf.overrides import override_config, parse_overrides
from autotune.yamlio import load_yaml

GPT_OSS = "openai/gpt-oss-20b"
GPT_OSS_CARD = (
    Path(__file__).resolve().parents[2] / "autotune/data/model_configs/openai--gpt-oss-20b.yaml"
)


def _gpt_oss_config() -> dict[str, Any]:
    path = GPT_OSS_CARD
    return dict(load_yaml(path.read_text(encoding="utf-8"), source=str(path))["config"])


def test_the_flag_is_json_text_or_a_mapping() -> None:
    assert parse_overrides(None) == parse_overrides("") == parse_overrides("{}") == {}
    assert parse_overrides('{"num_hidden_layers": 1}') == {"num_hidden_layers": 1}
    assert parse_overrides({"num_hidden_layers": 2}) == {"num_hidden_layers": 2}
    with pytest.raises(ConfigError, match="not JSON"):
        parse_overrides("{num_hidden_layers: 1}")
    with pytest.raises(ConfigError, match="JSON object"):
        parse_overrides("[1, 2]")


def test_a_layer_cut_keeps_the_first_layer_types() -> None:
    config = _gpt_oss_config()
    merged = override_config(config, {"num_hidden_layers": 3})
    assert merged["num_hidden_layers"] == 3
    assert merged["layer_types"] == config["layer_types"][:3]
    assert {k: v for k, v in merged.items() if k not in ("num_hidden_layers", "layer_types")} == {
        k: v for k, v in config.items() if k not in ("num_hidden_layers", "layer_types")
    }
    assert config["num_hidden_layers"] == 24 and len(config["layer_types"]) == 24  # untouched
    with pytest.raises(ConfigError, match="positive integer"):
        override_config(config, {"num_hidden_layers": 0})


def test_a_nested_text_model_is_not_reached_from_the_top_level() -> None:
    config = {"architectures": ["X"], "text_config": {"num_hidden_layers": 8, "layer_types": []}}
    merged = override_config(config, {"num_hidden_layers": 2})
    assert merged["num_hidden_layers"] == 2 and merged["text_config"] == config["text_config"]


def test_a_mapping_over_a_sub_config_is_refused() -> None:
    # 0.5.2 replaces the sub-config (PretrainedConfig.update); 0.5.17 merges into it.
    config = {"num_hidden_layers": 4, "text_config": {"num_hidden_layers": 8}}
    with pytest.raises(ConfigError, match="text_config"):
        override_config(config, {"text_config": {"num_hidden_layers": 2}})
    assert override_config(config, {"quantization_config": {"quant_method": "fp8"}}) == {
        **config,
        "quantization_config": {"quant_method": "fp8"},
    }


def test_a_cut_of_an_unread_per_layer_list_is_refused() -> None:
    config = {"num_hidden_layers": 4, "moe_layer_freq": [0, 1, 1, 1]}
    with pytest.raises(ConfigError, match="moe_layer_freq"):
        override_config(config, {"num_hidden_layers": 2})
    assert override_config(config, {"num_hidden_layers": 4}) == config  # no cut: no question


def test_the_card_is_built_again_with_the_cut() -> None:
    full = config_card(GPT_OSS)
    assert full is not None
    assert card_with_overrides(full, "{}") is full and card_with_overrides(full, None) is full
    cut = card_with_overrides(full, '{"num_hidden_layers": 1}')
    assert cut.num_layers == 1 and cut.full_attention_layers == (0,)
    assert cut.local_attention is not None and cut.local_attention.layers == (0,)
    assert cut.experts is not None and cut.experts.moe_layers == 1
    assert cut.weights.embed_tokens == full.weights.embed_tokens
    assert cut.weights.lm_head == full.weights.lm_head
    # 24 identical decoder layers (sliding or not, same weights) plus one final norm.
    norm = full.hidden_size * 2
    assert cut.weights.decoder - norm == pytest.approx(
        (full.weights.decoder - norm) / 24, rel=1e-6
    )
    assert "overridden by the launch" in cut.notes
    assert cut == config_card(GPT_OSS, {"num_hidden_layers": 1})


def test_only_a_card_with_its_config_is_rebuilt() -> None:
    builtin = next(iter(BUILTIN_CARDS.values()))
    with pytest.raises(ConfigError, match="committed config.json"):
        card_with_overrides(builtin, '{"num_hidden_layers": 1}')
    assert card_with_overrides(builtin, "{}") is builtin


def test_stated_loaded_bytes_give_way_to_the_count_after_an_override() -> None:
    text = (
        "model: acme/tiny\nsource: https://huggingface.co/acme/tiny/blob/main/config.json\n"
        "loaded_bytes: {decoder: 123}\n"
        "config: {architectures: [LlamaForCausalLM], hidden_size: 64, intermediate_size: 128,\n"
        "  num_hidden_layers: 4, num_attention_heads: 4, vocab_size: 1000}\n"
    )
    assert read_card("tiny", text).weights.decoder == 123
    cut = read_card("tiny", text, {"num_hidden_layers": 2})
    whole = read_card("tiny", text.replace("loaded_bytes: {decoder: 123}\n", ""))
    assert cut.num_layers == 2 and cut.weights.decoder < whole.weights.decoder
    assert cut.weights.decoder != 123
