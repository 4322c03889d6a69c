"""planner.sglang_graphs: the prefill (piecewise) CUDA graph's reserve in SGLang's default
mem_fraction_static, which switches turn it off, and what it does to a plan."""

from __future__ import annotations

import pytest

from autotune.planner import sglang_graphs as g

V10, V13, V14 = (0, 5, 10), (0, 5, 13), (0, 5, 14)
TEXT = g.GraphFacts(architecture="GptOssForCausalLM")


def test_a_text_model_reserves_eight_mib_per_captured_size() -> None:
    # 8192-token chunks: 8 + 14 + 8 + 8 + 12 + 8 sizes
    assert len(g.capture_sizes(8192)) == 58
    assert g.prefill_graph_reserve_mib({}, V10, 8192, TEXT) == 58 * 8


def test_mla_reserves_a_fixed_one_and_a_half_gib() -> None:
    mla = g.GraphFacts(architecture="DeepseekV3ForCausalLM", mla=True)
    assert g.prefill_graph_reserve_mib({}, V13, 16384, mla) == 1536


@pytest.mark.parametrize(
    ("config", "model"),
    [
        ({"disable_piecewise_cuda_graph": True}, TEXT),
        ({"enable_dp_attention": True, "dp_size": 2}, TEXT),
        ({"enable_hierarchical_cache": True}, TEXT),
        ({"pp_size": 2}, TEXT),
        ({}, g.GraphFacts(architecture="Qwen3NextForCausalLM")),
        ({}, g.GraphFacts(architecture="Qwen2_5_VLForConditionalGeneration", multimodal=True)),
        ({}, g.GraphFacts(hip=True)),
        ({}, g.GraphFacts(architecture="DeepseekV32ForCausalLM", mla=True, dsa=True)),
    ],
)
def test_switches_and_models_that_turn_it_off(
    config: dict[str, object], model: g.GraphFacts
) -> None:
    assert g.prefill_graph_reserve_mib(config, V10, 8192, model) == 0.0


def test_enforce_skips_the_rules_and_0_5_14_reads_its_own_flags() -> None:
    hip = g.GraphFacts(hip=True)
    assert g.prefill_graph_reserve_mib({"enforce_piecewise_cuda_graph": True}, V10, 4096, hip) > 0
    assert g.prefill_graph_reserve_mib({"disable_prefill_cuda_graph": True}, V14, 4096, TEXT) == 0
    assert (
        g.prefill_graph_reserve_mib({"cuda_graph_backend_prefill": "disabled"}, V14, 4096, TEXT)
        == 0
    )


def test_the_maximum_follows_max_total_tokens_and_from_0_5_13_the_context() -> None:
    capped = {"max_total_tokens": 1024}
    assert g.prefill_graph_reserve_mib(capped, V10, 8192, TEXT) == len(g.capture_sizes(1024)) * 8
    ctx = {"context_length": 2048}
    assert g.prefill_graph_reserve_mib(ctx, V10, 8192, TEXT) == 58 * 8
    assert g.prefill_graph_reserve_mib(ctx, V13, 8192, TEXT) == len(g.capture_sizes(2048)) * 8


def test_a_plan_on_0_5_10_has_less_static_memory_than_on_0_5_9() -> None:
    """gpt-oss-120b on an RTX PRO 6000 (97,887 MiB): 0.863 on 0.5.9; 0.5.10 reserves 464 MiB more
    for the piecewise graph (58 sizes of 8192-token chunks): (97887 - 13904) / 97887 = 0.858."""
    from autotune.hardware.gpus import get_gpu
    from autotune.models.config_cards import config_card
    from autotune.planner.sglang import plan_sglang

    card, gpu = config_card("openai/gpt-oss-120b"), get_gpu("rtx-pro-6000-se-96g")
    assert plan_sglang(card, gpu, version="0.5.9").mem_fraction_static == 0.863
    assert plan_sglang(card, gpu, version="0.5.10").mem_fraction_static == 0.858


