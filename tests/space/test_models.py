"""SearchSpace behaviour: baseline defaults, Optuna suggestion under conditions, exhaustive
enumeration, config validation and overrides."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import optuna
import pytest
from pydantic import ValidationError

from autotune.errors import ConfigError
from autotune.space import CategoricalParam, FloatParam, IntParam, SearchSpace

optuna.logging.set_verbosity(optuna.logging.WARNING)

HICACHE = ("hicache_ratio", "hicache_write_policy", "hicache_io_backend", "hicache_mem_layout")
SPEC = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
OTHER = ("hicache_size", "cuda_graph_bs_decode", "triton_attention_num_kv_splits")
CONDITIONAL = HICACHE + SPEC + OTHER

# FIELD-NOTES K1 (4080S 32G, AWQ-INT4, 0.5.17) in engine field names, plus io direct (P2).
K1 = {
    "context_length": 131072,
    "max_running_requests": 2,
    "mem_fraction_static": 0.92,
    "kv_cache_dtype": "fp8_e4m3",
    "page_size": 1,
    "max_mamba_cache_size": 6,
    "enable_hierarchical_cache": True,
    "hicache_size": 12,
    "hicache_write_policy": "write_through",
    "hicache_io_backend": "direct",
    "reasoning_parser": "qwen3",
    "tool_call_parser": "qwen3_coder",
}


def active_params(config: dict[str, Any]) -> set[str]:
    """Which conditional parameters of autotune/data/search_spaces/sglang.yaml are active, restated
    independently of the space's own condition code."""
    active = set()
    if config["enable_hierarchical_cache"]:
        active.update(HICACHE)
        if config["hicache_ratio"] is None:  # sized in GB when not by a ratio
            active.add("hicache_size")
    if config["cuda_graph_max_bs_decode"] is None:  # a list, or a largest size
        active.add("cuda_graph_bs_decode")
    if "triton" in (config["attention_backend"], config["decode_attention_backend"]):
        active.add("triton_attention_num_kv_splits")
    algo = config["speculative_algorithm"]
    if algo in ("NGRAM", "NEXTN"):
        active.add("speculative_num_steps")
    if algo == "NEXTN":
        active.add("speculative_eagle_topk")
    if algo in ("NGRAM", "DFLASH") or (algo == "NEXTN" and config["speculative_eagle_topk"] > 1):
        active.add("speculative_num_draft_tokens")
    return active


def assert_conditions(config: dict[str, Any], space: SearchSpace) -> None:
    active = active_params(config)
    for name in CONDITIONAL:
        if name not in active:
            assert config[name] is None, (name, config)
        elif name in space.parameters:  # active: a value of its domain (None only if listed)
            assert space.parameters[name].contains(config[name]), (name, config)


def test_defaults_are_the_engine_baseline(sglang_space: SearchSpace) -> None:
    base = sglang_space.defaults()
    assert base["speculative_algorithm"] is None  # no speculation: no flag
    assert base["enable_hierarchical_cache"] is False
    assert all(base[n] is None for n in HICACHE)
    assert base["mem_fraction_static"] is None and base["page_size"] is None
    assert base["reasoning_parser"] == "qwen3" and base["context_length"] == 131072
    assert set(base) == set(sglang_space.parameters) | set(sglang_space.fixed)
    sglang_space.validate_config(base)


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_suggest_with_a_real_study(sglang_space: SearchSpace, sampler: str) -> None:
    n = 200 if sampler == "random" else 80
    s = (
        optuna.samplers.RandomSampler(seed=1)
        if sampler == "random"
        else optuna.samplers.TPESampler(seed=1, n_startup_trials=10)
    )
    study = optuna.create_study(sampler=s, direction="maximize")
    seen: dict[str, set[Any]] = {"algo": set(), "hicache": set(), "mfs": set()}
    for _ in range(n):
        trial = study.ask()
        config = sglang_space.suggest(trial)
        sglang_space.validate_config(config)
        assert_conditions(config, sglang_space)
        # Inactive parameters were never handed to Optuna.
        unconditional = set(sglang_space.parameters) - set(CONDITIONAL)
        assert set(trial.params) == unconditional | active_params(config)
        assert config["context_length"] == 131072
        seen["algo"].add(config["speculative_algorithm"])
        seen["hicache"].add(config["enable_hierarchical_cache"])
        seen["mfs"].add(config["mem_fraction_static"])
        study.tell(trial, float(config["page_size"]) + config["mem_fraction_static"])
    assert seen["hicache"] == {False, True}
    if sampler == "random":
        assert seen["algo"] == {None, "NGRAM", "NEXTN", "DFLASH"}
    # Stepped floats come back clean (optuna alone gives 0.8300000000000001).
    assert all(round(v, 2) == v and 0.80 <= v <= 0.94 for v in seen["mfs"])


