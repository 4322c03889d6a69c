"""Roofline model against FIELD-NOTES C2 and C4 (the issue's calibration tolerances)."""

from __future__ import annotations

import pytest

from autotune.hardware import get_gpu
from autotune.models import BUILTIN_CARDS, load_card
from autotune.planner import perf, plan_sglang
from autotune.planner.perf import DecodeSeq, PerfModel, classify_text, perf_summary

AWQ = BUILTIN_CARDS["qwen3.8-27b-awq-int4"]
G4080 = get_gpu("rtx-4080-super-32g")
K1 = dict(
    kv_cache_dtype="fp8_e4m3",
    page_size=1,
    context_length=131072,
    max_running_requests=2,
    mem_fraction_static=0.92,
    max_mamba_cache_size=6,
)


def model(cfg: dict[str, object]) -> PerfModel:
    return PerfModel(AWQ, G4080, plan_sglang(AWQ, G4080, cfg, version="0.5.17"), config=cfg)


def test_c2_decode_within_10_percent() -> None:
    m = model(K1)
    assert m.decode_tok_s(1) == pytest.approx(41.4, rel=0.10)
    assert m.decode_tok_s(2) == pytest.approx(74.8, rel=0.10)
    assert m.decode_tok_s(1, 65536) == pytest.approx(37.0, rel=0.10)
    # P14: decode depends little on context for the hybrid
    assert m.decode_tok_s(1, 65536) > 0.8 * m.decode_tok_s(1)


@pytest.mark.parametrize(
    ("length", "measured"), [(512, 1736.8), (8704, 1884.0), (34816, 1684.3), (69632, 1459.8)]
)
def test_c2_prefill_within_15_percent(length: int, measured: float) -> None:
    assert model(K1).prefill_tok_s(length) == pytest.approx(measured, rel=0.15)


def test_c4_ngram_gains_ordered() -> None:
    base = model(K1).decode_tok_s(1)
    m = model(
        {
            **K1,
            "speculative_algorithm": "NGRAM",
            "speculative_num_steps": 5,
            "speculative_num_draft_tokens": 6,
        }
    )
    gains = {k: m.decode_tok_s(1, kind=k) / base for k in ("extraction", "code", "prose")}
    assert gains["extraction"] > gains["code"] > gains["prose"] > 1.0
    assert m.decode_tok_s(1, kind="extraction") == pytest.approx(75.1, rel=0.10)
    assert m.decode_tok_s(1, kind="code") == pytest.approx(56.1, rel=0.10)


def test_c3_host_replay_at_least_5x_faster_than_cold() -> None:
    m = model({**K1, "enable_hierarchical_cache": True, "hicache_size": 12})
    cold = m.prefill_s(17900)
    # 16,384 tokens restored from host (P12: checkpoint at chunk boundaries), the rest prefilled
    # in one step that waits layer by layer for the copy (hicache_perf)
    from autotune.planner.perf import PrefillChunk

    tail = m.prefill_step_s([PrefillChunk(17900 - 16384, 16384)])
    warm = m.request_overhead_s + tail + m.load_back_s(16384, tail)
    assert cold / warm >= 5
    # the copy runs far shorter than the step it hides behind
    assert m.load_back_s(16384, tail) < m.restore_s(16384) < 0.1 * tail


def test_step_time_grows_with_batch_and_context() -> None:
    m = model(K1)
    one = m.decode_step_s([DecodeSeq(1000)])
    assert m.decode_step_s([DecodeSeq(1000)] * 4) > one
    assert m.decode_step_s([DecodeSeq(100_000)]) > one


def test_perf_summary_contract_keys() -> None:
    s = perf_summary(model(K1))
    assert set(s["prefill_tok_s"]) == {"512", "8192", "32768", "65536"}
    assert s["decode_tok_s"] > 0 and s["decode_tok_s_2streams"] > s["decode_tok_s"]


def test_faster_gpu_is_faster() -> None:
    h200 = get_gpu("h200-141g")
    cfg = {"mem_fraction_static": 0.85}
    plan = plan_sglang(AWQ, h200, cfg, version="0.5.17")
    assert PerfModel(AWQ, h200, plan).decode_tok_s(1) > 2 * model(K1).decode_tok_s(1)


def test_classify_text() -> None:
    assert classify_text("Please repeat the following passage verbatim: a b c") == "extraction"
    code = "def f(x):\n    return {'a': [x for x in range(3)]}; y = f(1)\n" * 5
    assert classify_text(code) == "code"
    assert classify_text("The quick brown fox jumps over the lazy dog. " * 20) == "prose"


def _decode_s(config: dict[str, object], gpu: str = "rtx-4080-super-32g", batch: int = 1,
              ctx: int = 65536, plan_version: str = "0.5.17") -> float:  # fmt: skip
    card, g = load_card("qwen3.8-27b-awq-int4"), get_gpu(gpu)
    cfg = {"context_length": 131072, **config}
    plan = plan_sglang(card, g, cfg, version=plan_version, host_free_gib=64.0)
    return PerfModel(card, g, plan, config=cfg).decode_step_s([DecodeSeq(ctx)] * batch)


