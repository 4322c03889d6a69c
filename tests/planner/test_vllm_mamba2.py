"""vLLM's Mamba-2 (Nemotron-H) state and KV layout: the per-layer state against the release's
own MambaStateShapeCalculator.mamba2_state_shape (0.19.1 and 0.34.0 wheels), the SSM dtype rule of
its NemotronH config, and the layout the two public GB10 launches logged (block size, padding
layers, "GPU KV cache size" and "Maximum concurrency" from their logged KV memory)."""

from __future__ import annotations

import ast
import math
import zipfile
from pathlib import Path

import pytest
import yaml

from autotune.models.card import DTYPE_BYTES
from autotune.models.config_cards import config_card
from autotune.models.hf.fields import NEMOTRON_H_SSM_DEFAULT
from autotune.planner.vllm_kv import hybrid_groups, kv_layout, mamba_page_bytes
from tests.wheels import engine_wheel_or_skip

NANO = "nvidia/NVIDIA-Nemotron-3-Nano-4B-BF16"
SUPER = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"
GIB = 2**30


def _calculator(version: str) -> type:
    """MambaStateShapeCalculator's mamba2 methods as the release writes them."""
    with zipfile.ZipFile(engine_wheel_or_skip("vllm", version)) as z:
        tree = ast.parse(z.read("vllm/model_executor/layers/mamba/mamba_utils.py").decode())
    cls = next(
        n for n in ast.walk(tree)
        if isinstance(n, ast.ClassDef) and n.name == "MambaStateShapeCalculator"
    )  # fmt: skip
    # _orient_conv_shape (0.33 on) orders the conv state's two dims by the layout: the same
    # elements either way
    keep = {"mamba2_state_shape", "extra_groups_for_head_shards", "_orient_conv_shape"}
    cls.body = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in keep]
    module = ast.Module(body=[cls], type_ignores=[])
    ns: dict[str, object] = {
        "divide": lambda a, b: a // b if a % b == 0 else 1 / 0,
        "is_conv_state_dim_first": lambda: True,
    }
    exec(compile(module, "mamba_utils.py", "exec"), ns)
    return ns["MambaStateShapeCalculator"]  # type: ignore[return-value]


@pytest.mark.parametrize("version", ["0.19.1", "0.34.0"])
@pytest.mark.parametrize("model", [NANO, SUPER])
@pytest.mark.parametrize(("tp", "num_spec"), [(1, 0), (1, 3), (2, 0), (4, 1), (8, 0)])
def test_mamba2_state_is_the_releases(version: str, model: str, tp: int, num_spec: int) -> None:
    card = config_card(model)
    assert card is not None and card.linear_attention is not None
    la = card.linear_attention
    calc = _calculator(version)
    conv, ssm = calc.mamba2_state_shape(  # type: ignore[attr-defined]
        tp_world_size=tp,
        intermediate_size=la.num_value_heads * la.value_head_dim,
        n_groups=la.num_key_heads,
        num_heads=la.num_value_heads,
        head_dim=la.value_head_dim,
        state_size=la.key_head_dim,
        conv_kernel=la.conv_kernel,
        num_spec=num_spec,
    )
    ours = mamba_page_bytes(card, tp, num_spec=num_spec)
    conv_b, ssm_b = DTYPE_BYTES[card.dtype], DTYPE_BYTES[la.ssm_dtype]
    assert ours == (math.prod(conv) * conv_b, math.prod(ssm) * ssm_b)


@pytest.mark.parametrize("version", ["0.19.1", "0.34.0"])
def test_mamba2_groups_widen_to_tp_as_the_release_does(version: str) -> None:
    card = config_card(NANO)
    assert card is not None and card.linear_attention is not None
    one = card.linear_attention.model_copy(update={"num_key_heads": 1})
    card = card.model_copy(update={"linear_attention": one})
    calc = _calculator(version)
    conv, _ = calc.mamba2_state_shape(  # type: ignore[attr-defined]
        tp_world_size=4, intermediate_size=7680, n_groups=1, num_heads=96, head_dim=80,
        state_size=128, conv_kernel=4,
    )  # fmt: skip
    assert mamba_page_bytes(card, 4)[0] == math.prod(conv) * 2


def test_nemotron_h_ssm_dtype_default_is_the_releases() -> None:
    with zipfile.ZipFile(engine_wheel_or_skip("vllm", "0.19.1")) as z:
        src = z.read("vllm/model_executor/models/config.py").decode()
    # an `auto` SSM cache dtype takes config.json's, float16 without one (fields.py)
    assert 'getattr(\n                hf_config, "mamba_ssm_cache_dtype", "float16"' in src
    assert NEMOTRON_H_SSM_DEFAULT == "float16"


