"""Separate draft models (DFlash) in the planners: the draft list, SGLang's draft pool and budget
rules by release, vLLM's draft KV cache type; goldens from the draft's own startup lines in
public launch records (tests/data/real_launches)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.calibration.records import load_record
from autotune.calibration.replay import replay
from autotune.hardware.gpus import GPU_CATALOG
from autotune.models.builtin import BUILTIN_CARDS
from autotune.planner import rules
from autotune.planner.common import Plan
from autotune.planner.drafts import DRAFTS, draft_model
from autotune.planner.sglang import GIB, kv_cell_bytes, plan_sglang
from autotune.planner.vllm import plan_vllm
from autotune.planner.vllm_kv import kv_layout
from tests.planner.k3_nextn import nextn_plan

RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches"
EDGE = RECORDS / "sglang" / "edge-qwen3.8-27b-nvfp4-rtx5090-tp2.yaml"
VDFLASH = RECORDS / "vllm" / "v-qwen3.6-27b-autoround-int4-rtx3090-tp2-2.yaml"
DFLASH2 = DRAFTS["z-lab/qwen3.8-27b-dflash2"]
DFLASH36 = DRAFTS["z-lab/qwen3.6-27b-dflash"]


def test_draft_lookup_by_id_and_local_folder() -> None:
    assert draft_model("z-lab/Qwen3.6-27B-DFlash") is DFLASH36
    assert draft_model("~/.cache/huggingface/qwen3.6-27b-dflash") is DFLASH36
    assert draft_model("/models/Qwen3.8-27B-DFlash2/") is DFLASH2
    assert (
        draft_model("poolside/Laguna-S-2.1-DFlash-INT4")
        is DRAFTS["poolside/laguna-s-2.1-dflash-int4"]
    )
    assert draft_model("poolside/Laguna-S-2.1-DFlash-Q9") is None
    assert draft_model(None) is None


def test_dflash_27b_weights_count_to_the_published_size() -> None:
    # Lucebox's RESULTS.md: "z-lab/Qwen3.5-27B-DFlash (BF16, 3.46 GB)"
    assert round(DFLASH36.total_bytes / 1e9, 2) == 3.46
    assert DFLASH36.replicated_bytes == 5120 * 5 * 5120 * 2 + 62_720 * 2  # fc + norms
    assert DFLASH2.weights_per_rank(2) == DFLASH2.sharded_bytes // 2 + DFLASH2.replicated_bytes


def test_sglang_dflash_pool_matches_the_logged_draft_lines() -> None:
    """edge-qwen3.8-27b: the target and the draft log their own KV lines per rank (TP2, fp8):
    K 3.46 GB and 1.08 GB for the same 454,112 tokens; the plan's cell is their sum."""
    tokens = 454_112
    card = BUILTIN_CARDS["qwen3.8-27b-nvfp4"]
    target_k = kv_cell_bytes(card, "fp8_e4m3", 2) // 2
    draft_k = DFLASH2.layers * DFLASH2.kv_bytes_per_token_layer(2, 1.0) // 2
    assert round(tokens * target_k / GIB, 2) == 3.46
    assert round(tokens * draft_k / GIB, 2) == 1.08
    plan = replay(load_record(EDGE)).plan
    assert plan is not None
    assert plan.kv_cell_bytes == 2 * (target_k + draft_k)
    assert plan.speculative["num_draft_tokens"] == DFLASH2.block_size  # the draft's block


def _plan(version: str, **cfg: object) -> Plan:
    card = BUILTIN_CARDS["qwen3.8-27b-nvfp4"]
    base = {
        "speculative_algorithm": "DFLASH",
        "speculative_draft_model_path": "z-lab/Qwen3.8-27B-DFlash2",
        "kv_cache_dtype": "fp8_e4m3",
        "mem_fraction_static": 0.85,
        "context_length": 65536,
    }
    return plan_sglang(card, GPU_CATALOG["rtx-5090-32g"], {**base, **cfg}, version=version, tp=2)


