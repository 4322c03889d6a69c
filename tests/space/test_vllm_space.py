"""autotune/data/search_spaces/vllm.yaml: it loads, its names are vLLM fields (or the documented speculative
pseudo fields), every configuration it yields builds a command line for old and new releases,
and its rules catch what users hit (P6, K6, the `mtp` name's release)."""

from __future__ import annotations

import random

import pytest

from autotune.engines.vllm import build_command
from autotune.engines.vllm.flags import SPECULATIVE_FIELDS, known_fields
from autotune.errors import ConfigError
from autotune.hardware import get_gpu
from autotune.models import BUILTIN_CARDS
from autotune.models.card import ModelCard
from autotune.space import RuleContext, SearchSpace, builtin_space, parse_space
from autotune.space.engine_fields import ENGINE_FIELDS
from autotune.sweep.narrowing import narrow_to_target


@pytest.fixture(scope="module")
def space() -> SearchSpace:
    return builtin_space("vllm")


AWQ = BUILTIN_CARDS["qwen3.8-27b-awq-int4"]
NVFP4 = BUILTIN_CARDS["qwen3.8-27b-nvfp4"]  # has an MTP layer


def ctx(
    card: ModelCard = AWQ, version: str = "0.33.0", gpu: str = "rtx-2080ti-22g"
) -> RuleContext:
    return RuleContext.build(card, get_gpu(gpu), version, tp=2)


def test_engine_field_list_is_the_adapters() -> None:
    assert ENGINE_FIELDS["vllm"] == frozenset(known_fields())
    for name in (*SPECULATIVE_FIELDS, "memory_profiler_estimate_cudagraphs", "tp_size",
                 "max_num_seqs", "enable_prefix_caching", "cudagraph_capture_sizes"):  # fmt: skip
        assert name in ENGINE_FIELDS["vllm"]


def test_space_shape(space: SearchSpace) -> None:
    assert space.engine == "vllm"
    for name in ("gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens",
                 "block_size", "kv_cache_dtype", "enable_prefix_caching", "speculative_method",
                 "num_speculative_tokens", "max_cudagraph_capture_size"):  # fmt: skip
        assert name in space.parameters
    # the baseline leaves it to the engine: its default moved from 0.9 to 0.92 at 0.20.0
    assert space.defaults()["gpu_memory_utilization"] is None
    assert space.fixed["reasoning_parser"] == "qwen3"  # P11


def test_typos_are_rejected_with_a_suggestion() -> None:
    with pytest.raises(ConfigError, match="did you mean 'max_num_seqs'"):
        parse_space("engine: vllm\nparameters:\n  max_num_seq: {type: int, low: 1, high: 8}\n")


@pytest.mark.parametrize("version", ["0.11.0", "0.20.2", "0.33.0", "0.34.0"])
def test_every_sampled_configuration_builds(space: SearchSpace, version: str) -> None:
    # the space as a sweep on this target searches it: narrowed to the release and the GPU
    target = ctx(NVFP4, version, gpu="rtx-5090-32g")
    space, _ = narrow_to_target(space, version=version, context=target)
    rng = random.Random(version)
    grids = {name: p.grid_values() for name, p in space.parameters.items()}
    count = 0
    for _ in range(400):
        config = space.resolve({name: rng.choice(values) for name, values in grids.items()})
        if space.check(config, target):
            continue  # pruned before launch
        argv = build_command(config, model="/m", version=version).argv
        assert argv[:3] == ["vllm", "serve", "/m"]
        count += 1
    assert count > 200


def test_baseline_builds_on_the_oldest_release(space: SearchSpace) -> None:
    argv = build_command(space.defaults(), model="/m", version="0.10.0").argv
    # the engine's own utilisation (no flag) and no speculation
    assert "--gpu-memory-utilization" not in argv and "--speculative-config" not in argv
    tuned = {**space.defaults(), "gpu_memory_utilization": 0.88}
    argv = build_command(tuned, model="/m", version="0.10.0").argv
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.88"


def test_rules(space: SearchSpace) -> None:
    mtp = space.resolve({"speculative_method": "mtp", "num_speculative_tokens": 2})
    ids = {v.rule_id for v in space.check(mtp, ctx(AWQ, "0.33.0"))}
    assert ids == {"P6-vllm-mtp"}  # the AWQ pack has no MTP layer
    assert not space.check(mtp, ctx(NVFP4, "0.33.0", gpu="rtx-5090-32g"))
    ids = {v.rule_id for v in space.check(mtp, ctx(NVFP4, "0.10.2", gpu="rtx-5090-32g"))}
    assert ids == {"mtp-method-version"}
    ngram = space.resolve({"speculative_method": "ngram", "num_speculative_tokens": 4,
                           "prompt_lookup_max": 4})  # fmt: skip
    assert not space.check(ngram, ctx())
    assert ngram["prompt_lookup_max"] == 4
    assert space.resolve({"prompt_lookup_max": 4})["prompt_lookup_max"] is None  # inactive
    info = {v.rule_id for v in space.check(space.defaults(), ctx(), include_info=True)}
    assert {"K6-fits-at-launch", "vllm-gpu-memory-utilization-total",
            "vllm-hybrid-block-size"} <= info  # fmt: skip
    chunked_off = {**space.defaults(), "enable_prefix_caching": True}
    fixed = space.with_overrides({"enable_chunked_prefill": False})
    assert "mamba-prefix-caching-chunked-prefill" in {
        v.rule_id for v in fixed.check({**chunked_off, "enable_chunked_prefill": False}, ctx())
    }