def test_enqueued_known_good_config_is_suggested_back(sglang_space: SearchSpace) -> None:
    study = optuna.create_study()
    params = sglang_space.trial_params(K1)
    assert "context_length" not in params and "speculative_num_steps" not in params
    assert params["speculative_algorithm"] is None  # a real choice: no speculation
    assert "chunked_prefill_size" not in params  # unset in K1: left to the sampler
    study.enqueue_trial(params)
    config = sglang_space.suggest(study.ask())
    for key, value in K1.items():
        assert config[key] == value, key
    assert_conditions(config, sglang_space)


def test_ask_with_fixed_distributions_then_resolve(sglang_space: SearchSpace) -> None:
    dists = sglang_space.distributions()
    assert set(dists) == set(sglang_space.parameters)
    assert isinstance(
        dists["enable_hierarchical_cache"], optuna.distributions.CategoricalDistribution
    )
    assert dists["mem_fraction_static"].step == pytest.approx(0.01)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(50):
        trial = study.ask(fixed_distributions=dists)
        assert set(trial.params) == set(dists)  # every parameter sampled, conditions ignored
        config = sglang_space.resolve(trial.params)
        assert_conditions(config, sglang_space)
        sglang_space.validate_config(config)


def test_full_grid_size_matches_an_independent_count(sglang_space: SearchSpace) -> None:
    # off, or (4 ratios | no ratio x 8 sizes) x policy x io x layout
    hicache = 1 + (4 + 8) * 3 * 2 * 3
    spec = 1 + 6 * 7 + 6 * (1 + 2 * 7) + 7  # none, NGRAM, NEXTN (topk 1 | 2,4 x draft), DFLASH
    graphs = 4 + 5  # a largest size (4 of them), or none and a list (null or 4 lists)
    # attention x decode backend, with 5 split counts where either one is triton
    with_triton = 5 + 6
    attention = with_triton * 5 + (7 * 5 - with_triton)
    memory = 15 * 3 * 4 * 10 * 6 * 3 * 3  # mfs, page, chunk, mamba slots, mrr, kv, ssm dtype
    scheduling = 5 * 4 * 2 * 2 * 4 * 2  # policy, conservativeness, overlap, mixed, prefill, sleep
    kernels = 5 * 4  # prefill backend, linear-attention backend
    expected = memory * scheduling * kernels * hicache * spec * graphs * attention * 4
    assert sglang_space.size() == expected
    with pytest.raises(ConfigError, match=f"the grid has {expected} configurations"):
        next(sglang_space.grid(max_points=10_000))


