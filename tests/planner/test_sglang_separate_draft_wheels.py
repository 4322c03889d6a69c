"""A separate draft model on SGLang (an EAGLE / EAGLE3 head by --speculative-draft-model-path on a
target without MTP layers, a DFLASH drafter): where its KV pool, weights and HiCache host pool
are paid from, read from the 0.4.6.post5 .. 0.5.23 wheels (planner.sglang_draft); and what the
planner does with it."""

from __future__ import annotations

import ast
import re

import pytest

from autotune.hardware.gpus import GPU_CATALOG
from autotune.models.builtin import BUILTIN_CARDS
from autotune.models.config_cards import config_card
from autotune.planner.common import GIB, Plan
from autotune.planner.drafts import DRAFTS
from autotune.planner.sglang import plan_sglang
from autotune.planner.sglang_draft import host_draft_cell
from tests.wheels import function_def, wheel_text

RUNNER = "sglang/srt/model_executor/model_runner.py"
AUX = "sglang/srt/model_executor/model_runner_components/spec_aux_hidden_state.py"
EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
EAGLE = "yuhuili/EAGLE-LLaMA3-Instruct-8B"


@pytest.mark.parametrize("version", ["0.5.14", "0.5.18", "0.5.23"])
def test_sglang_draft_layers_off_the_draft_config(version: str) -> None:
    # a draft config without num_nextn_predict_layers (the EAGLE heads): its own layer count
    text = wheel_text("sglang", version, RUNNER if version == "0.5.14" else AUX)
    assert "draft_model_config.num_nextn_predict_layers" in text
    assert re.search(r"max\(\s*draft_\w*config\.num_hidden_layers,", text)


@pytest.mark.parametrize("version", ["0.4.6.post5", "0.5.6"])
def test_sglang_old_draft_pool_as_large_as_the_targets(version: str) -> None:
    text = wheel_text("sglang", version, RUNNER)
    assert "self.max_total_num_tokens = self.server_args.draft_runner_cache_size" in text


def test_sglang_0_5_13_draft_pool_shares_the_target_config() -> None:
    mixin = "sglang/srt/model_executor/model_runner_kv_cache_mixin.py"
    fn = ast.unparse(function_def(wheel_text("sglang", "0.5.13", mixin), "init_memory_pool"))
    assert "Draft worker requires memory_pool_config" in fn
    pool = wheel_text("sglang", "0.5.13", "sglang/srt/model_executor/pool_configurator.py")
    assert "eagle_draft_num_layers" not in pool


@pytest.mark.parametrize("version", ["0.5.14", "0.5.23"])
def test_sglang_eagle3_head_holds_its_embedding_until_init_lm_head(version: str) -> None:
    model = wheel_text("sglang", version, "sglang/srt/models/llama_eagle3.py")
    assert "self.embed_tokens = VocabParallelEmbedding(" in model
    llama = ast.unparse(
        function_def(wheel_text("sglang", version, "sglang/srt/models/llama.py"), "set_embed")
    )
    assert "del self.model.embed_tokens.weight" in llama and "empty_cache" in llama
    eagle = wheel_text("sglang", version, "sglang/srt/speculative/eagle_worker_v2.py")
    assert "self.draft_runner.model.set_embed(embed)" in ast.unparse(
        function_def(eagle, "init_lm_head")
    )


@pytest.mark.parametrize(
    ("version", "where"),
    [
        ("0.5.10.post1", None),
        ("0.5.11", "sglang/srt/managers/scheduler.py"),
        ("0.5.13", "sglang/srt/mem_cache/kv_cache_builder.py"),
        ("0.5.18", "sglang/srt/mem_cache/kv_cache_builder.py"),
        ("0.5.19", "sglang/srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py"),
        ("0.5.23", "sglang/srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py"),
    ],
)
def test_sglang_hicache_draft_host_pool_matches_the_targets_tokens(
    version: str, where: str | None
) -> None:
    if where is None:
        text = wheel_text("sglang", version, "sglang/srt/managers/scheduler.py")
        assert "set_draft_kv_pool" not in text
        return
    text = wheel_text("sglang", version, where)
    assert "host_size=0" in text
    if version in ("0.5.11", "0.5.13"):  # a hybrid target's draft pool: its full part
        assert "pool = pool.full_kv_pool" in text
    assert "host_to_device_ratio=primary" in text or (
        "host_to_device_ratio=host_pool_group.logical_size / pool.size" in text
    )