def test_sglang_dflash_cell_by_release() -> None:
    card = BUILTIN_CARDS["qwen3.8-27b-nvfp4"]
    target = kv_cell_bytes(card, "fp8_e4m3", 2)
    layers = len(card.full_attention_layers)
    # 0.5.18+: the draft's exact cell; 0.5.11 .. 0.5.17: scaled by the layer counts, rounded up
    assert _plan("0.5.19").kv_cell_bytes == target + 5 * 4 * 256
    ratio = (target * (layers + 5) + layers - 1) // layers
    assert _plan("0.5.16").kv_cell_bytes == ratio
    # the draft's own KV dtype (0.5.18+)
    bf16 = _plan("0.5.19", speculative_draft_kv_cache_dtype="bf16").kv_cell_bytes
    assert bf16 == target + 5 * 4 * 256 * 2


def test_sglang_draft_weights_static_from_0_5_14() -> None:
    after, before = _plan("0.5.14"), _plan("0.5.13")
    draft_gib = DFLASH2.weights_per_rank(2) / GIB
    mfs = 0.85
    assert after.static_budget_gib == pytest.approx(
        after.pre_weights_free_gib * mfs - after.weights_gib - draft_gib, abs=2e-3
    )
    assert before.static_budget_gib == pytest.approx(
        before.pre_weights_free_gib * mfs - before.weights_gib, abs=2e-3
    )
    assert before.slack_needed_gib - after.slack_needed_gib == pytest.approx(draft_gib, abs=0.01)


def test_unknown_dflash_draft_is_noted() -> None:
    plan = _plan("0.5.19", speculative_draft_model_path="someone/Other-DFlash")
    assert any("not in the planner's draft list" in a for a in plan.assumptions)
    card = BUILTIN_CARDS["qwen3.8-27b-nvfp4"]
    assert plan.kv_cell_bytes == kv_cell_bytes(card, "fp8_e4m3", 2)


@pytest.mark.parametrize(
    ("spec", "version", "reserve"),
    [
        ("NEXTN", "0.5.9", 2048),
        ("DFLASH", "0.5.11", 4096),
        ("EAGLE", "0.5.13", 4096),
        ("STANDALONE", "0.5.13", 6144),
        ("NGRAM", "0.5.12", 0),
        ("NEXTN", "0.5.14", 0),
        ("STANDALONE", "0.5.17", 0),
        ("DFLASH", "0.5.19", 0),
    ],
)
def test_speculative_mem_fraction_reserve(spec: str, version: str, reserve: int) -> None:
    assert rules.speculative_reserve_mib(spec, rules.planning_version(version)) == reserve


def test_vllm_dflash_layout_reproduces_the_logged_pool() -> None:
    """v-qwen3.6-27b (vLLM 0.20.2, TP2, bf16 KV): 10.16 GiB of KV memory and the DFlash draft's
    5 layers as their own KV type (groups of 5: 4 target, 1 draft, 10 GDN) give the logged
    200,769 tokens; without the draft type the same memory holds far more."""
    card = BUILTIN_CARDS["qwen3.8-27b-awq-int4"]
    common = {
        "version": "0.20.2",
        "tp": 2,
        "kv_dtype": "auto",
        "max_model_len": 200_000,
        "kv_memory_bytes": 10.16 * GIB,
        "prefix_caching": True,
        "num_spec": 5,
    }
    draft = (DFLASH36.layers, DFLASH36.kv_bytes_per_token_layer(2, 2.0))
    lay = kv_layout(card, **common, separate_draft=draft)  # type: ignore[arg-type]
    assert (lay.layers_per_group, lay.full_groups, lay.mamba_groups) == (5, 5, 10)
    assert lay.kv_tokens == 200_769
    plain = kv_layout(card, **common)  # type: ignore[arg-type]
    assert plain.kv_tokens > 1.5 * lay.kv_tokens


def test_vllm_dflash_weights_in_the_profiled_model() -> None:
    card = BUILTIN_CARDS["qwen3.8-27b-awq-int4"]
    gpu = GPU_CATALOG["rtx-3090-24g"]
    spec = '{"method": "dflash", "model": "z-lab/Qwen3.6-27B-DFlash", "num_speculative_tokens": 5}'
    cfg = {"max_model_len": 200_000, "max_num_seqs": 1, "enable_prefix_caching": True}
    with_draft = plan_vllm(card, gpu, {**cfg, "speculative_config": spec}, version="0.20.2", tp=2)
    without = plan_vllm(card, gpu, cfg, version="0.20.2", tp=2)
    grew = with_draft.weights_gib - without.weights_gib
    assert grew == pytest.approx(DFLASH36.weights_per_rank(2) / GIB, abs=2e-3)


