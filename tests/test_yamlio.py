"""The one strict YAML reader (autotune/yamlio.py) and the sweep-spec errors built on it: duplicate
keys and aliases refused, the line of the field at fault in every error, bounded excerpts."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.sweep.spec import load_spec
from autotune.yamlio import EXCERPT, line_of, load_yaml

DEMO = (Path(__file__).resolve().parents[1] / "examples" / "demo.yaml").read_text()


def test_duplicate_key_names_both_lines() -> None:
    with pytest.raises(ConfigError, match=r"line 4.*'budget' appears twice \(first on line 2\)"):
        load_yaml(
            "name: x\nbudget: {max_trials: 3}\nseed: 1\nbudget: {max_trials: 4}\n", source="s"
        )


@pytest.mark.parametrize("text", ["a: &x [1, 2]\nb: 3\n", "a: [1]\nb: *x\n"])
def test_anchors_and_aliases_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="are not accepted"):
        load_yaml(text, source="s")


def test_a_billion_laughs_is_refused_small_and_fast() -> None:
    """Nested aliases would expand a 2 KB spec into gigabytes: refused at the first anchor,
    and the message stays short."""
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 9):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [{', '.join(['*' + prev] * 9)}]")
    with pytest.raises(ConfigError) as exc:
        load_yaml("\n".join(lines), source="bomb.yaml")
    assert len(str(exc.value)) < 400


def test_line_of_follows_keys_and_indexes() -> None:
    text = "a:\n  b:\n    - x: 1\n    - x: 2\n      y: 3\n"
    assert line_of(text, ["a", "b", 1, "y"]) == 5
    assert line_of(text, ["a", "b", 0]) == 3
    assert line_of(text, ["a", "missing"]) == 1  # the deepest part that exists
    assert line_of(text, ["nope"]) is None


def _spec(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(text)
    return p


def test_spec_errors_carry_the_line(tmp_path: Path) -> None:
    # a value the model refuses
    bad = DEMO.replace("  time_scale: 10", "  time_scale: -10")
    line = DEMO.splitlines().index("  time_scale: 10") + 1
    with pytest.raises(ConfigError, match=rf"simulate\.time_scale.*\(line {line}\)"):
        load_spec(_spec(tmp_path, bad))
    # a cross-field check (unknown engine) names its field and line
    bad = DEMO.replace("  engine: sglang", "  engine: sglangg")
    line = DEMO.splitlines().index("  engine: sglang") + 1
    with pytest.raises(ConfigError, match=rf"target\.engine: unknown engine.*\(line {line}\)"):
        load_spec(_spec(tmp_path, bad))
    # a key given twice
    with pytest.raises(ConfigError, match="'name' appears twice"):
        load_spec(_spec(tmp_path, DEMO + "\nname: again\n"))


def test_spec_errors_quote_bounded_excerpts(tmp_path: Path) -> None:
    huge = "x" * 100_000
    bad = DEMO.replace("  time_scale: 10", f"  time_scale: {huge}")
    with pytest.raises(ConfigError) as exc:
        load_spec(_spec(tmp_path, bad))
    assert len(str(exc.value)) < 4 * EXCERPT + 200


def test_non_utf8_spec_is_a_clear_error(tmp_path: Path) -> None:
    p = tmp_path / "latin1.yaml"
    p.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_spec(p)
