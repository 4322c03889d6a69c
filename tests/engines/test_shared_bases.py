"""The shared bases the SGLang and vLLM flag builders and log formatters stand on: the flag table's
lookups and messages, the one emission loop, the traceback and the failure-text table."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from autotune.engines._flags import CatalogFlag, FlagTable, emit_fields
from autotune.engines._logformat import failure_text, traceback_lines
from autotune.errors import ConfigError, UnknownNameError, UnsupportedFlagError

_SPECS = {
    "--alpha": (CatalogFlag("--alpha", 0, 1, "v", False, "alpha"),),
    "--beta": (CatalogFlag("--beta", 1, 3, "b", False, "beta"),),
    "--no-beta": (CatalogFlag("--no-beta", 1, 3, "b", False, "beta"),),
    "--gamma": (CatalogFlag("--gamma", 0, 3, "v", False, "alpha"),),
}
TABLE: FlagTable[CatalogFlag] = FlagTable(
    engine="Toy",
    releases="releases",
    release_name="1.{}".format,
    load=lambda: _SPECS,
    fields={"alpha": None, "delta": None},
    aliases={"a": "alpha"},
    reserved={"host": "host"},
    what="Toy config field",
    negated_names=False,
)


def test_table_lookups() -> None:
    assert TABLE.spec("--beta", 2) == _SPECS["--beta"][0]
    assert TABLE.spec("--beta", 0) is None
    assert TABLE.names(0) == {"--alpha", "--gamma"}
    assert TABLE.known == ("a", "alpha", "beta", "delta", "gamma")
    assert TABLE.canonical("a") == "alpha" and TABLE.canonical("gamma") == "gamma"
    with pytest.raises(UnknownNameError):
        TABLE.canonical("host")
    assert TABLE.resolve("a", "alpha", [(0, 3, "--alpha")], 1) == ("--alpha", _SPECS["--alpha"][0])


def test_table_messages() -> None:
    assert TABLE.ranges_text([(2, 3), (0, 0), (1, 1)]) == "1.0-1.3"
    assert TABLE.ranges_text([(0, 0), (2, 3)]) == "1.0, 1.2-1.3"
    assert TABLE.ranges_text([]) == "none"
    with pytest.raises(
        UnsupportedFlagError, match=r"'a \(= alpha\)' is not supported by Toy 1.3; "
    ):
        TABLE.resolve("a", "alpha", [(0, 3, "--alpha")], 3)
    err = TABLE.unsupported("'x' (ENV)", 0, [(2, 3)])
    assert (
        str(err)
        == "config field 'x' (ENV) is not supported by Toy 1.0; releases that have it: 1.2-1.3"
    )


@dataclass
class _Emitter:
    calls: list[str]

    def env(self, key: str, canonical: str, value: object) -> tuple[str, str] | None:
        self.calls.append(f"env {key}")
        return ("DELTA", str(value)) if canonical == "delta" else None

    def flag(self, key: str, canonical: str) -> CatalogFlag:
        self.calls.append(f"flag {key}")
        return _SPECS["--" + canonical][0]

    def tokens(self, key: str, canonical: str, spec: CatalogFlag, value: object) -> list[str]:
        self.calls.append(f"tokens {key}")
        return [spec.flag, str(value)]


def test_emit_fields_order_env_and_one_key_per_option() -> None:
    calls: list[str] = []
    fields = {"gamma": ("gamma", 1), "beta": ("beta", None), "delta": ("d", 7), "alpha": ("a", 2)}
    with pytest.raises(ConfigError, match="same engine option"):
        emit_fields(fields, ["alpha", "delta"], _Emitter(calls))
    assert calls == ["env a", "flag a", "tokens a", "env d", "env gamma", "flag gamma"]
    del fields["gamma"]
    assert emit_fields(fields, ["alpha", "delta"], _Emitter([])) == (
        ["--alpha", "2"],
        {"DELTA": "7"},
    )


def test_traceback_and_failure_text() -> None:
    lines = traceback_lines(
        [("/x/a.py", 3, "f", "g()"), ("/x/b.py", 9, "g", "raise E")], "E: a\nb\n"
    )
    assert lines == [
        "Traceback (most recent call last):",
        '  File "/x/a.py", line 3, in f',
        "    g()",
        '  File "/x/b.py", line 9, in g',
        "    raise E",
        "E: a",
        "b",
    ]
    assert failure_text({"oom": 1}, "oom", ["oom", "dead"]) == 1
    with pytest.raises(ConfigError, match="unknown failure kind 'x'; valid: oom, dead"):
        failure_text({"oom": 1}, "x", ["oom", "dead"])