def test_vllm_dense_target_and_draft_share_one_group() -> None:
    card = BUILTIN_CARDS["tiny-dense"] if "tiny-dense" in BUILTIN_CARDS else None
    if card is None:
        pytest.skip("no dense built-in card")
    draft = (DFLASH36.layers, DFLASH36.kv_bytes_per_token_layer(1, 2.0))
    lay = kv_layout(
        card,
        version="0.20.2",
        tp=1,
        kv_dtype="auto",
        max_model_len=4096,
        kv_memory_bytes=4 * GIB,
        prefix_caching=True,
        separate_draft=draft,
    )
    n = len(card.full_attention_layers)
    assert lay.layers_per_group == n + DFLASH36.layers and lay.full_groups == 1


def test_the_int4_dflash2_pack_is_found_by_its_folder() -> None:
    """syv-ai's W4A16 requantization of DFlash2 (1.2 GB): the compose's local folder finds it,
    its projections count at int4 and the rest of the 1.2 GB is replicated."""
    from autotune.planner.drafts import draft_model

    d = draft_model("/root/.cache/huggingface/qwen3.8-27b-dflash2-w4a16")
    assert d is not None and d.name == "syvai/Qwen3.8-27B-DFlash2-W4A16"
    bf16 = draft_model("z-lab/Qwen3.8-27B-DFlash2")
    assert bf16 is not None
    assert d.sharded_bytes == pytest.approx(
        bf16.sharded_bytes * d.proj_bytes_per_param / 2, rel=1e-6
    )
    assert d.sharded_bytes + d.replicated_bytes == 1_200_000_000
    assert d.weights_per_rank(2) == d.sharded_bytes // 2 + d.replicated_bytes


def test_vllm_0_27_1_cannot_load_a_dflash2_drafter_the_records_say_so() -> None:
    """v0.27.1's model registry maps DFlashDraftModel but not DFlash2DraftModel (native from
    v0.29.0, vllm#52816): a 0.27.1 launch with a DFlash2 drafter ran a patched engine, and its
    record says what the planner cannot model."""
    import zipfile

    from autotune.calibration.records import load_records
    from tests.wheels import engine_wheel_or_skip

    with zipfile.ZipFile(engine_wheel_or_skip("vllm", "0.27.1")) as z:
        registry = z.read("vllm/model_executor/models/registry.py").decode()
    assert '"DFlashDraftModel"' in registry and '"DFlash2DraftModel"' not in registry
    dflash2 = [
        r
        for r in load_records(RECORDS)
        if r.engine == "vllm"
        and r.version == "0.27.1"
        and (d := draft_model(_spec_model(r))) is not None
        and d.architecture == "DFlash2DraftModel"
    ]
    assert len(dflash2) >= 2  # club-3090 #1084 and #1086; #1085 (s19e) since
    assert all(any("DFlash2" in u for u in r.unmodelled) for r in dflash2)


def _spec_model(record: object) -> object:
    import ast

    spec = getattr(record, "args", {}).get("speculative_config")
    return ast.literal_eval(spec).get("model") if isinstance(spec, str) else None