def test_breakable_graph_from_0_5_15() -> None:
    """0.5.15+ keeps the reserve with the breakable backend: a text model's 2048-token chunks
    capture 42 sizes (the 42 counts club-3090 issue 1261's 0.5.19 log lists up to 2048);
    multimodal Qwen3.5 packs join from 0.5.16, MLA only from 0.5.17 with DSA and 0.5.18 on."""
    v15, v16, v17, v18 = (0, 5, 15), (0, 5, 16), (0, 5, 17), (0, 5, 18)
    assert g.prefill_graph_reserve_mib({}, (0, 5, 19), 2048, TEXT) == 42 * 8
    vl = g.GraphFacts(architecture="Qwen3_5ForConditionalGeneration", multimodal=True)
    assert g.prefill_graph_reserve_mib({}, v15, 2048, vl) == 0
    assert g.prefill_graph_reserve_mib({}, v16, 2048, vl) == 42 * 8
    mla = g.GraphFacts(architecture="DeepseekV3ForCausalLM", mla=True)
    dsa = g.GraphFacts(architecture="DeepseekV32ForCausalLM", mla=True, dsa=True)
    assert g.prefill_graph_reserve_mib({}, v17, 8192, mla) == 0
    assert g.prefill_graph_reserve_mib({}, v17, 8192, dsa) == 1536
    assert g.prefill_graph_reserve_mib({}, v18, 8192, mla) == 1536
    assert g.prefill_graph_reserve_mib({}, v18, 8192, g.GraphFacts(hip=True)) == 0


def test_prefill_graph_tokens_is_the_largest_captured_forward_or_none() -> None:
    """What the roofline reads to price a prefill forward: the graph's largest captured token
    count where the release runs it, 0 where every prefill forward runs eagerly."""
    assert g.prefill_graph_tokens({}, V10, 8192, TEXT) == 8192
    assert g.prefill_graph_tokens({"max_total_tokens": 1000}, V10, 8192, TEXT) == 960
    assert g.prefill_graph_tokens({"piecewise_cuda_graph_tokens": [64, 8]}, V10, 8192, TEXT) == 64
    assert g.prefill_graph_tokens({}, (0, 5, 9), 8192, TEXT) == 0  # before the graph
    assert g.prefill_graph_tokens({}, (0, 5, 19), 2048, g.GraphFacts(hip=True)) == 0
    assert g.prefill_graph_tokens({"enable_hierarchical_cache": True}, V10, 8192, TEXT) == 0
    # the reserve and the token count agree on when the graph is on
    for v in (V10, V13, V14, (0, 5, 17), (0, 5, 22)):
        for facts in (TEXT, g.GraphFacts(hip=True), g.GraphFacts("DeepseekV3ForCausalLM", True)):
            on = g.prefill_graph_reserve_mib({}, v, 4096, facts) > 0
            assert (g.prefill_graph_tokens({}, v, 4096, facts) > 0) == on, (v, facts)


@pytest.mark.parametrize(
    ("version", "config", "replayed"),
    [
        ((0, 5, 12), {"speculative_algorithm": "EAGLE"}, False),  # captured NULL, asked FULL
        ((0, 5, 13), {"speculative_algorithm": "NEXTN"}, False),
        ((0, 5, 12), {"speculative_algorithm": "STANDALONE"}, True),  # its target asks NULL
        ((0, 5, 11), {"speculative_algorithm": "STANDALONE"}, False),  # 0.5.11's asks FULL
        ((0, 5, 12), {"speculative_algorithm": "NGRAM"}, True),
        (
            (0, 5, 12),
            {"speculative_algorithm": "EAGLE", "enable_return_hidden_states": True},
            True,
        ),
        ((0, 5, 14), {"speculative_algorithm": "EAGLE3"}, False),  # routed to the eager runner
        (
            (0, 5, 14),
            {"speculative_algorithm": "EAGLE", "cuda_graph_backend_prefill": "breakable"},
            True,
        ),
        ((0, 5, 15), {"speculative_algorithm": "EAGLE"}, True),  # breakable captures FULL
        (
            (0, 5, 16),
            {"speculative_algorithm": "EAGLE", "cuda_graph_backend_prefill": "tc_piecewise"},
            False,
        ),
    ],
)
def test_an_eagle_target_never_replays_a_tc_piecewise_graph(
    version: tuple[int, int, int], config: dict[str, object], replayed: bool
) -> None:
    """SGLang's EAGLE target prefill asks for FULL hidden states; tc_piecewise captures NULL
    (0.5.11 .. 0.5.13 can_run rejects it, 0.5.14+ init_prefill_cuda_graph skips it), the
    breakable graph FULL. What the heuristic reserves does not change."""
    assert (g.prefill_graph_tokens(config, version, 8192, TEXT) > 0) is replayed
    plain = {k: v for k, v in config.items() if k != "speculative_algorithm"}
    assert g.prefill_graph_reserve_mib(config, version, 8192, TEXT) == (
        g.prefill_graph_reserve_mib(plain, version, 8192, TEXT)
    )