def test_attention_backend_prices_relative_to_the_calibrated_default() -> None:
    """The default backend on the calibration machine (FlashInfer on sm_89) is the roofline's
    own constants: naming it changes nothing; Triton's fixed splits starve a long context at
    one stream, and a larger split cap wins that back."""
    assert _decode_s({"attention_backend": "flashinfer"}) == _decode_s({})
    triton = _decode_s({"attention_backend": "triton"})
    assert triton > _decode_s({})
    split32 = _decode_s({"attention_backend": "triton", "triton_attention_num_kv_splits": 32})
    assert split32 < triton
    # at 16 streams the default splits already fill the GPU: the cap no longer matters much
    many = _decode_s({"attention_backend": "triton"}, batch=16, ctx=4096)
    many32 = _decode_s(
        {"attention_backend": "triton", "triton_attention_num_kv_splits": 32}, batch=16, ctx=4096
    )
    assert many32 >= many * 0.999


def test_overlap_and_cuda_graph_coverage() -> None:
    """The overlap scheduler hides the scheduler's CPU time (C2 ran without it: no_buffer), and
    a batch above the captured sizes runs eagerly."""
    # 0.5.17 keeps the text-only Qwen3_5ForCausalLM pack on no_buffer (overlap off); from 0.5.19
    # SGLang buffers that architecture too, and extra_buffer keeps the overlap scheduler.
    off = _decode_s({}, batch=2)
    on = _decode_s({}, batch=2, plan_version="0.5.19")
    assert on < off
    covered = _decode_s({"cuda_graph_bs_decode": [1, 2, 4, 8]}, batch=5, ctx=2048)
    eager = _decode_s({"cuda_graph_bs_decode": [1, 2, 4]}, batch=5, ctx=2048)
    assert eager > covered


def test_a_listed_dflash_draft_prices_its_own_weights() -> None:
    """The DFlash drafter's read per drafted block: a draft the planner lists costs its own
    per-rank bytes (z-lab's Qwen3.8 DFlash2, 3.85 GB), an unknown one the generic 1 GB."""
    from autotune.planner.drafts import draft_model

    card, g = load_card("qwen3.8-27b-fp8"), get_gpu("h200-141g")
    base = {"speculative_algorithm": "DFLASH", "speculative_num_draft_tokens": 8}
    known = {**base, "speculative_draft_model_path": "z-lab/Qwen3.8-27B-DFlash2"}
    unknown = {**base, "speculative_draft_model_path": "acme/some-drafter"}
    m_known = PerfModel(card, g, plan_sglang(card, g, known, version="0.5.19"), config=known)
    m_unknown = PerfModel(card, g, plan_sglang(card, g, unknown, version="0.5.19"), config=unknown)
    draft = draft_model("z-lab/Qwen3.8-27B-DFlash2")
    assert draft is not None
    assert m_known.draft_read_bytes == draft.weights_per_rank(1)
    assert m_unknown.draft_read_bytes == perf.DFLASH_DRAFT_BYTES
    assert m_known.decode_tok_s(1) < m_unknown.decode_tok_s(1)  # 3.85 GB read per block, not 1


@pytest.mark.parametrize(
    ("speculative_config", "family", "drafted"),
    [
        ('{"method":"mtp","num_speculative_tokens":3}', "EAGLE", 3),
        ('{"method":"qwen3_next_mtp","num_speculative_tokens":2}', "EAGLE", 2),
        ('{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4}', "NGRAM", 4),
    ],
)
def test_a_vllm_speculative_launch_prices_its_verify_and_drafts(
    speculative_config: str, family: str, drafted: int
) -> None:
    """vLLM's SpeculativeConfig (method, num_speculative_tokens) is priced as SGLang's
    algorithm (perf.sglang_speculation): a verify step over 1 + drafted tokens and the drafts,
    dearer than a plain step, not a plain step divided by the accept length."""
    from autotune.planner.vllm import plan_vllm

    card, g = load_card("qwen3.8-27b-fp8"), get_gpu("h200-141g")
    cfg = {"speculative_config": speculative_config}
    plan = plan_vllm(card, g, cfg, version="0.24.0")
    m = PerfModel(card, g, plan, config=cfg)
    assert (m.spec_family, m.spec_draft_tokens) == (family, drafted)
    plain = PerfModel(card, g, plan_vllm(card, g, {}, version="0.24.0"), config={})
    verify = m.decode_step_s([DecodeSeq(4096, 1 + drafted)])
    assert verify > plain.decode_step_s([DecodeSeq(4096)])
    block = perf.sglang_speculation({"method": "dflash", "num_speculative_tokens": 5})
    assert block == {"algorithm": "DFLASH", "num_draft_tokens": 6}  # one drafter pass a block
