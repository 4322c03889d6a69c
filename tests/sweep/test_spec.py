from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
import yaml

from autotune.errors import ConfigError
from autotune.sweep.spec import default_direction, load_spec, parse_spec, until_deadline
from tests.sweep.conftest import DROP, make_spec, write_spec

ROOT = Path(__file__).resolve().parents[2]


def test_valid_spec_loads_with_defaults(tmp_path: Path) -> None:
    spec, text = load_spec(write_spec(tmp_path, make_spec()))
    assert spec.name == "t" and spec.simulated
    assert spec.objective_refs()[0].direction == "maximize"
    assert "throughput" in text


def test_unknown_field_names_file_field_and_suggestion(tmp_path: Path) -> None:
    path = write_spec(tmp_path, make_spec(**{"budget.max_trails": 3}))
    with pytest.raises(ConfigError) as err:
        load_spec(path)
    msg = str(err.value)
    assert str(path) in msg and "budget.max_trails" in msg and "max_trials" in msg


def test_missing_target_model_is_reported() -> None:
    with pytest.raises(ConfigError, match=r"target\.model: required field is missing"):
        parse_spec(make_spec(**{"target.model": DROP}), source="s.yaml")


def test_bad_literal_lists_valid_values() -> None:
    with pytest.raises(ConfigError, match=r"search\.sampler.*'tpe', 'random' or 'grid'"):
        parse_spec(make_spec(**{"search.sampler": "bayes"}))


def test_scenario_errors_name_their_index() -> None:
    bad = make_spec()
    bad["workload"]["scenarios"][1]["concurency"] = 3
    with pytest.raises(ConfigError, match=r"workload.scenarios\[1\].*concurency.*concurrency"):
        parse_spec(bad, source="s.yaml")


def test_objective_must_name_a_scenario_and_a_figure() -> None:
    with pytest.raises(ConfigError, match=r"objective.metric.*names no scenario.*'tp'"):
        parse_spec(make_spec(**{"objective.metric": "tpx.output_tok_s"}))
    with pytest.raises(ConfigError, match=r"unknown figure 'output_toks'.*output_tok_s"):
        parse_spec(make_spec(**{"objective.metric": "tp.output_toks"}))
    ok = parse_spec(
        make_spec(**{"objective.constraints": [{"metric": "tp.ttft_p95_s", "max": 2}]})
    )
    assert ok.objective.constraints[0].max == 2


def test_simulated_needs_a_named_gpu_and_until_format() -> None:
    with pytest.raises(ConfigError, match="target.gpu.*named GPU"):
        parse_spec(make_spec(**{"target.gpu": "auto"}))
    with pytest.raises(ConfigError, match=r"budget.until.*HH:MM"):
        parse_spec(make_spec(**{"budget.until": "7am"}))


def test_duplicate_scenario_names_rejected() -> None:
    spec = make_spec()
    spec["workload"]["scenarios"][1]["name"] = "probe"
    with pytest.raises(ConfigError, match="two scenarios are called 'probe'"):
        parse_spec(spec)


def test_until_is_the_next_occurrence() -> None:
    now = datetime(2026, 1, 1, 23, 30).astimezone()
    at = until_deadline("07:00", now)
    assert (at.day, at.hour, at.minute) == (2, 7, 0)
    at = until_deadline("23:45", now)
    assert (at.day, at.hour, at.minute) == (1, 23, 45)


def test_directions_inferred_for_multi_objective() -> None:
    assert default_direction("tp.ttft_p95_s") == "minimize"
    assert default_direction("tp.output_tok_s") == "maximize"
    assert default_direction("launch.kv_pool_tokens") == "maximize"
    spec = parse_spec(
        make_spec(
            **{
                "objective.multi": [
                    {"metric": "tp.output_tok_s"},
                    {"metric": "tp.ttft_p95_s"},
                    {"metric": "launch.kv_pool_tokens"},
                ]
            }
        )
    )
    assert [r.direction for r in spec.objective_refs()] == ["maximize", "minimize", "maximize"]


def test_relative_space_file_resolves_against_the_spec(tmp_path: Path) -> None:
    (tmp_path / "spaces").mkdir()
    spec, _ = load_spec(write_spec(tmp_path, make_spec(**{"space.file": "spaces/x.yaml"})))
    assert spec.space.file == str((tmp_path / "spaces" / "x.yaml").resolve())


def test_demo_spec_is_shipped_verbatim() -> None:
    from autotune.cli.demo import DEMO_SPEC

    assert (ROOT / "examples" / "demo.yaml").read_text() == DEMO_SPEC
    spec = parse_spec(yaml.safe_load(DEMO_SPEC), source="demo")
    assert spec.target.model == "qwen3.8-27b-awq-int4"
    assert spec.target.gpu == "rtx-4080-super-32g" and spec.target.engine_version == "0.5.17"
    assert spec.execution.workers == 2 and spec.budget.max_trials >= 40


def test_fixed_port_needs_one_worker() -> None:
    """Issue 19.6: a fixed engine.port with more than one worker collides by construction."""
    with pytest.raises(ConfigError, match=r"engine.port.*8000.*execution.workers is 2"):
        parse_spec(make_spec(**{"engine.port": 8000, "execution.workers": 2}))
    # unset workers: the simulator runs two slots, and two GPU groups run two engines
    with pytest.raises(ConfigError, match=r"engine.port.*execution.workers is unset"):
        parse_spec(make_spec(**{"engine.port": 8000, "execution.workers": DROP}))
    no_sim = make_spec(**{"engine.port": 8000, "execution.workers": DROP, "target.gpus": 4})
    no_sim.pop("simulate")
    with pytest.raises(ConfigError, match=r"unset \(4 GPU groups\)"):
        parse_spec(no_sim)
    assert parse_spec(make_spec(**{"engine.port": 8000})).engine.port == 8000  # workers: 1


