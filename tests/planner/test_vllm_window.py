"""vLLM's KV cache groups for sliding-window models (planner/vllm_window.py): Gemma 4 26B-A4B's
heterogeneous pages against the two public vLLM 0.25.1 launches on a DGX Spark
(tests/data/real_launches/vllm/*gemma-4-26b-a4b*), and the rules against the releases' own code
(0.21.0 .. 0.26.0, and 0.34.0 with the transformers release it asks for)."""

from __future__ import annotations

import ast
import zipfile
from pathlib import Path

import pytest

from autotune.calibration.records import load_record
from autotune.calibration.replay import replay
from autotune.hardware import get_gpu
from autotune.models.config_cards import config_card
from autotune.planner.vllm import plan_vllm
from autotune.planner.vllm_kv import kv_layout
from autotune.planner.vllm_window import in_flight_tokens, mm_prefix_floor
from tests.wheels import engine_wheel_or_skip, package_wheel_or_skip

RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches" / "vllm"
AWQ = "cyankiwi/gemma-4-26B-A4B-it-qat-AWQ-INT4"
NVFP4 = "RedHatAI/gemma-4-26B-A4B-it-NVFP4"
# (card, "Available KV cache memory" GiB, "GPU KV cache size" tokens, "Maximum concurrency")
LOGGED = ((AWQ, 83.89, 3_875_400, 14.78), (NVFP4, 84.68, 3_912_140, 14.92))


def _layout(model: str, gib: float, in_flight: int = 2496) -> object:
    c = config_card(model)
    assert c is not None
    return kv_layout(
        c,
        version="0.25.1",
        tp=1,
        kv_dtype="auto",
        max_model_len=262144,
        kv_memory_bytes=gib * 2**30,
        prefix_caching=True,
        in_flight_tokens=in_flight,
    )


@pytest.mark.parametrize(("model", "gib", "tokens", "concurrency"), LOGGED)
def test_logged_capacity_from_the_logged_kv_memory(
    model: str, gib: float, tokens: int, concurrency: float
) -> None:
    """Golden: from the KV memory each log states (rounded to 0.01 GiB), the groups give its
    token count within that rounding and its concurrency. 25 sliding layers (8 heads x 256 x
    K+V) and 5 global ones (2 heads x 512 x K+V: V is stored although k_eq_v) unify to one page
    with 16- and 32-token blocks: 1 full + 5 sliding groups of 5 layers; a 262,144-token request
    takes 8,192 full blocks and 5 x (cdiv(1,023 + 2,496, 16) + 1) sliding ones."""
    lay = _layout(model, gib)
    assert (lay.layers_per_group, lay.full_groups, lay.window_groups) == (5, 1, 5)  # type: ignore[attr-defined]
    assert lay.blocks_per_request == 8192 + 5 * 221  # type: ignore[attr-defined]
    assert round(lay.concurrency, 2) == concurrency  # type: ignore[attr-defined]
    lo, hi = _layout(model, gib - 0.005), _layout(model, gib + 0.005)
    assert lo.kv_tokens <= tokens <= hi.kv_tokens  # type: ignore[attr-defined]


def test_the_alternatives_miss_the_log() -> None:
    """V not stored on k_eq_v layers, or the default 8,192-token batch, would not give it."""
    c = config_card(AWQ)
    assert c is not None and c.global_attention is not None
    no_v = c.model_copy(
        update={"global_attention": c.global_attention.model_copy(update={"num_kv_heads": 1})}
    )
    lay = kv_layout(no_v, version="0.25.1", tp=1, kv_dtype="auto", max_model_len=262144,
                    kv_memory_bytes=83.89 * 2**30, prefix_caching=True, in_flight_tokens=2496)  # fmt: skip
    assert lay.concurrency > 20
    assert _layout(AWQ, 83.89, in_flight=8192).concurrency < 13  # type: ignore[attr-defined]


