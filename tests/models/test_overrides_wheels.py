"""autotune.models.hf.overrides against SGLang 0.5.2 itself: where the release merges
--json-model-override-args into the Hugging Face config, what transformers' `update` (the
release's pinned transformers) does with it, how gpt-oss reads `layer_types` under a
`num_hidden_layers` cut, and that a dummy load allocates what a real load does."""

from __future__ import annotations

import ast
import re
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from autotune.models.hf.overrides import CUT_LISTS, override_config
from autotune.yamlio import load_yaml
from tests.wheels import engine_wheel_or_skip, function_def, wheel_text

VERSION = "0.5.2"
GPT_OSS_CARD = (
    Path(__file__).resolve().parents[2] / "autotune/data/model_configs/openai--gpt-oss-20b.yaml"
)


def _gpt_oss_config() -> dict[str, Any]:
    text = GPT_OSS_CARD.read_text(encoding="utf-8")
    return dict(load_yaml(text, source=str(GPT_OSS_CARD))["config"])


def _transformers_pin() -> str:
    with zipfile.ZipFile(engine_wheel_or_skip("sglang", VERSION)) as z:
        meta = z.read(f"sglang-{VERSION}.dist-info/METADATA").decode()
    pin = re.search(r"^Requires-Dist: transformers==([\w.]+)", meta, re.MULTILINE)
    assert pin, "the release pins no transformers version"
    return pin.group(1)


def test_the_release_updates_the_loaded_config_with_the_overrides() -> None:
    get_config = function_def(
        wheel_text("sglang", VERSION, "sglang/srt/hf_transformers_utils.py"), "get_config"
    )
    merges = [
        node
        for node in ast.walk(get_config)
        if isinstance(node, ast.If)
        and ast.unparse(node.test) == "model_override_args"
        and [ast.unparse(s) for s in node.body] == ["config.update(model_override_args)"]
    ]
    assert merges, "get_config no longer calls config.update(model_override_args)"
    # ServerArgs and ModelConfig hand it the flag's text through json.loads.
    model_config = wheel_text("sglang", VERSION, "sglang/srt/configs/model_config.py")
    assert "self.model_override_args = json.loads(model_override_args)" in model_config


def test_transformers_update_sets_top_level_keys_as_the_merge_does() -> None:
    version = _transformers_pin()
    with zipfile.ZipFile(engine_wheel_or_skip("transformers", version)) as z:
        source = z.read("transformers/configuration_utils.py").decode()
    update = function_def(source, "update")
    update.decorator_list = []
    namespace: dict[str, Any] = {"Any": Any}
    exec(compile(ast.Module(body=[update], type_ignores=[]), "update", "exec"), namespace)
    config = _gpt_oss_config()
    overrides = {"num_hidden_layers": 1, "sliding_window": 64}
    hf = SimpleNamespace(**config)
    namespace["update"](hf, overrides)
    ours = override_config(config, overrides)
    hf_dict = vars(hf)
    assert set(ours) == set(hf_dict)
    for key, value in hf_dict.items():
        # the lists a cut leaves long: the model reads their first n entries (next test)
        assert ours[key] == (value[:1] if key in CUT_LISTS else value), key


def test_gpt_oss_reads_layer_types_by_layer_id_for_the_layers_it_builds() -> None:
    source = wheel_text("sglang", VERSION, "sglang/srt/models/gpt_oss.py")
    tree = ast.parse(source)
    reads = [
        ast.unparse(kw.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        for kw in node.keywords
        if kw.arg == "layer_type"
    ]
    assert reads == ["config.layer_types[layer_id]"]
    makes = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and ast.unparse(node.func) == "make_layers"
        and ast.unparse(node.args[0]) == "config.num_hidden_layers"
    ]
    assert makes, "gpt-oss no longer builds config.num_hidden_layers decoder layers"
    # Layers 0..n-1 read entries 0..n-1: what the cut card holds.
    config = _gpt_oss_config()
    for n in (1, 5, 24):
        read = [config["layer_types"][layer_id] for layer_id in range(n)]
        assert override_config(config, {"num_hidden_layers": n})["layer_types"] == read


@pytest.mark.parametrize("loader", ["DummyModelLoader", "DefaultModelLoader"])
def test_a_dummy_load_allocates_what_a_real_load_does(loader: str) -> None:
    source = wheel_text("sglang", VERSION, "sglang/srt/model_loader/loader.py")
    cls = next(
        n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == loader
    )
    text = ast.unparse(cls)
    assert "_initialize_model(" in text
    assert "quant_method.process_weights_after_loading(module)" in text