def test_narrowed_grid_enumerates_every_valid_config(sglang_space: SearchSpace) -> None:
    space = sglang_space.with_overrides(
        {
            "mem_fraction_static": {"low": 0.88, "high": 0.92},
            "max_mamba_cache_size": {"choices": [6, 12]},
            "max_running_requests": {"choices": [2, 4]},
            "chunked_prefill_size": 4096,
            "kv_cache_dtype": "fp8_e4m3",
            "page_size": {"choices": [1, 64]},
            "hicache_write_policy": "write_through",
            "hicache_mem_layout": None,
            "hicache_size": {"grid": [8, 16]},
            "speculative_algorithm": {"choices": [None, "NGRAM", "NEXTN"]},
            "speculative_num_steps": {"low": 2, "high": 3},
            "speculative_eagle_topk": {"choices": [1, 2]},
            "speculative_num_draft_tokens": {"grid": [4, 6]},
            "cuda_graph_max_bs_decode": None,
            "cuda_graph_bs_decode": None,
            "mamba_radix_cache_strategy": None,
            "hicache_ratio": None,
            **{
                name: None
                for name in (
                    "mamba_ssm_dtype",
                    "attention_backend",
                    "prefill_attention_backend",
                    "decode_attention_backend",
                    "linear_attn_backend",
                    "schedule_policy",
                    "schedule_conservativeness",
                    "max_prefill_tokens",
                )
            },  # fmt: skip
            **{
                n: False
                for n in ("disable_overlap_schedule", "enable_mixed_chunk", "sleep_on_idle")
            },
        }
    )
    # mfs 5 x mamba 2 x mrr 2 x page 2 x hicache (1 + 2 sizes x 2 io) x spec (1 + NGRAM 2x2
    # + NEXTN 2 x (topk 1 + topk 2 x 2 drafts))
    expected = 5 * 2 * 2 * 2 * (1 + 2 * 2) * (1 + 4 + 2 * 3)
    assert space.size() == expected >= 800
    points = list(space.grid(max_points=expected))
    assert len(points) == expected
    assert len({tuple(sorted(p.items(), key=lambda kv: kv[0])) for p in points}) == expected
    for config in points:
        space.validate_config(config)
        assert_conditions(config, space)
        assert config["chunked_prefill_size"] == 4096
        policy = config["hicache_write_policy"]
        assert policy == ("write_through" if config["enable_hierarchical_cache"] else None)
    assert {p["mem_fraction_static"] for p in points} == {0.88, 0.89, 0.9, 0.91, 0.92}


def test_continuous_float_cannot_be_enumerated() -> None:
    space = SearchSpace(
        engine="sglang", parameters={"mem_fraction_static": FloatParam(low=0.8, high=0.9)}
    )
    with pytest.raises(ConfigError, match="parameters.mem_fraction_static: continuous float"):
        space.size()
    gridded = space.with_overrides({"mem_fraction_static": {"grid": [0.8, 0.85]}})
    assert [c["mem_fraction_static"] for c in gridded.grid()] == [0.8, 0.85]


def test_validate_config_errors(sglang_space: SearchSpace) -> None:
    bad = dict(K1, page_size=32, speculative_num_steps=3, page_sise=1, context_length=4096)
    with pytest.raises(ConfigError) as info:
        sglang_space.validate_config(bad, source="seeds.yaml")
    msg = str(info.value)
    assert "4 problems" in msg
    assert "seeds.yaml: page_size: 32 is outside the domain one of 1, 16, 64" in msg
    assert "speculative_num_steps: is set to 3 but inactive" in msg
    assert (
        "page_sise: not a parameter or fixed field of this space; did you mean 'page_size'" in msg
    )
    assert "context_length: is fixed to 131072, got 4096" in msg
    with pytest.raises(ConfigError, match="mem_fraction_static: 0.955 is outside"):
        sglang_space.validate_config({"mem_fraction_static": 0.955})
    with pytest.raises(ConfigError, match="enable_hierarchical_cache: 1 is outside"):
        sglang_space.validate_config({"enable_hierarchical_cache": 1})