def test_sglang_dflash_hicache_draft_pool_by_release() -> None:
    # 0.5.11: DFLASH is no spec-v2 algorithm, and its worker's model_runner is the target's
    info = wheel_text("sglang", "0.5.11", "sglang/srt/speculative/spec_info.py")
    assert "return self.is_eagle() or self.is_standalone()" in info
    worker = wheel_text("sglang", "0.5.11", "sglang/srt/speculative/dflash_worker.py")
    assert "self.model_runner = target_worker.model_runner" in worker
    # 0.5.14 .. 0.5.17: the draft pool is read off a runner DFLASH's TpModelWorker lacks
    for version in ["0.5.14", "0.5.17"]:
        builder = wheel_text("sglang", version, "sglang/srt/mem_cache/kv_cache_builder.py")
        assert "draft_runner = draft_worker.draft_worker.draft_runner\n" in builder
        tp = wheel_text("sglang", version, "sglang/srt/managers/tp_worker.py")
        assert "draft_runner" not in tp and "__getattr__" not in tp
    # 0.5.18+: the DFLASH draft's own runner, never packed (is_eagle excludes DFLASH)
    for version in ["0.5.18", "0.5.23"]:
        base = wheel_text("sglang", version, "sglang/srt/speculative/base_spec_worker.py")
        runners = ast.unparse(function_def(base, "_draft_model_runners"))
        assert "is_dflash_family()" in runners and "(draft_worker.model_runner,)" in runners
        info = wheel_text("sglang", version, "sglang/srt/speculative/spec_info.py")
        is_eagle = ast.unparse(function_def(info, "is_eagle"))
        assert "DFLASH" not in is_eagle


def _llama(version: str, path: str | None = EAGLE3, **cfg: object) -> Plan:
    card = config_card("meta-llama/Llama-3.1-8B-Instruct")
    assert card is not None
    base: dict[str, object] = {
        "mem_fraction_static": 0.8,
        "enable_hierarchical_cache": True,
        "hicache_ratio": 2,
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
    }
    if path is not None:
        algo = "EAGLE3" if "EAGLE3" in path else "EAGLE"
        base |= {"speculative_algorithm": algo, "speculative_draft_model_path": path}
    gpu = GPU_CATALOG["h100-80g"]
    return plan_sglang(card, gpu, {**base, **cfg}, version=version, tp=1, host_free_gib=512)


def test_eagle3_head_on_llama_by_release() -> None:
    head = DRAFTS[EAGLE3.lower()]
    target = 32 * 8 * 128 * 2 * 2  # 32 layers x 8 KV heads x 128 x K,V x bf16
    own = 8 * 128 * 2 * 2  # its one layer
    # 0.5.14+: the cell x(1 + 1/32), the head's weights static, its embedding held
    new = _llama("0.5.14")
    assert new.kv_cell_bytes == int(target * (1 + 1 / 32))
    assert any("held while the target sizes" in a for a in new.assumptions)
    assert new.host_pool_tokens and new.host_pool_gb
    assert new.host_pool_gb == pytest.approx(new.host_pool_tokens * (target + own) / 1e9, abs=0.01)
    # 0.5.13: the target's cell; the slack pays the head's weights and its pool
    old, plain = _llama("0.5.13"), _llama("0.5.13", None)
    assert old.kv_cell_bytes == target and old.kv_pool_tokens == plain.kv_pool_tokens
    extra = head.weights_per_rank(1) + old.kv_pool_tokens * own
    assert old.slack_needed_gib - plain.slack_needed_gib == pytest.approx(extra / GIB, abs=0.01)
    # an unlisted head: noted, nothing counted
    other = _llama("0.5.14", "someone/EAGLE3-Other")
    assert any("not in the planner's draft list" in a for a in other.assumptions)
    assert other.kv_cell_bytes == target


