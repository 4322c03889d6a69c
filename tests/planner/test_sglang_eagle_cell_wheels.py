"""Where SGLang budgets an EAGLE-family (NEXTN/MTP) draft's KV pool and how its HiCache host pool
counts the draft (planner.sglang_draft), read from the 0.5.13 .. 0.5.23 wheels; and what the
planner does with it."""

from __future__ import annotations

import ast
import re

import pytest

from autotune.models.config_cards import config_card
from autotune.planner.common import Plan
from autotune.planner.sglang_draft import (
    MODEL_PATH_DRAFT_ARCHS,
    MODEL_PATH_DRAFT_ARCHS_0_5_20,
    mtp_kv_in_cell,
)
from tests.planner.k3_nextn import nextn_plan
from tests.wheels import function_def, wheel_text

POOL = "sglang/srt/model_executor/pool_configurator.py"
AUX = "sglang/srt/model_executor/model_runner_components/spec_aux_hidden_state.py"
HOOK = "sglang/srt/arg_groups/speculative_hook.py"


@pytest.mark.parametrize(("version", "scales"), [("0.5.13", False), ("0.5.14", True)])
def test_sglang_scales_the_cell_for_an_eagle_draft_since_0_5_14(
    version: str, scales: bool
) -> None:
    text = wheel_text("sglang", version, POOL)
    assert ("(1 + int(eagle_draft_num_layers) / int(num_layers))" in text) is scales


@pytest.mark.parametrize(
    ("version", "pathless"),
    [("0.5.14", False), ("0.5.18", False), ("0.5.19", False), ("0.5.20", True), ("0.5.23", True)],
)
def test_sglang_draft_layers_need_a_path_before_0_5_20(version: str, pathless: bool) -> None:
    path = "sglang/srt/model_executor/model_runner.py" if version == "0.5.14" else AUX
    text = wheel_text("sglang", version, path)
    if version == "0.5.14":
        assert "and server_args.speculative_draft_model_path\n" in text
        return
    fn = ast.unparse(function_def(text, "_resolve_eagle_aux_hidden_state"))
    # before 0.5.20 the gate itself asks for the draft path; from 0.5.20 a path-less draft
    # reads the target's own config
    assert ("draft_model_config = model_config" in fn or "else model_config" in fn) is pathless
    assert "num_nextn_predict_layers = draft_model_config.num_nextn_predict_layers" in fn


@pytest.mark.parametrize("version", ["0.5.20", "0.5.23"])
def test_sglang_model_config_reads_only_num_nextn_predict_layers(version: str) -> None:
    text = wheel_text("sglang", version, "sglang/srt/configs/model_config.py")
    assert 'getattr(\n            self.hf_text_config, "num_nextn_predict_layers", None\n' in text
    assert "mtp_num_hidden_layers" not in text
    # Qwen3.5's draft-mode rewrite is where the key appears (not the target's config)
    assert 'self.hf_config.architectures[0] = "Qwen3_5ForCausalLMMTP"' in text


def _hook_archs(version: str) -> set[str]:
    text = wheel_text("sglang", version, HOOK)
    start = text.index('"DeepseekV3ForCausalLM"')
    block = text[text.rindex("[", 0, start) : text.index("]", start)]
    return set(re.findall(r'"(\w+)"', block))


@pytest.mark.parametrize("version", ["0.5.14", "0.5.18", "0.5.19", "0.5.20", "0.5.23"])
def test_sglang_model_path_draft_archs(version: str) -> None:
    want = MODEL_PATH_DRAFT_ARCHS_0_5_20 if version >= "0.5.20" else MODEL_PATH_DRAFT_ARCHS
    assert _hook_archs(version) == want
    assert not any(a.startswith("Qwen3_5") for a in want)


@pytest.mark.parametrize(
    ("version", "packs"), [("0.5.17", False), ("0.5.18", True), ("0.5.23", True)]
)
def test_sglang_hicache_host_pool_packs_the_mtp_draft_since_0_5_18(
    version: str, packs: bool
) -> None:
    mha = wheel_text("sglang", version, "sglang/srt/mem_cache/pool_host/mha.py")
    # the host token's layers: the target's and, from 0.5.18, one per packed draft pool
    assert ("self.layer_num = self.target_layer_num + len(" in mha) is packs
    assert "self.layer_num" in ast.unparse(function_def(mha, "get_size_per_token"))
    if packs:
        spec = wheel_text("sglang", version, "sglang/srt/speculative/base_spec_worker.py")
        gate = ast.unparse(function_def(spec, "_can_pack_hicache_mtp"))
        assert "not spec_algorithm.is_eagle3()" in gate and "num_nextn_predict_layers" in gate
    # its size: the target device pool's tokens x --hicache-ratio
    base = wheel_text("sglang", version, "sglang/srt/mem_cache/pool_host/base.py")
    assert re.search(r"self\.size = int\(device_[\w.]+ \* host_to_device_ratio\)", base)