def test_gb10_batch_default_and_the_video_floor() -> None:
    """GB10's NVML has no memory total, so vLLM's batch defaults are the small pair (2,048);
    from 0.22.0 Gemma 4's video item (2,496 tokens) raises it, as both logs say."""
    c = config_card(NVFP4)
    assert c is not None
    cfg = {"max_model_len": 262144, "gpu_memory_utilization": 0.85, "max_num_seqs": 32}
    plan = plan_vllm(c, get_gpu("gb10-128g"), cfg, version="0.25.1")
    assert plan.max_num_batched_tokens == 2496
    assert (plan.kv_groups, plan.layers_per_group) == (6, 5)
    assert plan.kv_cell_bytes == 25 * 8 * 512 * 2 + 5 * 2 * 1024 * 2
    assert plan_vllm(c, get_gpu("gb10-128g"), cfg, version="0.21.0").max_num_batched_tokens == 2048
    assert mm_prefix_floor(c, "0.21.0") == 0 and mm_prefix_floor(c, "0.22.0") == 2496
    assert in_flight_tokens("0.25.1", 2496, True) == 2496
    assert in_flight_tokens("0.26.0", 2496, True) == 4992


@pytest.mark.parametrize(
    "name", ["more-gemma-4-26b-a4b-it-awq-int4-gb10-tp1", "repo-gemma-4-26b-a4b-it-nvfp4-gb10-tp1"]
)
def test_the_records_replay_within_five_percent(name: str) -> None:
    """Nothing is fitted on them; what remains (+3.3 %, +3.5 %) is the vision encoder's
    profiling peak (a 32-frame video) and 0.3-0.6 GiB of loaded weights the count misses."""
    r = replay(load_record(RECORDS / f"{name}.yaml"))
    assert r.kv_ratio is not None and abs(r.kv_ratio - 1) < 0.05


def _source(version: str, path: str) -> str:
    with zipfile.ZipFile(engine_wheel_or_skip("vllm", version)) as z:
        return z.read(path).decode()