@pytest.mark.parametrize(
    ("changes", "field", "says"),
    [
        # a flag the release lacks (SGLang added --linear-attn-backend in 0.5.10)
        (
            {
                "target.engine_version": "0.5.9",
                "space.overrides": {},
                "space.fixed": {"linear_attn_backend": "triton"},
            },
            "space.fixed.linear_attn_backend",
            "0.5.10",
        ),
        # fields the launcher sets
        ({"space.fixed": {"port": 30001}}, "space.fixed.port", "launcher"),
        ({"space.fixed": {"model_path": "/m"}}, "space.fixed.model_path", "launcher"),
        # a value of the wrong type, fixed or offered as a choice or a bound
        ({"space.fixed": {"context_length": "lots"}}, "space.fixed.context_length", "integer"),
        (
            {"space.overrides": {"page_size": {"choices": [1, "abc"]}}},
            "space.overrides.page_size.choices[1]",
            "integer",
        ),
        (
            {"space.overrides": {"attention_backend": "no-such-kernel"}},
            "space.overrides.attention_backend",
            "no-such-kernel",
        ),
        # the same parameter fixed and searched
        (
            {
                "space.overrides": {"page_size": {"choices": [1, 64]}},
                "space.fixed": {"page_size": 16},
            },
            "space.fixed.page_size",
            "both",
        ),
        # a release the adapter does not know, named as the spec's field (not a CLI flag)
        ({"target.engine_version": "0.5.99"}, "target.engine_version", "0.5.23"),
        # a --compilation-config key the vLLM release's CompilationConfig lacks
        (
            {
                "target.engine": "vllm",
                "target.engine_version": "0.20.0",
                "space.overrides": {},
                "space.fixed": {"compilation_config": '{"cudagraph_mod": "FULL"}'},
            },
            "space.fixed.compilation_config",
            "did you mean 'cudagraph_mode'",
        ),
    ],
)
def test_values_no_trial_could_launch_stop_the_spec(
    tmp_path: Path, changes: dict[str, object], field: str, says: str
) -> None:
    path = write_spec(tmp_path, make_spec(**changes))
    with pytest.raises(ConfigError) as err:
        load_spec(path)
    assert err.value.field == field and err.value.source == str(path)
    assert says in str(err.value) and "--engine-version" not in str(err.value)
    assert "(line " in str(err.value)


def test_values_the_release_or_the_search_can_complete_pass() -> None:
    # a choice only some releases take is narrowed per target, not refused; a field that needs
    # a companion the search may set passes; null leaves it to the engine
    parse_spec(
        make_spec(
            **{
                "target.engine_version": "0.5.9",
                "space.overrides": {"linear_attn_backend": {"choices": [None, "triton"]}},
                "space.fixed": {"hicache_file_storage_dir": "/tmp/hc", "page_size": None},
            }
        )
    )


def test_a_name_is_bounded_like_the_service_paths_that_carry_it() -> None:
    # reports/NAME, the service's NAME.yaml and /sweeps/NAME all hold it (helper check: a
    # 300-character name was a 500 error, a 240-character one a job the API could not reach)
    from autotune.service.routes.deps import SweepName
    from autotune.sweep.spec_models import NAME_MAX

    parse_spec(make_spec(name="n" * NAME_MAX))
    with pytest.raises(ConfigError, match=r"^spec: name: .*at most 200"):
        parse_spec(make_spec(name="n" * (NAME_MAX + 1)), source="spec")
    (path,) = SweepName.__metadata__
    assert [getattr(m, "max_length", None) for m in path.metadata][1] == NAME_MAX


@pytest.mark.parametrize(
    ("changes", "field", "says"),
    [
        (
            {"objective.constraints": [{"metric": "throughput.ttft_p95_s", "min": 5, "max": 1}]},
            "objective.constraints[0]",
            "min 5 is above max 1",
        ),
        ({"budget.max_trials": True}, "budget.max_trials", "integer"),
        ({"budget.max_trials": 10**6}, "budget.max_trials", "100000"),
    ],
)
def test_contradictions_are_refused(changes: dict[str, object], field: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_spec(make_spec(**changes))
    assert err.value.field == field and says in str(err.value)


def test_an_unknown_override_is_named_with_the_spec_file_and_a_suggestion(tmp_path: Path) -> None:
    path = write_spec(tmp_path, make_spec(**{"space.overrides": {"chunked_prefil_size": 4096}}))
    with pytest.raises(ConfigError) as err:
        load_spec(path)
    assert (
        err.value.source == str(path) and err.value.field == "space.overrides.chunked_prefil_size"
    )
    assert "did you mean 'chunked_prefill_size'" in str(err.value)


def test_reading_a_llama_spec_looks_for_no_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    # a broken $AUTOTUNE_LLAMA_SERVER is the launch's business, not the release's
    from autotune.sweep.narrowing import flag_adapter

    flag_adapter.cache_clear()
    monkeypatch.setenv("AUTOTUNE_LLAMA_SERVER", "/nonexistent/llama-server")
    root = Path(__file__).resolve().parents[2]
    spec, _ = load_spec(root / "examples" / "llamacpp-cpu.yaml")
    assert spec.target.engine == "llamacpp"
