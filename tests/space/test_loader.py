"""Loading search-space YAML: the shipped file, round trips, and error messages that name the
file, the field path, the line and the valid values."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import ConfigError, UnknownNameError
from autotune.space import SearchSpace, builtin_space, dump_space, load_space, parse_space
from autotune.space.loader import SPACES_ENV, builtin_spaces

REPO = Path(__file__).resolve().parents[2]

GOOD = """\
engine: sglang
fixed:
  context_length: 8192
parameters:
  page_size:
    type: categorical
    choices: [1, 16, 64]
  speculative_algorithm:
    type: categorical
    choices: [null, NGRAM]
  speculative_num_steps:
    type: int
    low: 1
    high: 4
    condition: {speculative_algorithm: {ne: null}}
"""


def _error(tmp_path: Path, text: str, name: str = "x.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_space(path)
    msg = str(info.value)
    assert str(path) in msg
    assert "pydantic" not in msg and "Traceback" not in msg
    return msg


def test_builtin_sglang_space_loads(sglang_space: SearchSpace) -> None:
    assert sglang_space.engine == "sglang"
    assert "sglang" in builtin_spaces()
    for name in (
        "page_size", "max_mamba_cache_size", "chunked_prefill_size", "mem_fraction_static",
        "max_running_requests", "kv_cache_dtype", "enable_hierarchical_cache", "hicache_size",
        "hicache_write_policy", "hicache_io_backend", "hicache_mem_layout",
        "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
        "speculative_num_draft_tokens", "cuda_graph_max_bs_decode", "mamba_radix_cache_strategy",
    ):  # fmt: skip
        assert name in sglang_space.parameters
    # FIELD-NOTES P11: the parsers are always set.
    assert sglang_space.fixed["reasoning_parser"] == "qwen3"
    assert sglang_space.fixed["tool_call_parser"] == "qwen3_coder"
    # The host pool is sized by a ratio or, with the ratio unset, by a size: never both.
    assert sglang_space.parameters["hicache_size"].condition == [
        {"enable_hierarchical_cache": True, "hicache_ratio": None}
    ] or sglang_space.parameters["hicache_size"].is_active(
        {"enable_hierarchical_cache": True, "hicache_ratio": None}
    )
    assert not sglang_space.parameters["hicache_size"].is_active(
        {"enable_hierarchical_cache": True, "hicache_ratio": 2.0}
    )
    ids = {r.id for r in sglang_space.rules}
    assert {"P1", "P2", "P6", "nvfp4-blackwell"} <= ids
    assert {f"P{i}" for i in (3, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14)} <= ids


def test_every_shipped_space_loads() -> None:
    files = sorted((REPO / "autotune" / "data" / "search_spaces").glob("*.yaml"))
    assert files
    for path in files:
        assert load_space(path).parameters


def test_round_trip(sglang_space: SearchSpace) -> None:
    again = parse_space(dump_space(sglang_space), source="dumped")
    assert again == sglang_space
    assert again.to_dict() == sglang_space.to_dict()
    assert SearchSpace.model_validate(sglang_space.to_dict()) == sglang_space


def test_misspelled_parameter_names_file_path_line_and_suggestion(tmp_path: Path) -> None:
    msg = _error(tmp_path, GOOD.replace("  page_size:", "  page_sise:"))
    assert "parameters.page_sise: unknown parameter; did you mean 'page_size'?" in msg
    assert "(line 5)" in msg


def test_unknown_key_lists_valid_keys(tmp_path: Path) -> None:
    msg = _error(tmp_path, GOOD.replace("    high: 4", "    hihg: 4\n    high: 4"))
    assert "parameters.speculative_num_steps.hihg: unknown key; did you mean 'high'?" in msg
    assert "valid:" in msg and "low" in msg
    msg = _error(tmp_path, GOOD.replace("fixed:", "fixd:"))
    assert "fixd: unknown key; did you mean 'fixed'?" in msg


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    msg = _error(tmp_path, GOOD.replace("    choices: [1, 16, 64]", "    choices: [1, 16, 64"))
    assert "YAML syntax error" in msg
    assert "line 8, column 24" in msg


def test_duplicate_key_is_an_error(tmp_path: Path) -> None:
    text = GOOD + "  page_size:\n    type: categorical\n    choices: [1]\n"
    msg = _error(tmp_path, text)
    assert "'page_size' appears twice (first on line 5)" in msg
    assert "line 16" in msg


def test_bad_condition_reference(tmp_path: Path) -> None:
    msg = _error(tmp_path, GOOD.replace("{speculative_algorithm: {ne", "{speculative_algo: {ne"))
    assert "parameters.speculative_num_steps.condition.speculative_algo: unknown parameter" in msg
    assert "did you mean 'speculative_algorithm'?" in msg


def test_condition_value_must_be_a_choice_of_the_parent(tmp_path: Path) -> None:
    # `none` is the string "none", not null: a classic slip.
    msg = _error(tmp_path, GOOD.replace("{ne: null}", "{ne: none}"))
    assert '"none" is never a value of speculative_algorithm' in msg
    assert "null" in msg and '"NGRAM"' in msg


def test_condition_cycle(tmp_path: Path) -> None:
    text = GOOD.replace(
        "    choices: [null, NGRAM]",
        "    choices: [null, NGRAM]\n    condition: {speculative_num_steps: {gte: 1}}",
    )
    msg = _error(tmp_path, text)
    assert "cycle" in msg and "speculative_algorithm" in msg


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("    low: 1\n    high: 4", "    low: 5\n    high: 4", "low <= high must hold"),
        ("choices: [1, 16, 64]", "choices: []", "page_size.choices: must list at least 1"),
        ("choices: [1, 16, 64]", "choices: [1, 16, 1]", "parameters.page_size.choices[2]: 1 is"),
        ("choices: [1, 16, 64]", "choices: [1, 16]\n    default: 64", "default: 64 is outside"),
        ("    type: int", "    type: integer", "'integer' is not a parameter type; did you mean"),
        ("    type: int", "    typ: int", "speculative_num_steps.type: missing; valid: int"),
        ("    high: 4", "    high: 4\n    step: 2", "high - low must be a multiple of step 2"),
        ("    high: 4", "    high: 4\n    log: true\n    step: 3", "parameters.speculative_num"),
        ("    low: 1\n", "    low: one\n", "speculative_num_steps.low: Input should be a valid"),
        ("engine: sglang", "engine: sglong", "engine: unknown engine 'sglong'; did you mean"),
        ("  context_length:", "  context_len:", "fixed.context_len: unknown field"),
        ("8192", "{a: 1}", "fixed.context_length: must be a string, number, true/false, null"),
        ("[1, 16, 64]", "[1, [[16]]]", "page_size.choices[1]: must be a string, number, true/f"),
    ],
)
def test_invalid_fields(tmp_path: Path, old: str, new: str, expected: str) -> None:
    assert old in GOOD
    assert expected in _error(tmp_path, GOOD.replace(old, new))


def test_fixed_list_values_for_nargs_flags(tmp_path: Path) -> None:
    space = load_space_text(
        tmp_path, GOOD.replace("8192", "8192\n  cuda_graph_bs_decode: [1, 2, 4]")
    )
    assert space.defaults()["cuda_graph_bs_decode"] == [1, 2, 4]


def test_float_step_must_divide_the_range(tmp_path: Path) -> None:
    text = GOOD + (
        "  mem_fraction_static:\n    type: float\n    low: 0.8\n    high: 0.95\n    step: 0.04\n"
    )
    assert "parameters.mem_fraction_static.high: high - low must be a multiple" in _error(
        tmp_path, text
    )


def test_several_problems_are_all_reported(tmp_path: Path) -> None:
    text = GOOD.replace("  page_size:", "  page_sise:").replace("context_length", "ctx_length")
    msg = _error(tmp_path, text)
    assert "2 problems" in msg
    assert "parameters.page_sise" in msg and "fixed.ctx_length" in msg


RULES = """
rules:
  - id: P1
    source: FIELD-NOTES P1
    reason: page 1
    when: {model.hybrid: true, engine.version: {lte: "0.5.17"}}
    require: {page_size: {in: [null, 1]}}