def test_overrides_fix_narrow_and_add(sglang_space: SearchSpace) -> None:
    space = sglang_space.with_overrides(
        {
            "speculative_algorithm": "NGRAM",
            "page_size": {"choices": [64]},
            "tp_size": 2,
            "attention_backend": {"type": "categorical", "choices": ["flashinfer", "triton"]},
        }
    )
    assert space.fixed["speculative_algorithm"] == "NGRAM"
    assert space.fixed["tp_size"] == 2
    assert "speculative_algorithm" not in space.parameters
    assert space.parameters["attention_backend"].type == "categorical"
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        config = space.suggest(study.ask())
        # conditions read the fixed value: NGRAM makes steps and draft tokens active, topk not
        assert config["speculative_num_steps"] is not None
        assert config["speculative_num_draft_tokens"] is not None
        assert config["speculative_eagle_topk"] is None
        assert config["page_size"] == 64
    assert sglang_space.parameters["page_size"].choices == (1, 16, 64)  # original untouched


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"page_size": 32}, "overrides: page_size: 32 is outside one of 1, 16, 64"),
        ({"page_sise": 1}, "page_sise: unknown parameter; did you mean 'page_size'?"),
        ({"mem_fraction_static": {"low": 0.99}}, "low <= high must hold"),
        ({"hicache_size": {"stepp": 2}}, "parameters.hicache_size.stepp: unknown key"),
        ({"page_size": {"choices": []}}, "parameters.page_size.choices: must list at least 1"),
        ({"tp_size": {"low": 1}}, "tp_size: a new parameter needs `type`"),
        ({"enable_hierarchical_cache": {"default": True, "choices": [1]}}, "choices: unknown"),
    ],
)
def test_bad_overrides(
    sglang_space: SearchSpace, overrides: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        sglang_space.with_overrides(overrides)
    assert expected in str(info.value)


def test_python_construction_and_param_types() -> None:
    space = SearchSpace(
        engine="sglang",
        parameters={
            "page_size": CategoricalParam(choices=(1, 64)),
            "hicache_size": IntParam(low=1, high=64, log=True),
            "mem_fraction_static": FloatParam(low=0.8, high=0.9, step=0.05, default=0.85),
        },
    )
    assert space.defaults()["mem_fraction_static"] == 0.85
    assert space.size() == 2 * 64 * 3
    dists = space.distributions()
    assert dists["hicache_size"].log
    assert SearchSpace.model_validate(space.to_dict()) == space
    with pytest.raises(ValidationError, match="default: 0.87 is outside"):
        SearchSpace(
            engine="sglang",
            parameters={
                "mem_fraction_static": FloatParam(low=0.8, high=0.9, step=0.05, default=0.87)
            },
        )


def test_bool_and_int_values_stay_apart() -> None:
    space = SearchSpace(
        engine="sglang", parameters={"max_running_requests": CategoricalParam(choices=(1, 2))}
    )
    with pytest.raises(ConfigError, match="true is outside"):
        space.validate_config({"max_running_requests": True})
    space.validate_config({"max_running_requests": 1})
    assert not math.isnan(space.size())


def test_json_schema_accepts_the_shorthand_forms() -> None:
    schema = SearchSpace.model_json_schema(by_alias=True)
    assert {"engine", "parameters", "fixed", "rules"} <= set(schema["properties"])
    text = str(schema)
    assert "'in'" in text and "or_null" in text
    assert "IntParam" in schema["$defs"] and "Rule" in schema["$defs"]


def test_import_does_not_load_optuna() -> None:
    code = "import sys, autotune.space; sys.exit('optuna' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_list_choices_round_trip_through_optuna(sglang_space: SearchSpace) -> None:
    """A multi-value flag (--cuda-graph-bs-decode 1 2 4): Optuna stores the list's label, the
    configuration gets the list back, by suggestion, by enqueueing and by resolving."""
    p = sglang_space.parameters["cuda_graph_bs_decode"]
    assert [1, 2, 4] in p.grid_values()
    assert p.to_optuna([1, 2, 4]) == "[1, 2, 4]" and p.from_optuna("[1, 2, 4]") == [1, 2, 4]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen = set()
    for _ in range(40):
        config = sglang_space.suggest(study.ask())
        value = config["cuda_graph_bs_decode"]
        assert value is None or (isinstance(value, list) and p.contains(value))
        seen.add(json.dumps(value))
        study.tell(study.trials[-1].number, 0.0)
    assert len(seen) >= 3
    wanted = dict(sglang_space.defaults(), cuda_graph_bs_decode=[1, 2, 4, 8])
    study.enqueue_trial(sglang_space.trial_params(wanted))
    trial = study.ask()
    assert sglang_space.suggest(trial)["cuda_graph_bs_decode"] == [1, 2, 4, 8]
    assert sglang_space.resolve(trial.params)["cuda_graph_bs_decode"] == [1, 2, 4, 8]
    with pytest.raises(ConfigError, match="outside the domain"):
        sglang_space.validate_config({"cuda_graph_bs_decode": [3, 5]})