def test_nemotron_h_ssm_dtype_default_is_float32_on_0_34_0() -> None:
    """From 0.28.0 (and on 0.34.0) a config without mamba_ssm_cache_dtype gets float32
    (NemotronHForCausalLMConfig.DEFAULT_MAMBA_SSM_CACHE_DTYPE), not the card default's 0.19
    float16: the cards of this repository state the dtype, so the default is never used."""
    with zipfile.ZipFile(engine_wheel_or_skip("vllm", "0.34.0")) as z:
        src = z.read("vllm/model_executor/models/config.py").decode()
    assert 'DEFAULT_MAMBA_SSM_CACHE_DTYPE: "MambaDType" = "float32"' in src
    assert '"mamba_ssm_cache_dtype", cls.DEFAULT_MAMBA_SSM_CACHE_DTYPE' in src
    cards = Path(__file__).resolve().parents[2] / "autotune" / "data" / "model_configs"
    nemotron_h = [c for c in cards.glob("*.yaml") if "NemotronHForCausalLM" in c.read_text()]
    assert len(nemotron_h) >= 2
    for path in nemotron_h:
        config = yaml.safe_load(path.read_text())["config"]
        assert config.get("mamba_ssm_cache_dtype"), path.name


def test_nano_4b_layout_is_the_logged_one() -> None:
    """more-nemotron-3-nano-4b-gb10-tp1: 'Setting attention block size to 1952 tokens',
    'Padding mamba page size by 0.18%', 'Add 3 padding layers' (4 attention vs 21 Mamba
    layers: 6 groups of 4), 'Available KV cache memory: 103.39 GiB', 'GPU KV cache size:
    1,934,432 tokens', 'Maximum concurrency for 49,152 tokens per request: 216.94x'."""
    card = config_card(NANO)
    assert card is not None
    assert hybrid_groups(4, 21) == (4, 1, 6)
    lay = kv_layout(
        card,
        version="0.19.2rc1.dev134+gfe9c3d6c5",
        tp=1,
        kv_dtype="fp8_e4m3",
        max_model_len=49152,
        kv_memory_bytes=103.39 * GIB,
        prefix_caching=False,
    )
    assert lay.block_size == 1952
    assert round((lay.page_bytes / lay.mamba_state_bytes - 1) * 100, 2) == 0.18
    assert lay.kv_tokens == 1_934_432
    assert round(lay.concurrency, 2) == 216.94


def test_super_layout_is_the_logged_one() -> None:
    """more-nemotron-3-super-120b-a12b-nvfp4-gb10-tp1 (MTP, 3 speculative tokens: the conv
    window grows by 3, the MTP attention block joins the KV groups): 'Setting attention block
    size to 8432 tokens' (no padding line: the page is the state exactly), 'Add 5 padding
    layers', 'Available KV cache memory: 36.25 GiB', 'GPU KV cache size: 1,399,712 tokens',
    'Maximum concurrency for 131,072 tokens per request: 27.81x'."""
    card = config_card(SUPER)
    assert card is not None
    assert hybrid_groups(9, 40) == (9, 1, 5)
    lay = kv_layout(
        card,
        version="0.19.2rc1.dev134+gfe9c3d6c5",
        tp=1,
        kv_dtype="fp8",
        max_model_len=131072,
        kv_memory_bytes=36.25 * GIB,
        prefix_caching=False,
        num_spec=3,
        draft_layers=1,
        ssm_dtype="float32",
    )
    assert lay.block_size == 8432 and lay.page_bytes == lay.mamba_state_bytes
    assert lay.kv_tokens == 1_399_712
    assert round(lay.concurrency, 2) == 27.81


def test_nano_4b_launch_replays_through_the_planner() -> None:
    """The launch's own inputs (GB10, fp8 KV, 49,152 tokens, utilization 0.95) through the
    vLLM planner: the block size and groups the log states, weights and KV within 5%."""
    from pathlib import Path

    from autotune.calibration.records import load_records
    from autotune.calibration.replay import replay

    root = Path(__file__).resolve().parents[1] / "data" / "real_launches"
    rec = next(r for r in load_records(root) if r.name == "more-nemotron-3-nano-4b-gb10-tp1")
    got = replay(rec)
    assert got.plan is not None, got.skipped
    plan = got.plan.model_dump()
    assert (plan["block_size"], plan["kv_groups"], plan["layers_per_group"]) == (1952, 7, 4)
    assert got.weights_ratio == pytest.approx(1.0, abs=0.01)
    assert got.kv_ratio == pytest.approx(1.0, abs=0.05)
