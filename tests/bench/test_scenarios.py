"""Scenario models: the compact CLI syntax, dicts and YAML files, and their error messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.bench.scenarios import (
    AgentScenario,
    DecodeScenario,
    LongContextScenario,
    PrefillScenario,
    ThroughputScenario,
    load_scenarios_file,
    parse_scenario,
    scenario_from_dict,
)
from autotune.errors import ConfigError


def test_compact_syntax() -> None:
    s = parse_scenario("throughput:concurrency=8,output_len=256")
    assert isinstance(s, ThroughputScenario)
    assert (s.concurrency, s.output_len, s.request_cap) == (8, 256, 32)
    p = parse_scenario("prefill:prompt_lens=512/2048/8192,repeats=3,endpoint=completions")
    assert isinstance(p, PrefillScenario)
    assert p.prompt_lens == [512, 2048, 8192] and p.repeats == 3 and p.output_len == 1
    assert p.endpoint == "completions"
    d = parse_scenario("decode:model=Qwen/Qwen3.8-27B,text=code,ignore_eos=false")
    assert isinstance(d, DecodeScenario)
    assert d.model == "Qwen/Qwen3.8-27B" and d.text == "code" and d.ignore_eos is False
    assert isinstance(parse_scenario("agent"), AgentScenario)
    lc = parse_scenario("long_context:prompt_len=65536")
    assert isinstance(lc, LongContextScenario) and lc.prompt_lens == [65536]


def test_defaults_per_kind() -> None:
    assert DecodeScenario().concurrency == 1
    assert ThroughputScenario(duration_s=30).request_cap is None
    assert ThroughputScenario(num_requests=5).request_cap == 5
    assert AgentScenario(concurrency=3).num_sessions == 3
    assert AgentScenario(concurrency=3, sessions=9).num_sessions == 9
    assert PrefillScenario(name="pp").label == "pp" and PrefillScenario().label == "prefill"


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("thruput", "did you mean 'throughput'"),
        ("throughput:concurency=8", "did you mean 'concurrency'"),
        ("decode:output_len=many", "output_len"),
        ("decode:output_len", "expected key=value"),
        ("decode:seed=1,seed=2", "given twice"),
        ("prefill:prompt_lens=0", "greater than or equal to 1"),
        ("decode:endpoint=grpc", "endpoint"),
        ("decode:text=poetry", "text"),
        ("throughput:extra_body=x", "--scenarios-file"),
        ("prefill:prompt_len=5,prompt_lens=6", "not both"),
        ("decode:max_error_rate=2", "max_error_rate"),
    ],
)
def test_compact_syntax_errors_name_the_flag(spec: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_scenario(spec)
    assert needle in str(info.value)
    assert "--scenario" in str(info.value)


def test_from_dict_round_trip() -> None:
    s = ThroughputScenario(concurrency=4, duration_s=10, extra_body={"top_k": 1})
    again = scenario_from_dict(s.model_dump(mode="json"))
    assert again == s
    with pytest.raises(ConfigError, match="expected a mapping"):
        scenario_from_dict(["decode"], source="spec.yaml")


def test_yaml_file(tmp_path: Path) -> None:
    f = tmp_path / "bench.yaml"
    f.write_text(
        """
scenarios:
  - kind: prefill
    prompt_lens: [512, 4096]
  - kind: agent
    turns: 3
    concurrency: 2
    extra_body: {top_k: 1}
"""
    )
    loaded = load_scenarios_file(f)
    assert [s.kind for s in loaded] == ["prefill", "agent"]
    assert isinstance(loaded[1], AgentScenario) and loaded[1].extra_body == {"top_k": 1}
    plain = tmp_path / "list.yaml"
    plain.write_text("- kind: decode\n  output_len: 64\n")
    assert load_scenarios_file(plain)[0].output_len == 64


def test_yaml_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_scenarios_file(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- kind: decode\n  output_len: [\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_scenarios_file(bad)
    empty = tmp_path / "empty.yaml"
    empty.write_text("{}\n")
    with pytest.raises(ConfigError, match="non-empty list"):
        load_scenarios_file(empty)
    typo = tmp_path / "typo.yaml"
    typo.write_text("- kind: decode\n- kind: throughput\n  concurrancy: 4\n")
    with pytest.raises(ConfigError) as info:
        load_scenarios_file(typo)
    assert "scenarios[1]" in str(info.value) and "concurrency" in str(info.value)
    assert str(typo) in str(info.value)
