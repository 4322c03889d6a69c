"""Which models get SGLang's two SWA pools, and the log line that states them, from the
releases' wheels (tests.wheels: downloaded once, a skip without a registry)."""

from __future__ import annotations

import ast
import re
import zipfile

import pytest

from autotune.hardware.gpus import get_gpu
from autotune.models.config_cards import config_card
from autotune.planner.sglang import plan_sglang
from autotune.planner.sglang_swa import HYBRID_SWA_ARCHITECTURES, hybrid_by_architecture, swa_pools
from tests.wheels import engine_wheel_or_skip

GPT_OSS = "GptOssForCausalLM"
# The last release before gpt-oss joined the list, the first, and later layouts of the list.
HYBRID_RELEASES = ("0.5.7", "0.5.8", "0.5.9", "0.5.10", "0.5.19")
TRTLLM_RULE = {"0.5.8": True, "0.5.9": True, "0.5.10": False}


def _source(version: str, path: str) -> str:
    with zipfile.ZipFile(engine_wheel_or_skip("sglang", version)) as z:
        return z.read(path).decode()


def _release_says_hybrid(version: str, arch: str) -> bool:
    """Run the release's own is_hybrid_swa_model (0.5.8 on) or is_hybrid_model (before, with
    hybrid_kvcache_ratio at its default None) on `arch`."""
    tree = ast.parse(_source(version, "sglang/srt/configs/model_config.py"))
    keep: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in (
            "is_hybrid_swa_model",
            "is_hybrid_model",
        ):
            keep.append(node)
        elif isinstance(node, ast.Assign) and all(
            isinstance(t, ast.Name) and t.id.endswith("_ARCHS") for t in node.targets
        ):
            keep.append(node)  # 0.5.19: the architecture sets the function reads
    ns: dict[str, object] = {}
    exec(compile(ast.Module(body=keep, type_ignores=[]), version, "exec"), ns)
    if "is_hybrid_swa_model" in ns:
        return bool(ns["is_hybrid_swa_model"]([arch]))  # type: ignore[operator]
    return ns["is_hybrid_model"]([arch], None, 131072, None) is not None  # type: ignore[operator]


def _rel(version: str) -> tuple[int, int, int]:
    a, b, c = re.findall(r"\d+", version)[:3]
    return int(a), int(b), int(c)


@pytest.mark.parametrize("version", HYBRID_RELEASES)
def test_gpt_oss_takes_the_two_pools_from_the_release_that_lists_it(version: str) -> None:
    expected = _rel(version) >= HYBRID_SWA_ARCHITECTURES[GPT_OSS]
    assert _release_says_hybrid(version, GPT_OSS) is expected, version
    card = config_card("openai/gpt-oss-120b")
    assert card is not None
    assert hybrid_by_architecture(card, _rel(version), {}, "sm_90") is expected


@pytest.mark.parametrize("version", list(TRTLLM_RULE))
def test_trtllm_mha_turns_the_pools_off_for_gpt_oss_in_0_5_8_and_0_5_9(version: str) -> None:
    src = _source(version, "sglang/srt/server_args.py")
    branch = src[src.index('elif model_arch in ["GptOssForCausalLM"]') :][:3000]
    assert 'self.attention_backend = "trtllm_mha"' in branch  # gpt-oss's default on sm_10x
    disables = "Disable hybrid SWA memory for GPT-OSS model with trtllm_mha" in branch
    assert disables is TRTLLM_RULE[version]
    card = config_card("openai/gpt-oss-120b")
    assert card is not None
    assert hybrid_by_architecture(card, _rel(version), {}, "sm_100") is not disables
    assert hybrid_by_architecture(card, _rel(version), {}, "sm_120")  # triton by default
    spec = "Disable hybrid SWA memory for GPT-OSS model with speculative decoding" in branch
    assert spec is (version == "0.5.8")
    eagle = {"speculative_algorithm": "EAGLE3"}
    assert hybrid_by_architecture(card, _rel(version), eagle, "sm_120") is not spec


@pytest.mark.parametrize("version", ("0.5.7", "0.5.9", "0.5.23"))
def test_the_swa_pools_line_states_the_full_pool(version: str) -> None:
    """The line the log parser reads the full pool's tokens from (engines.sglang.logs)."""
    with zipfile.ZipFile(engine_wheel_or_skip("sglang", version)) as z:
        py = (n for n in z.namelist() if n.startswith("sglang/srt/") and n.endswith(".py"))
        sources = (z.read(n).decode() for n in py)
        text = "\n".join(s for s in sources if "Use sliding window memory pool" in s)
    joined = re.sub(r'"\s*\n\s*f"', "", text)  # adjacent f-strings as one
    assert re.search(
        r"Use sliding window memory pool\. full_layer_tokens=\{[^}]+\}, swa_layer_tokens=\{",
        joined,
    ), version


def test_gpt_oss_plan_sizes_the_full_pool() -> None:
    card = config_card("openai/gpt-oss-120b")
    assert card is not None
    pools = swa_pools(card, 2.0, 1, (0, 5, 9), None, by_architecture=True)
    assert pools is not None and (pools.n_full, pools.n_swa) == (18, 18)
    assert pools.cell == 36 * 8 * 128 * 2
    gpu = get_gpu("rtx-pro-6000-se-96g")
    cfg = {"mem_fraction_static": 0.8}
    old = plan_sglang(card, gpu, cfg, version="0.5.7", tp=1)
    new = plan_sglang(card, gpu, cfg, version="0.5.9", tp=1)
    # one pool in 0.5.7; in 0.5.9 the same budget gives the full pool 1 / 0.9 of the tokens
    assert old.kv_cell_bytes == new.kv_cell_bytes
    assert abs(new.kv_pool_tokens - old.kv_pool_tokens / 0.9) <= 2
    b200 = plan_sglang(card, get_gpu("b200-180g"), cfg, version="0.5.9", tp=1)
    one = plan_sglang(card, get_gpu("b200-180g"), cfg, version="0.5.7", tp=1)
    assert b200.kv_pool_tokens == one.kv_pool_tokens  # trtllm_mha: no SWA pools on 0.5.9
