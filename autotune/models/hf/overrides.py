"""A launch's overrides of the model's config (SGLang's `--json-model-override-args`) merged into
a config.json mapping the way the engine merges them, before a card is built from it.

SGLang 0.5.2 (`hf_transformers_utils.get_config`) loads the Hugging Face config and then calls
`config.update(model_override_args)`; transformers' `PretrainedConfig.update` (4.56.1, the
release's pin) sets each key on the top-level config object: nothing nested is reached and
nothing is derived again. A config whose text model is nested (`text_config`) keeps its own
text fields, so a top-level `num_hidden_layers` does not cut it.

Later releases (0.5.17, 0.5.23) merge a mapping-valued override into a sub-config (and 0.5.23 a
`rope_scaling` mapping) instead of replacing it; a key whose value is a mapping where the config
holds one is therefore refused as not modelled. Other keys are set as they are in every release.

A `num_hidden_layers` cut leaves per-layer lists as they were: the model builds layers 0..n-1
and gpt-oss reads `config.layer_types[layer_id]` for each (gpt_oss.py), so only the first n
entries count. Per-layer lists whose reading under a cut is not checked against a release
(`moe_layer_freq`, `hybrid_layer_pattern`, `no_rope_layers`, `hybrid_override_pattern`,
`full_attn_idxs`) are refused rather than guessed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from autotune.errors import ConfigError

FIELD = "json_model_override_args"
# Lists indexed by layer id that a cut leaves long: the model reads entries 0..n-1.
CUT_LISTS = ("layer_types",)
UNMODELLED_LISTS = (
    "moe_layer_freq",
    "hybrid_layer_pattern",
    "no_rope_layers",
    "hybrid_override_pattern",
    "full_attn_idxs",
)


def parse_overrides(value: object) -> dict[str, Any]:
    """The overrides as a mapping: SGLang's field is JSON text (`json.loads`), "{}" by default;
    a mapping is taken as it is, None or "" as none.

    Raises:
        ConfigError: not JSON, or JSON that is not an object.
    """
    if value is None or value == "":
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        try:
            data = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{value!r} is not JSON: {exc}", field=FIELD) from None
        if isinstance(data, dict):
            return data
    raise ConfigError(f"must be a JSON object of config keys, got {value!r}", field=FIELD)


def override_config(config: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`config` with `overrides` set on its top level, and the per-layer lists as a cut
    `num_hidden_layers` leaves them readable (module docstring).

    Raises:
        ConfigError: a layer count that is not a positive integer, a mapping over one of the
            config's own, or a cut of a config with a per-layer list whose reading under a cut
            is not modelled.
    """
    nested = [
        k for k, v in overrides.items() if isinstance(v, dict) and isinstance(config.get(k), dict)
    ]
    if nested:
        raise ConfigError(
            f"overriding {', '.join(nested)} with a mapping: releases differ on whether it "
            "replaces or merges into the config's own; not modelled",
            field=FIELD,
        )
    merged = {**config, **overrides}
    text = merged.get("text_config")
    if "num_hidden_layers" not in overrides or (
        isinstance(text, dict) and "num_hidden_layers" in text
    ):
        return merged
    n = overrides["num_hidden_layers"]
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"num_hidden_layers must be a positive integer, got {n!r}", field=FIELD)
    for key in CUT_LISTS:
        entries = merged.get(key)
        if isinstance(entries, list) and len(entries) > n:
            merged[key] = entries[:n]
    for key in UNMODELLED_LISTS:
        if merged.get(key) is not None and config.get("num_hidden_layers") != n:
            raise ConfigError(
                f"cutting num_hidden_layers to {n} leaves {key!r} as it was; how the engine "
                "reads that list under a cut is not modelled",
                field=FIELD,
            )
    return merged