@pytest.mark.parametrize("version", ["0.5.14", "0.5.18", "0.5.23"])
def test_mtp_draft_holds_its_own_head_while_the_target_sizes_its_pool(version: str) -> None:
    # planner.sglang_draft: the MTP draft's embedding and LM head (vocab-parallel, bf16) are
    # resident when the target profiles, then freed into the slack.
    card = BUILTIN_CARDS["qwen3.8-27b-gptq-int4"]
    held = (card.weights.embed_tokens // 2 + card.weights.lm_head // 2) / GIB
    plan = nextn_plan(version)
    mtp = card.weights.mtp // 2 / GIB
    mfs = 0.91
    pre = plan.pre_weights_free_gib
    assert plan.static_budget_gib == pytest.approx(
        pre * mfs - plan.weights_gib - mtp - held, abs=2e-3
    )
    assert plan.slack_gib == pytest.approx(pre * (1 - mfs) + held, abs=2e-3)
    assert any("own embedding and LM head" in a for a in plan.assumptions)


def test_mtp_draft_head_not_in_the_budget_before_0_5_14() -> None:
    plan = nextn_plan("0.5.13")
    assert plan.static_budget_gib == pytest.approx(
        plan.pre_weights_free_gib * 0.91 - plan.weights_gib, abs=2e-3
    )
    assert not any("own embedding and LM head" in a for a in plan.assumptions)


def test_mtp_draft_head_tied_and_separate_draft() -> None:
    card = BUILTIN_CARDS["qwen3.8-27b-gptq-int4"]
    # a tied LM head is the embedding: only one copy is held
    tied = card.model_copy(update={"weights": card.weights.model_copy(update={"lm_head": 0})})
    one = plan_sglang(
        tied,
        GPU_CATALOG["rx-7900xtx-24g"],
        {"speculative_algorithm": "NEXTN", "mem_fraction_static": 0.91, "max_running_requests": 4},
        version="0.5.18",
        tp=2,
    )
    two = nextn_plan("0.5.18", mem_fraction_static=0.91, page_size=1, max_mamba_cache_size=None)
    gap = (two.slack_gib - one.slack_gib) * GIB
    assert gap == pytest.approx(card.weights.lm_head // 2, rel=1e-3)
    # a draft given by path is not the card's MTP head: no held copy is modelled
    path = nextn_plan("0.5.18", speculative_draft_model_path="some/eagle-draft")
    assert not any("own embedding and LM head" in a for a in path.assumptions)


EAGLE3 = DRAFTS["yuhuili/eagle3-llama3.1-instruct-8b"]
EAGLE = DRAFTS["yuhuili/eagle-llama3-instruct-8b"]


def test_eagle_heads_count_their_layer_fc_and_own_head() -> None:
    """EAGLE-3: one layer with a 2 x 4096 qkv input, a 3 x 4096 fc, a 32,000-row LM head and
    its int64 map, fp16; EAGLE: one plain layer and a 2 x 4096 fc (embedding and head shared)."""
    layer3 = 8192 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336
    assert EAGLE3.sharded_bytes == 2 * (layer3 + 32000 * 4096)
    assert EAGLE3.replicated_bytes == 2 * (3 * 4096 * 4096 + 4 * 4096) + 8 * 32000
    layer = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336
    assert EAGLE.total_bytes == 2 * (layer + 2 * 4096 * 4096 + 4096)
    # the fc and the map stay whole on every rank, the layer and the head split
    assert EAGLE3.weights_per_rank(2) == EAGLE3.sharded_bytes // 2 + EAGLE3.replicated_bytes


def test_vllm_eagle3_adds_its_weights_and_one_kv_layer() -> None:
    """An EAGLE-3 head on Llama-3.1-8B: the plan's weights grow by the head and its one
    attention layer joins the target's KV group (33 layers of the same page)."""
    from autotune.models.config_cards import config_card

    card = config_card("meta-llama/Llama-3.1-8B-Instruct")
    assert card is not None
    gpu = GPU_CATALOG["a100-80g"] if "a100-80g" in GPU_CATALOG else None
    if gpu is None:
        gpu = next(g for g in GPU_CATALOG.values() if "A100" in g.label and "80" in g.label)
    spec = (
        '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", '
        '"num_speculative_tokens": 5}'
    )
    cfg = {"max_model_len": 8192, "dtype": "float16", "enable_prefix_caching": False}
    with_draft = plan_vllm(card, gpu, {**cfg, "speculative_config": spec}, version="0.24.0", tp=1)
    without = plan_vllm(card, gpu, cfg, version="0.24.0", tp=1)
    grew = with_draft.weights_gib - without.weights_gib
    assert grew == pytest.approx(EAGLE3.weights_per_rank(1) / GIB, abs=2e-3)
    common = {"version": "0.24.0", "tp": 1, "kv_dtype": "auto", "max_model_len": 8192}
    common |= {"kv_memory_bytes": 50 * GIB, "prefix_caching": False, "num_spec": 5}
    draft = (EAGLE3.layers, EAGLE3.kv_bytes_per_token_layer(1, 2.0))
    lay = kv_layout(card, **common, separate_draft=draft)  # type: ignore[arg-type]
    plain = kv_layout(card, **common)  # type: ignore[arg-type]
    assert (lay.layers_per_group, lay.full_groups) == (33, 1)
    assert lay.kv_tokens == pytest.approx(plain.kv_tokens * 32 / 33, rel=1e-3)