def _method(src: str, cls: str, name: str) -> str:
    tree = ast.parse(src)
    owner = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    node = next(n for n in owner.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return ast.unparse(node)


def test_the_rules_are_the_releases() -> None:
    """0.25.1: the sliding window's admission blocks, the video item, k_eq_v's KV heads, the
    1.5x group-size rule; 0.22.0 raises the batch for prefix-LM models, 0.21.0 does not; 0.26.0
    counts the tokens in flight."""
    spec = _source("0.25.1", "vllm/v1/kv_cache_interface.py")
    blocks = _method(spec, "SlidingWindowSpec", "max_admission_blocks_per_request")
    assert "self.sliding_window - 1 + max_num_batched_tokens" in blocks
    assert "cdiv(num_tokens, self.block_size) + 1" in blocks
    mm = _source("0.25.1", "vllm/model_executor/models/gemma4_mm.py")
    assert "_VIDEO_MAX_SOFT_TOKENS = 70" in mm and "_VIDEO_MAX_FRAMES = 32" in mm
    assert "num_frames * (_VIDEO_MAX_SOFT_TOKENS + 2 + 6)" in mm
    model = _source("0.25.1", "vllm/model_executor/models/gemma4.py")
    assert '"num_global_key_value_heads", config.num_key_value_heads' in model
    assert "if use_k_eq_v:" in model
    utils = _source("0.25.1", "vllm/v1/core/kv_cache_utils.py")
    assert "if max_num_layers < min_num_layers * 1.5:" in utils
    assert "new_block_size = layer_spec.block_size * ratio" in utils
    assert "accommodate" in _source("0.22.0", "vllm/engine/arg_utils.py")
    assert "accommodate" not in _source("0.21.0", "vllm/engine/arg_utils.py")
    later = _source("0.26.0", "vllm/v1/kv_cache_interface.py")
    assert "self.sliding_window - 1 + max_in_flight_tokens" in later


def test_the_rules_hold_on_0_34_0() -> None:
    """The newest release: the admission blocks count the tokens in flight (plus
    extra_retained_tokens, 0 without a speculative drafter), the group-size rule lives in
    kv_cache_planning.py (from 0.33), the video item and the prefix-LM floor are 0.25.1's.
    Gemma 4's KV heads per layer come from transformers' per_layer_config (the wheel asks for
    transformers >= 5.16.1, whose Gemma4TextConfig gives the full-attention layers
    num_global_key_value_heads where attention_k_eq_v); the K weights load into both the K and
    V slots, so V is still stored."""
    v = "0.34.0"
    spec = _source(v, "vllm/v1/kv_cache_interface.py")
    blocks = _method(spec, "SlidingWindowSpec", "max_admission_blocks_per_request")
    assert "self.sliding_window - 1 + self.extra_retained_tokens + max_in_flight_tokens" in blocks
    assert "cdiv(num_tokens, self.block_size) + 1" in blocks
    planning = _source(v, "vllm/v1/core/kv_cache_planning.py")
    assert "extra_retained_tokens = max(0, vllm_config.num_prefill_lookahead_tokens - 1)" in (
        planning
    )
    assert "if max_num_layers < min_num_layers * 1.5:" in planning
    assert "new_block_size = layer_spec.block_size * ratio" in planning
    config = _source(v, "vllm/config/vllm.py")
    lookahead = config[config.index("def num_prefill_lookahead_tokens") :]
    assert "if speculative_config is None:\n            return 0" in lookahead
    assert "self.max_concurrent_batches * self.scheduler_config.max_num_batched_tokens" in config
    mm = _source(v, "vllm/model_executor/models/gemma4_mm.py")
    assert "_VIDEO_MAX_SOFT_TOKENS = 70" in mm and "_VIDEO_MAX_FRAMES = 32" in mm
    assert "num_frames * (_VIDEO_MAX_SOFT_TOKENS + 2 + 6)" in mm
    assert "accommodate" in _source(v, "vllm/engine/arg_utils.py")
    model = _source(v, "vllm/model_executor/models/gemma4.py")
    assert "layer_config = config.per_layer_config[layer_idx]" in model
    assert "num_kv_heads = layer_config.num_key_value_heads" in model
    assert 'k_eq_v_shards: tuple[tuple[str, ShardIds], ...] = (("q", "q"), ("k", ["k", "v"]))' in (
        model
    )
    with zipfile.ZipFile(engine_wheel_or_skip("vllm", v)) as z:
        meta = z.read("vllm-0.34.0.dist-info/METADATA").decode()
    assert "Requires-Dist: transformers<5.23.0,>=5.16.1" in meta
    with zipfile.ZipFile(package_wheel_or_skip("transformers", "5.16.1")) as z:
        hf = z.read("transformers/models/gemma4/configuration_gemma4.py").decode()
    assert 'num_global_key_value_heads = kwargs.pop("num_global_key_value_heads", None)' in hf
    assert (
        'num_key_value_heads = num_global_key_value_heads if getattr(self, "attention_k_eq_v", '
        "True) else None" in hf
    )
    assert 'if layer_type == "full_attention"' in hf


def test_sglang_prices_gemma4_as_two_pools_or_refuses() -> None:
    """SGLang gives Gemma 4 its two SWA pools from 0.5.11 (tests/planner/
    test_sglang_gemma4_wheels.py); before, one cell would misprice it."""
    from autotune.errors import ConfigError
    from autotune.planner.sglang import plan_sglang

    c = config_card(NVFP4)
    assert c is not None
    assert plan_sglang(c, get_gpu("gb10-128g"), {}, version="0.5.16").kv_pool_tokens > 0
    with pytest.raises(ConfigError, match="modelled only"):
        plan_sglang(c, get_gpu("gb10-128g"), {}, version="0.5.10")