def _nextn(card_name: str, version: str, **cfg: object) -> Plan:
    """The K3 NEXTN launch with HiCache (ratio 2) and 64 GiB of host memory."""
    hicache = {"enable_hierarchical_cache": True, "hicache_ratio": 2}
    return nextn_plan(version, card_name, host_free_gib=64, **{**hicache, **cfg})


@pytest.mark.parametrize("version", ["0.5.18", "0.5.20", "0.5.23"])
def test_qwen3_5_nextn_draft_kv_in_the_slack_and_the_host_pool(version: str) -> None:
    # 16 full-attention layers x 2 KV heads a rank x 256 x K,V x 2 B; the draft's pool is not
    # in the cell, and the host pool packs its one layer (17 x 2,048 B a token) from 0.5.18;
    plan = _nextn("qwen3.8-27b-gptq-int4", version)
    assert plan.kv_cell_bytes == 32_768
    assert plan.host_pool_tokens and plan.host_pool_gb
    assert plan.host_pool_gb == pytest.approx(plan.host_pool_tokens * 34_816 / 1e9, abs=0.01)
    # 0.5.11 .. 0.5.17 do not pack it: it gets a host pool of its own (the hybrid pool's full
    # part, one 2,048 B layer) as many tokens long (planner.sglang_draft), the same bytes
    older = _nextn("qwen3.8-27b-gptq-int4", "0.5.17")
    assert older.host_pool_tokens and older.host_pool_gb
    assert older.host_pool_gb == pytest.approx(older.host_pool_tokens * 34_816 / 1e9, abs=0.01)


def test_mtp_kv_in_cell_by_architecture_and_release() -> None:
    ds = config_card("deepseek-ai/DeepSeek-V3")
    qwen = config_card("Qwen/Qwen3.5-4B")
    nemo = config_card("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
    assert ds is not None and qwen is not None and nemo is not None
    notes: list[str] = []
    # DeepSeek gets the model path as its draft path: in the cell from 0.5.14
    assert not mtp_kv_in_cell(ds, {}, (0, 5, 13), notes)
    assert mtp_kv_in_cell(ds, {}, (0, 5, 14), notes)
    # Qwen3.5 declares mtp_num_hidden_layers: never in the cell without a draft path
    assert not any(
        mtp_kv_in_cell(qwen, {}, v, notes) for v in [(0, 5, 18), (0, 5, 20), (0, 5, 23)]
    )
    assert mtp_kv_in_cell(qwen, {"speculative_draft_model_path": "x"}, (0, 5, 18), notes)
    # Nemotron-H's config says num_nextn_predict_layers: in the cell path-less from 0.5.20
    assert not mtp_kv_in_cell(nemo, {}, (0, 5, 19), notes)
    assert mtp_kv_in_cell(nemo, {}, (0, 5, 20), notes)
    assert not notes


@pytest.mark.parametrize("version", ["0.5.18", "0.5.23"])
def test_mtp_draft_given_by_path_is_packed_into_the_host_pool(version: str) -> None:
    spec = wheel_text("sglang", version, "sglang/srt/speculative/base_spec_worker.py")
    gate = ast.unparse(function_def(spec, "_can_pack_hicache_mtp"))
    # the gate reads the draft runner's config, never the path that named it
    assert "runner.model_config.num_nextn_predict_layers" in gate
    assert "draft_model_path" not in gate
    mc = wheel_text("sglang", version, "sglang/srt/configs/model_config.py")
    rewrite = ast.unparse(function_def(mc, "_config_draft_model"))
    # the draft-mode rewrite goes by the checkpoint's architecture, not by how it was named
    assert "draft_model_path" not in rewrite
    qwen = rewrite[rewrite.index("'Qwen3_5ForConditionalGeneration'") :]
    assert "self.hf_config.num_nextn_predict_layers = 1" in qwen[: qwen.index("if is_draft")]
    # so a Qwen3.5-style target's own checkpoint as the draft path packs one layer a draft
    # runner (3 steps under multi-layer EAGLE) into the target's host pool: 19 x 2,048 B
    plan = _nextn(
        "qwen3.8-27b-gptq-int4",
        version,
        speculative_draft_model_path="Qwen/Qwen3.6-27B",
        enable_multi_layer_eagle=True,
    )
    assert plan.host_pool_tokens and plan.host_pool_gb
    assert plan.host_pool_gb == pytest.approx(plan.host_pool_tokens * 38_912 / 1e9, abs=0.01)