def test_eagle_head_holds_its_embedding_and_lm_head() -> None:
    card = config_card("meta-llama/Llama-3.1-8B-Instruct")
    assert card is not None
    e3, e = _llama("0.5.14", EAGLE3), _llama("0.5.14", EAGLE)
    assert e.kv_pool_tokens < e3.kv_pool_tokens  # EAGLE also holds a full-vocabulary LM head


def test_dflash_host_pool_on_the_targets_cell_with_its_own_sidecar() -> None:
    card = BUILTIN_CARDS["qwen3.8-27b-nvfp4"]
    cfg = {
        "speculative_algorithm": "DFLASH",
        "speculative_draft_model_path": "z-lab/Qwen3.8-27B-DFlash2",
        "kv_cache_dtype": "fp8_e4m3",
        "mem_fraction_static": 0.85,
        "context_length": 65536,
        "enable_hierarchical_cache": True,
        "hicache_ratio": 2,
        "hicache_size": 8,
    }
    gpu = GPU_CATALOG["rtx-5090-32g"]
    plan = plan_sglang(card, gpu, cfg, version="0.5.19", tp=2, host_free_gib=512)
    own = 5 * 4 * 256  # 5 draft layers x 4 KV heads a rank x 128 x K,V x fp8
    target = plan.kv_cell_bytes - own
    # --hicache-size buys the target's tokens at its own cell; the draft's pool adds its bytes
    assert plan.host_pool_tokens and plan.host_pool_gb
    assert plan.host_pool_gb == pytest.approx(
        plan.host_pool_tokens * (target + own) / 1e9, abs=0.01
    )
    kv_share = plan.host_pool_tokens * target / 1e9
    assert kv_share <= 8.0
    failing = plan_sglang(card, gpu, cfg, version="0.5.16", tp=2, host_free_gib=512)
    assert any("'draft_runner'" in r for r in failing.reasons)


def test_host_draft_cell_by_release() -> None:
    # an MTP draft (no separate model): its own host pool from 0.5.11, packed from 0.5.18
    nextn = {"speculative_algorithm": "NEXTN"}
    assert host_draft_cell(nextn, (0, 5, 17), None, 2048, 9, False, ([], [])) == 2048
    assert host_draft_cell(nextn, (0, 5, 18), None, 2048, 9, False, ([], [])) == 0
    e3 = {"speculative_algorithm": "EAGLE3"}
    assert host_draft_cell(e3, (0, 5, 18), None, 2048, 9, False, ([], [])) == 2048
    head, dflash = DRAFTS[EAGLE3.lower()], DRAFTS["z-lab/qwen3.8-27b-dflash2"]
    notes: tuple[list[str], list[str]] = ([], [])
    eagle = {"speculative_algorithm": "EAGLE3"}
    assert host_draft_cell(eagle, (0, 5, 10), head, 4096, 9, False, notes) == 0
    assert host_draft_cell(eagle, (0, 5, 11), head, 4096, 9, False, notes) == 4096
    df = {"speculative_algorithm": "DFLASH"}
    # 0.5.11 .. 0.5.13 mirror the target's own pool a second time
    assert host_draft_cell(df, (0, 5, 13), dflash, 5120, 9, False, notes) == 9
    assert host_draft_cell(df, (0, 5, 18), dflash, 5120, 9, False, notes) == 5120
    assert host_draft_cell(df, (0, 5, 18), dflash, 5120, 9, True, notes) == 0
    assert notes[1]
