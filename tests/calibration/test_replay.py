"""Every public launch's startup lines parse with its engine's parser (issue: real launches), and
the planner replays a launch from its record."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.calibration.records import LaunchRecord, load_records
from autotune.calibration.replay import (
    gpu_of,
    observed_kv_tokens,
    parse,
    replay,
)

RECORDS = load_records(Path(__file__).resolve().parents[1] / "data" / "real_launches")


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.name)
def test_startup_lines_parse(record: LaunchRecord) -> None:
    report = parse(record)
    assert observed_kv_tokens(report, record), (
        f"{record.path}: no KV pool size parsed from {len(record.lines)} lines"
    )
    text = record.log
    stated = "Model loading took" in text or "Loading model weights took" in text
    # SGLang before 0.4.3.post3 prints no `mem usage`: the weights are begin's free - end's.
    stated |= "Load weight end" in text and ("mem usage=" in text or "Load weight begin" in text)
    if stated:
        assert report.weights_gib, f"{record.path}: the weights line did not parse"
    if any("Mamba Cache is allocated" in line for line in record.lines):
        assert report.mamba_slots, f"{record.path}: the mamba line did not parse"


def _record(**over: object) -> LaunchRecord:
    base: dict[str, object] = dict(
        source="https://github.com/vllm-project/vllm/issues/17327",
        posted="2025-04-30",
        engine="vllm",
        version="0.10.0",
        version_from="stated",
        gpu="NVIDIA A100-SXM4-80GB",
        gpu_vendor="nvidia",
        gpu_count=4,
        tp=4,
        model="Qwen/Qwen3-30B-A3B",
        family="moe",
        quantization="bf16",
        log="(VllmWorker rank=0 pid=105) INFO 04-29 01:07:41 [gpu_model_runner.py:1347] "
        "Model loading took 14.2474 GiB and 558.868858 seconds\n"
        "INFO 04-29 01:09:49 [kv_cache_utils.py:634] GPU KV cache size: 198,784 tokens\n",
    )
    return LaunchRecord.model_validate({**base, **over})


def test_replay_predicts_weights_from_the_config_card() -> None:
    r = replay(_record())
    assert r.skipped is None and r.plan is not None
    assert r.observed_kv == 198_784
    # Qwen3-30B-A3B bf16 at TP4: 14.2474 GiB logged; counted from config.json shapes.
    assert r.weights_ratio == pytest.approx(1.0, abs=0.01)


def test_replay_says_why_it_cannot_predict() -> None:
    assert "no card" in (replay(_record(model="acme/unknown-7b")).skipped or "")
    unknown = replay(_record(gpu="Voodoo 5 6000"))
    assert "not in the catalog" in (unknown.skipped or "") and not unknown.unstated
    # Inputs the source leaves out: no planner could predict them, and the bands say so.
    ambiguous = replay(_record(gpu="A100"))
    assert "memory is not stated" in (ambiguous.skipped or "") and ambiguous.unstated
    no_dtype = replay(_record(kv_cache_dtype=None))
    assert no_dtype.skipped == "the KV cache dtype is not stated" and no_dtype.unstated
    assert not replay(_record(model="acme/unknown-7b")).unstated
    assert replay(_record(gpu=None)).skipped == "the GPU is not stated"
    assert replay(_record(gpu=None, model="acme/unknown-7b")).unstated
    # A flag the source hides (set through an unseen variable): predicted from the engine's
    # defaults, and counted as unstated.
    hidden = replay(_record(unstated=["mem_fraction_static"]))
    assert hidden.plan is not None and hidden.skipped is None and hidden.unstated
    # A plan the planner refuses keeps the record's unstated inputs.
    refused = replay(_record(args={"tensor_parallel_size": 2}, unstated=["max_num_seqs"]))
    assert "planner refused" in (refused.skipped or "") and refused.unstated
    assert not replay(_record(args={"tensor_parallel_size": 2})).unstated
    assert not replay(_record()).unstated


def test_gpu_names_and_free_memory_from_the_record() -> None:
    assert gpu_of(_record(gpu="H100 80GB HBM3")).name == "h100-80g"  # type: ignore[union-attr]
    assert gpu_of(_record(gpu="RTX 4090 48GB")).name == "rtx-4090-48g"  # type: ignore[union-attr]
    # a size written without the B picks the variant too ('A100-80G'); 'GB10' is no size
    assert gpu_of(_record(gpu="A100-80G")).name == "a100-80g"  # type: ignore[union-attr]
    assert gpu_of(_record(gpu="A100")) is None  # 40 or 80 GB: not stated
    assert gpu_of(_record(gpu="NVIDIA GB10")).name == "gb10-128g"  # type: ignore[union-attr]
    log = "[2025-01-01 00:00:00 TP0] Load weight begin. avail mem=78.50 GB\n"
    assert parse(_record(engine="sglang", log=log)).free_before_weights_gib == 78.5
    assert parse(_record(log=log)).free_before_weights_gib is None  # vLLM logs no such line


def test_records_name_the_h100_nvl() -> None:
    """'NVIDIA H100 NVL' is the NVL, not the H100 inside its name; an H100 stated at 98GB is no
    80 GB card, and the H100 whose memory is closest is the NVL. A bare 'H100' stays the SXM."""

    def named(gpu: str) -> str | None:
        g = gpu_of(_record(gpu=gpu))
        return g.name if g else None

    assert named("NVIDIA H100 NVL") == "h100-nvl-94g"
    assert named("H100 NVL") == "h100-nvl-94g"
    assert named("H100 98GB NVLINK (stated '4*H100 98GB NVLINK')") == "h100-nvl-94g"
    assert named("H100-80GB") == "h100-80g"
    assert named("H100") == "h100-80g"
    # a stated figure far from every variant (a node's total, host RAM) picks no unnamed variant
    assert named("8x H100 (640GB total)") == "h100-80g"
    assert named("H100, 2048GB host RAM") == "h100-80g"


def test_an_unnamed_gpu_is_planned_on_a_stand_in_of_the_logged_free_memory() -> None:
    # SGLang's budget is a share of the free memory it measured before the weights; a log that
    # states it places the launch without the GPU's name. Qwen3-14B bf16 on one card, SGLang
    # 0.4.6 (xorbitsai/inference#3481): 19.67 GB free after 27.57 GB of weights.
    log = (
        "[2025-05-19 01:06:14] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, "
        "avail mem=19.67 GB, mem usage=27.57 GB.\n"
        "[2025-05-19 01:06:14] KV Cache is allocated. #tokens: 91749, K size: 7.00 GB, "
        "V size: 7.00 GB\n"
    )
    rec = _record(engine="sglang", version="0.4.6.post4", gpu=None, gpu_count=1, tp=1,
                  model="Qwen/Qwen3-14B", family="dense", log=log)  # fmt: skip
    r = replay(rec)
    assert r.plan is not None and r.unstated  # predicted, still not a stated input
    assert "not stated" in (r.note or "") and "modded" not in (r.note or "")
    assert r.kv_ratio == pytest.approx(1.0, abs=0.01)
    assert r.plan.pre_weights_free_gib == pytest.approx(19.67 + 27.57, abs=0.01)
    # --blind ignores the logged free memory: no GPU, no prediction.
    assert replay(rec, blind=True).skipped == "the GPU is not stated"
    # The stand-in's capacity less the planner's reserve is the logged free memory.
    from autotune.calibration.replay import stand_in_gpu
    from autotune.planner.sglang import DEFAULT_RESERVE_MIB

    g = stand_in_gpu("amd", 190.0)
    assert g.vendor == "amd" and g.memory_mib - DEFAULT_RESERVE_MIB == 190 * 1024
    assert g.arch == "gfx942"  # the nearest AMD card by size: MI300X


def test_jetson_tinyllama_launch_is_planned_on_the_catalogs_orin() -> None:
    # The committed TinyLlama card prices the model, on the catalog's Jetson AGX Orin; its free
    # memory at start (whatever the host left) rebuilt from the log's figure after the weights
    # and the planned weights (test_replay_unified): not stated by the source, so unstated.
    (rec,) = [r for r in RECORDS if r.name == "repo-tinyllama-1.1b-chat-jetson-agx-orin-tp1"]
    r = replay(rec)
    assert r.plan is not None and r.plan.gpu == "jetson-agx-orin-64g" and r.unstated
    assert r.note is not None and "planned weights" in r.note


def _vllm_spec_method(record: LaunchRecord) -> str | None:
    import ast

    spec = record.args.get("speculative_config")
    if not isinstance(spec, str):
        return None
    method = ast.literal_eval(spec).get("method")
    return str(method) if method else None


def test_a_launch_that_runs_mtp_names_a_card_with_its_mtp_layer() -> None:
    """The README's rule for a borrowed card (an MTP layer loaded or not): vLLM puts the MTP
    layer's attention in the target's full-attention KV group (16 + 1 layers per group on the
    Qwen3.5 architecture), so a card without it undercounts a page by 1/17."""
    from autotune.calibration.replay import card_of

    mtp = [r for r in RECORDS if r.engine == "vllm" and _vllm_spec_method(r) == "mtp"]
    assert len(mtp) >= 2
    for record in mtp:
        card = card_of(record)
        assert card is not None and card.has_mtp, record.name


def test_qwen36_autoround_mtp_launches_replay_with_the_mtp_group() -> None:
    """club-3090's AutoRound Qwen3.6-27B on 2 x RTX 3090 (vLLM 0.20.1 and 0.22.0), MTP with 3
    speculative tokens, fp8_e5m2 KV, prefix caching: 619,479 and 622,408 tokens logged."""
    by_name = {r.name: r for r in RECORDS}
    for name in (
        "v-qwen3.6-27b-autoround-int4-rtx3090-tp2",
        "v-qwen3.6-27b-autoround-int4-rtx3090-tp2-3",
    ):
        r = replay(by_name[name])
        assert r.plan is not None and r.kv_ratio is not None, name
        assert not any("needs MTP weights" in x for x in r.plan.reasons)
        layout = r.plan.model_dump()
        assert (layout["layers_per_group"], layout["block_size"]) == (17, 1600)
        assert abs(r.kv_ratio - 1) < 0.05, (name, r.kv_ratio)


def _named(name: str) -> LaunchRecord:
    return next(r for r in RECORDS if r.name == name)


def test_deepseek_v32_pr_launch_differs_from_main_by_the_release_facts() -> None:
    """sglang PR #11309's two launches on one 8xB200 box: on main (0.5.3) the fraction is fixed
    at 0.8 for DeepSeek NSA; the PR's branch ran as 0.5.3.post1 released it (the indexer key in
    the budget's cell, the default fraction with its DP-attention reserve). Replayed so, the two
    launches leave the same share of their pools unexplained (no weights line in either
    excerpt), where 0.5.3's rules give the PR's launch the main launch's pool."""
    main = replay(_named("field-deepseek-v3.2-exp-b200-tp8-dp8-main"))
    pr = _named("field-deepseek-v3.2-exp-b200-tp8-dp8")
    assert pr.unmodelled  # the record says it is the PR's build, not 0.5.3
    as_released = replay(pr)
    as_post1 = replay(pr.model_copy(update={"version": "0.5.3.post1"}))
    assert main.plan is not None and as_released.plan is not None and as_post1.plan is not None
    assert main.plan.mem_fraction_static == as_released.plan.mem_fraction_static == 0.8
    assert as_released.plan.kv_pool_tokens == main.plan.kv_pool_tokens
    assert as_post1.plan.mem_fraction_static == 0.751
    assert as_post1.kv_ratio == pytest.approx(main.kv_ratio or 0, abs=0.03)


def test_a_launch_that_cuts_the_model_is_planned_on_the_cut_card() -> None:
    # sglang PR 11018: gpt-oss-20b run with --json-model-override-args '{"num_hidden_layers": 1}'
    # and --max-total-tokens 4096 at mem-fraction 0.12 of 94.63 GB: 2.72 GB of weights logged.
    rec = next(r for r in RECORDS if r.name == "pr-gpt-oss-20b-1layer-dummy-fp8e5m2-tp1")
    r = replay(rec)
    assert r.plan is not None and r.observed_kv == 4096
    assert r.plan.kv_pool_tokens == 4096  # the cap: the budget after one layer holds more
    assert r.weights_ratio == pytest.approx(1.0, abs=0.05)
    # The whole model's weights do not fit in 0.12 of the card: the cut is what makes room.
    whole = replay(rec.model_copy(update={"args": {**rec.args, "json_model_override_args": None}}))
    assert whole.plan is not None and whole.plan.kv_pool_tokens == 0