"""


def test_rules_are_validated(tmp_path: Path) -> None:
    assert load_space_text(tmp_path, GOOD + RULES).rules[0].id == "P1"
    msg = _error(tmp_path, GOOD + RULES.replace("model.hybrid", "model.hybird"))
    assert "rules[0].when.model.hybird: unknown context fact; did you mean 'model.hybrid'" in msg
    msg = _error(tmp_path, GOOD + RULES.replace('"0.5.17"', "latest"))
    assert "rules[0].when.engine.version: 'latest' is not a version number" in msg
    msg = _error(tmp_path, GOOD + RULES.replace("{page_size:", "{pagesize:"))
    assert "rules[0].require.pagesize: unknown field; did you mean 'page_size'" in msg
    msg = _error(tmp_path, GOOD + RULES.replace("    require: {page_size: {in: [null, 1]}}\n", ""))
    assert "a constraint rule needs `require`" in msg
    msg = _error(tmp_path, GOOD + RULES + RULES.replace("rules:\n", ""))
    assert "rules[1].id: rule id 'P1' is used twice" in msg
    msg = _error(tmp_path, GOOD + RULES.replace("{in: [null, 1]}", "{inn: [null, 1]}"))
    assert "rules[0].require.page_size.inn: unknown key; did you mean 'in'?" in msg


def load_space_text(tmp_path: Path, text: str) -> SearchSpace:
    path = tmp_path / "ok.yaml"
    path.write_text(text)
    return load_space(path)


def test_not_a_mapping_empty_and_missing_files(tmp_path: Path) -> None:
    assert "got an empty file" in _error(tmp_path, "")
    assert "got a list" in _error(tmp_path, "- 1\n- 2\n")
    with pytest.raises(ConfigError, match="no such search-space file"):
        load_space(tmp_path / "absent.yaml")


def test_builtin_space_lookup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'sglang'"):
        builtin_space("sglan")
    (tmp_path / "mine.yaml").write_text(GOOD)
    monkeypatch.setenv(SPACES_ENV, str(tmp_path))
    assert builtin_spaces() == ["mine"]
    assert builtin_space("mine").fixed == {"context_length": 8192}
