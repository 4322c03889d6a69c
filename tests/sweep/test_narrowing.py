"""Narrowing a space to its target (autotune.sweep.narrowing): the release's flags and values
(from the adapters' catalogs, generated from the releases), and the one-parameter rules that
the GPU and model decide."""

from __future__ import annotations

import random

import pytest

from autotune.engines import get_adapter
from autotune.hardware import get_gpu
from autotune.planner.dispatch import load_target_model, target_facts
from autotune.space import SearchSpace, builtin_space
from autotune.space.rules import RuleContext
from autotune.sweep.narrowing import narrow_to_target

HYBRID = "qwen3.8-27b-awq-int4"


def _ctx(gpu: str, version: str, engine: str = "sglang", model: str = HYBRID) -> RuleContext:
    ctx, unknown = target_facts(engine, load_target_model(engine, model), get_gpu(gpu), version)
    assert not unknown
    return ctx


def _choices(space: SearchSpace, name: str) -> list[object]:
    if name in space.fixed:
        return [space.fixed[name]]
    return list(space.parameters[name].grid_values())


def test_release_flags_and_values() -> None:
    old, notes = narrow_to_target(builtin_space("sglang"), version="0.5.9")
    assert "DFLASH" not in _choices(old, "speculative_algorithm")  # an argparse choice from 0.5.11
    assert "extra_buffer_lazy" not in _choices(old, "mamba_radix_cache_strategy")
    assert old.fixed["linear_attn_backend"] is None  # no such flag before 0.5.10
    assert any(n.name == "linear_attn_backend" and n.removed for n in notes)
    new, _ = narrow_to_target(builtin_space("sglang"), version="0.5.23")
    assert "DFLASH" in _choices(new, "speculative_algorithm")
    assert "cutedsl" in _choices(new, "linear_attn_backend")

    v12, _ = narrow_to_target(builtin_space("vllm"), version="0.12.0")
    v13, _ = narrow_to_target(builtin_space("vllm"), version="0.13.0")
    assert v12.fixed["attention_backend"] is None and "attention_backend" in v13.parameters
    ctx = _ctx("rtx-4090-24g", "0.10.0", engine="vllm")
    v10, _ = narrow_to_target(builtin_space("vllm"), version="0.10.0", context=ctx)
    assert _choices(v10, "speculative_method") == [None, "ngram"]  # `mtp` from 0.11.0


@pytest.mark.parametrize(
    ("gpu", "version", "expected"),
    [
        ("rtx-4080-super-32g", "0.5.17", {None, "flashinfer", "triton", "fa3"}),
        ("h200-141g", "0.5.23", {None, "flashinfer", "triton", "fa3", "trtllm_mha"}),
        ("h200-141g", "0.5.18", {None, "flashinfer", "triton", "fa3"}),  # TRT-LLM: sm_100 then
        ("b200-180g", "0.5.18", {None, "triton", "fa4", "trtllm_mha"}),  # hybrid GDN on sm_100
        ("rx-7900xtx-24g", "0.5.18", {None, "triton"}),
        ("mi300x-192g", "0.5.18", {None, "triton", "aiter"}),
        ("rtx-pro-4500-32g", "0.5.9", {"triton"}),  # hybrid on Blackwell in 0.5.9
    ],
)
def test_attention_backends_by_gpu(gpu: str, version: str, expected: set[object]) -> None:
    space, _ = narrow_to_target(
        builtin_space("sglang"), version=version, context=_ctx(gpu, version)
    )
    assert set(_choices(space, "attention_backend")) == expected


def test_rocm_kv_splits_and_linear_kernels() -> None:
    space, _ = narrow_to_target(
        builtin_space("sglang"), version="0.5.18", context=_ctx("rx-7900xtx-24g", "0.5.18")
    )
    assert _choices(space, "triton_attention_num_kv_splits") == [None, 16]
    assert _choices(space, "linear_attn_backend") == [None, "triton"]
    hopper, _ = narrow_to_target(
        builtin_space("sglang"), version="0.5.18", context=_ctx("h200-141g", "0.5.18")
    )
    assert set(_choices(hopper, "linear_attn_backend")) == {
        None,
        "triton",
        "flashinfer",
        "cutedsl",
    }


def test_vllm_backends_by_gpu() -> None:
    ctx = _ctx("rtx-2080ti-22g", "0.19.0", engine="vllm")
    space, _ = narrow_to_target(builtin_space("vllm"), version="0.19.0", context=ctx)
    assert set(_choices(space, "attention_backend")) == {None, "FLASHINFER", "TRITON_ATTN"}
    ctx = _ctx("rtx-2080ti-22g", "0.24.0", engine="vllm")
    space, _ = narrow_to_target(builtin_space("vllm"), version="0.24.0", context=ctx)
    assert set(_choices(space, "attention_backend")) == {None, "TRITON_ATTN"}  # flashinfer#3620
    ctx = _ctx("rtx-4090-24g", "0.10.2", engine="vllm")
    space, _ = narrow_to_target(builtin_space("vllm"), version="0.10.2", context=ctx)
    assert _choices(space, "kv_cache_dtype") == ["auto"]  # FA2 refuses fp8 KV on 0.10.x


def test_unknown_facts_leave_values() -> None:
    ctx = _ctx("rx-7900xtx-24g", "0.5.18")
    space, _ = narrow_to_target(
        builtin_space("sglang"), version="0.5.18", context=ctx, unknown={"gpu.vendor", "gpu.arch"}
    )
    assert "flashinfer" in _choices(space, "attention_backend")


@pytest.mark.parametrize(
    ("engine", "version", "gpu"),
    [
        ("sglang", "0.5.9", "rtx-4080-super-32g"),
        ("sglang", "0.5.14", "h100-80g"),
        ("sglang", "0.5.23", "rtx-5090-32g"),
        ("vllm", "0.11.0", "a100-80g"),
        ("vllm", "0.33.0", "h200-141g"),
    ],
)
def test_every_kept_value_builds(engine: str, version: str, gpu: str) -> None:
    """What the narrowed space can propose and its rules let through, the release's own
    parser takes: every value of every parameter appears in some sampled configuration."""
    ctx = _ctx(gpu, version, engine=engine)
    space, _ = narrow_to_target(builtin_space(engine), version=version, context=ctx)
    adapter = get_adapter(engine)
    rng = random.Random(version)
    built = 0
    for _ in range(300):
        config = space.resolve(
            {n: rng.choice(p.grid_values()) for n, p in space.parameters.items()}
        )
        if space.check(config, ctx):
            continue  # the gate prunes it before launch
        adapter.build_command(config, model="/m", version=version)
        built += 1
    assert built >= 30
