"""Rules of autotune/data/search_spaces/sglang.yaml on contexts built from the built-in model cards and the
GPU catalog (FIELD-NOTES P1, P2, P6, F2), plus the matcher semantics they rely on."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.engines import get_adapter
from autotune.errors import ConfigError
from autotune.hardware import get_gpu
from autotune.models import BUILTIN_CARDS
from autotune.space import Match, Rule, RuleContext, SearchSpace, check
from autotune.space.rules import _compare

AWQ = "qwen3.8-27b-awq-int4"  # hybrid, no MTP (F2)
FP8 = "qwen3.8-27b-fp8"  # hybrid, MTP
NVFP4 = "qwen3.8-27b-nvfp4"  # hybrid, MTP, needs Blackwell


def ctx(card: str = AWQ, gpu: str = "rtx-4080-super-32g", version: str = "0.5.17") -> RuleContext:
    return RuleContext.build(BUILTIN_CARDS[card], get_gpu(gpu), version, tp=1)


def ids(space: SearchSpace, config: dict[str, Any], context: RuleContext) -> set[str]:
    return {v.rule_id for v in space.check(config, context)}


def hicache(space: SearchSpace, **values: Any) -> dict[str, Any]:
    base = dict(space.defaults(), enable_hierarchical_cache=True, hicache_size=12,
                hicache_write_policy="write_through", hicache_io_backend="direct", page_size=1)  # fmt: skip
    base.update(values)
    space.validate_config(base)
    return base


@pytest.mark.parametrize(
    ("a", "b", "order"),
    [("0.5.9", "0.5.17", -1), ("0.5.17", "0.5.23", -1), ("0.5.9", "0.5.23", -1),
     ("0.5.17", "0.5.17", 0), ("0.5.17.post1", "0.5.17", 1), ("0.5.12rc0", "0.5.12", -1),
     ("0.6", "0.5.23", 1)],
)  # fmt: skip
def test_versions_compare_numerically(a: str, b: str, order: int) -> None:
    assert _compare(a, b) == order
    assert _compare(b, a) == -order


def test_version_matchers() -> None:
    lte = Match(lte="0.5.17")
    assert lte.test("0.5.9") and lte.test("0.5.17") and not lte.test("0.5.23")
    assert Match(gte="0.5.12").test("0.5.16") and not Match(gte="0.5.12").test("0.5.9")
    assert not lte.test("not-a-version")


def test_matcher_semantics() -> None:
    assert Match.model_validate({"in": [None, 1]}).test(None)
    assert not Match(eq=1).test(True)  # bools are not ints
    assert Match(eq=True).test(True)
    assert Match(ne=None).test("NGRAM") and not Match(ne=None).test(None)
    assert not Match(gte=4).test(None)
    assert Match(gte=4, or_null=True).test(None) and not Match(gte=4, or_null=True).test(2)
    assert Match(divides=256).test(64) and not Match(divides=256).test(48)
    assert Match(gt=1, lt=8).test(4) and not Match(gt=1, lt=8).test(8)
    assert Match.model_validate({"not_in": ["kernel"]}).test("direct")
    with pytest.raises(ValueError, match="a condition needs one of"):
        Match(or_null=True)


def test_context_from_cards_and_catalog() -> None:
    c = ctx(NVFP4, "rtx-pro-4500-32g", "0.5.18")
    assert (c.model_hybrid, c.model_mtp, c.quantization) == (True, True, "nvfp4")
    assert c.gpu_arch == "sm_120" and c.gpu_vendor == "nvidia"
    assert c.gpu_memory_gib == pytest.approx(32607 / 1024)
    assert not ctx(AWQ).model_mtp
    assert not ctx("tiny-dense").model_hybrid
    with pytest.raises(ConfigError, match="engine version: 'latest' is not a version number"):
        ctx(version="latest")


def test_p1_hybrid_hicache_needs_page_1_up_to_0_5_17(sglang_space: SearchSpace) -> None:
    paged = hicache(sglang_space, page_size=64)
    assert "P1" in ids(sglang_space, paged, ctx(version="0.5.17"))
    assert "P1" in ids(sglang_space, paged, ctx(version="0.5.12"))
    assert "P1" not in ids(sglang_space, paged, ctx(version="0.5.18"))
    assert "P1" not in ids(sglang_space, hicache(sglang_space), ctx(version="0.5.17"))
    assert "P1" not in ids(sglang_space, hicache(sglang_space, page_size=None), ctx())
    # dense models are not affected
    assert "P1" not in ids(sglang_space, paged, ctx("tiny-dense"))
    # and without HiCache page 64 is fine
    assert "P1" not in ids(sglang_space, dict(sglang_space.defaults(), page_size=64), ctx())


def test_p2_kernel_io_crashes_on_hybrid(sglang_space: SearchSpace) -> None:
    kernel = hicache(sglang_space, hicache_io_backend="kernel")
    (v,) = [v for v in sglang_space.check(kernel, ctx()) if v.rule_id == "P2"]
    assert v.kind == "constraint" and v.source == "sglang#24121"
    assert v.failed == ['hicache_io_backend="kernel", required == "direct"']
    # unset means the engine default, kernel: also refused
    assert "P2" in ids(sglang_space, dict(kernel, hicache_io_backend=None), ctx())
    assert "P2" not in ids(sglang_space, hicache(sglang_space), ctx())
    assert "P2" not in ids(sglang_space, kernel, ctx("tiny-dense"))


def test_p6_nextn_needs_mtp_weights(sglang_space: SearchSpace) -> None:
    nextn = dict(sglang_space.defaults(), speculative_algorithm="NEXTN",
                 speculative_num_steps=3, speculative_eagle_topk=1)  # fmt: skip
    sglang_space.validate_config(nextn)
    assert "P6" in ids(sglang_space, nextn, ctx(AWQ))  # community AWQ pack has no MTP
    assert "P6" not in ids(sglang_space, nextn, ctx(FP8))
    with_draft = dict(nextn, speculative_draft_model_path="/models/draft")
    assert "P6" not in ids(sglang_space, with_draft, ctx(AWQ))
    ngram = dict(sglang_space.defaults(), speculative_algorithm="NGRAM",
                 speculative_num_steps=5, speculative_num_draft_tokens=6)  # fmt: skip
    assert "P6" not in ids(sglang_space, ngram, ctx(AWQ))  # C4: NGRAM needs no weights


def test_nvfp4_needs_blackwell(sglang_space: SearchSpace) -> None:
    base = sglang_space.defaults()
    assert "nvfp4-blackwell" in ids(sglang_space, base, ctx(NVFP4, "rtx-4080-super-32g"))
    assert "nvfp4-blackwell" in ids(sglang_space, base, ctx(NVFP4, "h200-141g"))
    assert "nvfp4-blackwell" not in ids(sglang_space, base, ctx(NVFP4, "rtx-pro-4500-32g"))
    assert "nvfp4-blackwell" not in ids(sglang_space, base, ctx(NVFP4, "rtx-5090-32g"))
    assert "nvfp4-blackwell" not in ids(sglang_space, base, ctx(AWQ, "rtx-4080-super-32g"))


def test_speculative_and_mamba_rules(sglang_space: SearchSpace) -> None:
    dflash = dict(sglang_space.defaults(), speculative_algorithm="DFLASH",
                  speculative_num_draft_tokens=8)  # fmt: skip
    assert {"dflash-version", "dflash-draft-model"} <= ids(
        sglang_space, dflash, ctx(version="0.5.9")
    )
    drafted = dict(dflash, speculative_draft_model_path="/models/dflash")
    assert not ids(sglang_space, drafted, ctx(version="0.5.18"))
    # the rule agrees with the releases' parsers: DFLASH is a choice from the 0.5.11 wheel
    assert "dflash-version" in ids(sglang_space, drafted, ctx(version="0.5.10"))
    assert "dflash-version" not in ids(sglang_space, drafted, ctx(version="0.5.11"))
    argv = get_adapter("sglang").build_command
    argv({"speculative_algorithm": "DFLASH"}, model="m", version="0.5.11")
    with pytest.raises(ConfigError):
        argv({"speculative_algorithm": "DFLASH"}, model="m", version="0.5.10")
    assert "dflash-steps-topk" in ids(sglang_space, dict(drafted, speculative_num_steps=3), ctx())
    tree = dict(sglang_space.defaults(), speculative_algorithm="NEXTN", speculative_num_steps=3,
                speculative_eagle_topk=4, speculative_num_draft_tokens=8, page_size=64)  # fmt: skip
    # a tree on pages > 1: flashinfer, fa3 (triton from 0.5.13; null falls back to flashinfer)
    assert "spec-topk-page" not in ids(sglang_space, tree, ctx(FP8, version="0.5.23"))
    tree_ti = dict(tree, attention_backend="triton")
    assert "spec-topk-page" not in ids(sglang_space, tree_ti, ctx(FP8, version="0.5.23"))
    assert "spec-topk-page-0.5.12" in ids(sglang_space, tree_ti, ctx(FP8, version="0.5.12"))
    fa4 = dict(tree, attention_backend="fa4")
    assert "spec-topk-page" in ids(sglang_space, fa4, ctx(FP8, version="0.5.23"))
    no_buffer = dict(sglang_space.defaults(), mamba_radix_cache_strategy="no_buffer", page_size=16)
    assert "mamba-no-buffer-page" in ids(sglang_space, no_buffer, ctx(version="0.5.23"))
    auto16 = dict(sglang_space.defaults(), page_size=16)
    assert "mamba-auto-page-0.5.9" in ids(sglang_space, auto16, ctx(version="0.5.9"))
    assert not ids(sglang_space, auto16, ctx(version="0.5.23"))
    extra = dict(sglang_space.defaults(), mamba_radix_cache_strategy="extra_buffer", page_size=64)
    assert not ids(sglang_space, extra, ctx(version="0.5.23"))
    assert "mamba-extra-buffer-cuda" in ids(sglang_space, extra, ctx(gpu="rx-7900xtx-24g"))
    bad_interval = dict(extra, page_size=48)
    assert "mamba-extra-buffer" in ids(sglang_space, bad_interval, ctx(version="0.5.23"))


def test_known_good_k1_passes_on_its_target(sglang_space: SearchSpace) -> None:
    k1 = hicache(sglang_space, mem_fraction_static=0.92, max_running_requests=2,
                 kv_cache_dtype="fp8_e4m3", max_mamba_cache_size=6)  # fmt: skip
    assert sglang_space.check(k1, ctx(AWQ, "rtx-4080-super-32g", "0.5.17")) == []


def test_info_rules_only_when_asked(sglang_space: SearchSpace) -> None:
    config = dict(sglang_space.defaults(), max_running_requests=2)
    assert sglang_space.check(config, ctx()) == []
    notes = {v.rule_id: v for v in sglang_space.check(config, ctx(), include_info=True)}
    assert {"P5", "P7", "P9", "P10", "P14"} <= set(notes)
    assert all(v.kind == "info" for v in notes.values())
    assert "P11" not in notes  # the parsers are fixed in the space
    missing_parsers = dict(config, reasoning_parser=None)
    notes = {v.rule_id for v in sglang_space.check(missing_parsers, ctx(), include_info=True)}
    assert "P11" in notes
    assert "P13" in {
        v.rule_id for v in sglang_space.check(config, ctx(version="0.5.12"), include_info=True)
    }


def test_rule_objects_directly() -> None:
    rule = Rule.model_validate(
        {"id": "X", "source": "test", "reason": "r", "when": {"gpu.memory_gib": {"lte": 48}},
         "require": {"max_running_requests": {"lte": 8, "or_null": True}}}
    )  # fmt: skip
    assert check([rule], {"max_running_requests": 16}, ctx())[0].rule_id == "X"
    assert check([rule], {"max_running_requests": None}, ctx()) == []
    assert check([rule], {"max_running_requests": 16}, ctx(gpu="h200-141g")) == []
    assert "X: r (max_running_requests=16" in str(
        check([rule], {"max_running_requests": 16}, ctx())[0]
    )
