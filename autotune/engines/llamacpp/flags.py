"""llama-server launch flags by version: config fields -> argv tokens.

Versions are llama-cpp-python sdist versions ("0.3.36"): the sdist pins the llama.cpp commit it
vendors, and scripts/build-llama-server builds llama-server from exactly that source. Two tables
drive everything (no per-flag if-chains):

- `_catalog.CATALOG`: every option llama-server registers in each supported sdist, generated
  from its `common/arg.cpp` (tests/engines/regen_llamacpp_catalog.py); `_catalog.VALUES` holds
  the -ctk/-ctv cache types and --spec-type names of each version.
- `FIELDS` below: the fields autotune tunes, in emission order, with their spellings across
  versions, value types and the checks llama.cpp only does at runtime.

Config field names are llama.cpp's long flags with `_` for `-` (`--ctx-size` -> `ctx_size`,
`--spec-draft-n-max` -> `spec_draft_n_max`); a field not in `FIELDS` follows that rule and is
accepted when the version's catalog has the flag. Changes across versions that matter here:
- 0.3.16: `--flash-attn` is a bare switch (on or off; no auto), `--kv-unified` and `-cb` are bare
  switches, speculation is draft-model only (`--draft-max/--draft-min`, `-md`), `-ngl` is an int.
- 0.3.30+: `--flash-attn on|off|auto`, `--fit on|off` (adjusts unset options to free memory),
  `--spec-type` (ngram-simple, ngram-mod, ... and draft types) with `--spec-draft-n-max/-min`,
  `-ngl` also takes `auto` / `all`; `--draft-max` still parses but is rejected as removed.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from autotune.engines._flags import by_canonical_field, flags_at, mechanical_flag, spec_at
from autotune.errors import ConfigError, UnknownNameError, UnsupportedFlagError
from autotune.versions import try_version

Kind = Literal["v", "2", "b", "n"]
ValueType = Literal["int", "str", "num", "any"]


@functools.cache
def supported_versions() -> tuple[str, ...]:
    from autotune.engines.llamacpp._catalog import VERSIONS

    return tuple(VERSIONS)


def catalog_version(version: str) -> str:
    """The catalogued sdist release `version` names (`v0.3.36` -> `0.3.36`). Parsed by
    autotune.versions (PEP 440); only an exact release counts, since each sdist vendors its own
    llama.cpp commit.

    Raises:
        ConfigError: for any other version, naming --engine-version and the supported ones.
    """
    versions = supported_versions()
    parsed = try_version(version) if isinstance(version, str) else None
    v = str(parsed) if parsed is not None else ""
    if v not in versions:
        raise ConfigError(
            f"unsupported llama-cpp-python version {version!r} for llama-server; supported: "
            f"{', '.join(versions)} (the sdist version scripts/build-llama-server builds)",
            field="--engine-version",
        )
    return v


def version_index(version: str) -> int:
    """Position of a supported llama-cpp-python version in the catalog.

    Raises:
        ConfigError: for any other version, naming --engine-version and the supported ones.
    """
    return supported_versions().index(catalog_version(version))


def llama_cpp_commit(version: str) -> str:
    """The llama.cpp commit (prefix) vendored by a supported sdist version."""
    from autotune.engines.llamacpp._catalog import VERSIONS

    return VERSIONS[catalog_version(version)]


def value_set(version: str, name: Literal["cache_types", "spec_types"]) -> tuple[str, ...]:
    from autotune.engines.llamacpp._catalog import VALUES

    return VALUES[supported_versions()[version_index(version)]][name]


# ---------------------------------------------------------------------------------------------
# The generated catalog


@dataclass(frozen=True)
class OptionSpec:
    """One llama-server option over a range of supported versions (indexes)."""

    flags: tuple[str, ...]
    first: int
    last: int
    kind: Kind
    removed: bool
    neg: tuple[str, ...]
    choices: tuple[str, ...]

    @property
    def flag(self) -> str:
        """A long spelling for messages (the first one)."""
        return next((f for f in self.flags if f.startswith("--")), self.flags[0])

    @property
    def key(self) -> str:
        return self.flags[0]


@functools.cache
def _catalog() -> dict[str, tuple[OptionSpec, ...]]:
    from autotune.engines.llamacpp._catalog import CATALOG

    table: dict[str, list[OptionSpec]] = {}
    for row in CATALOG.splitlines():
        flags, span, kind, neg, choices = row.split("|")
        first, last = (int(x) for x in span.split("-"))
        spec = OptionSpec(
            flags=tuple(flags.split()),
            first=first,
            last=last,
            kind=kind.rstrip("!"),  # type: ignore[arg-type]
            removed=kind.endswith("!"),
            neg=tuple(neg.split()),
            choices=tuple(choices.split()),
        )
        for spelling in (*spec.flags, *spec.neg):
            table.setdefault(spelling, []).append(spec)
    return {k: tuple(v) for k, v in table.items()}


def _spec_at(flag: str, index: int) -> OptionSpec | None:
    return spec_at(_catalog().get(flag, ()), index)


def option_spec(flag: str, version: str) -> OptionSpec | None:
    """How `flag` (any spelling) behaves in `version`, or None when that version lacks it."""
    return _spec_at(flag, version_index(version))


def flag_names(version: str) -> set[str]:
    """Every spelling (short, long, negated) llama-server `version` accepts, removed ones too."""
    return flags_at(_catalog(), version_index(version))


def _versions_text(indexes: set[int]) -> str:
    versions = supported_versions()
    return ", ".join(versions[i] for i in sorted(indexes)) or "none"


# ---------------------------------------------------------------------------------------------
# The fields autotune uses


@dataclass(frozen=True)
class Field:
    """A config field: its flag per version range and the value checks llama.cpp does late.

    flags: (first version, last version, flag) per range; empty = `--field-name` wherever the
        catalog has it.
    aliases: other config names accepted for the same field (older spellings).
    type: what the value must be (int, str, num = int or float, any scalar).
    minimum: smallest valid int (llama.cpp asserts or misbehaves below it).
    words: extra string values an int field takes (`-ngl auto`), from `words_since`.
    values: a `_catalog.VALUES` set the value must belong to.
    """

    flags: tuple[tuple[str, str, str], ...] = ()
    aliases: tuple[str, ...] = ()
    type: ValueType = "any"
    minimum: int | None = None
    words: tuple[str, ...] = ()
    words_since: str = "0.3.16"
    values: Literal["cache_types", "spec_types"] | None = None


_OLD, _NEW = "0.3.16", "0.3.30"
_LAST = "0.3.36"

FIELDS: dict[str, Field] = {
    # capacity and batching
    "parallel": Field(type="int", minimum=1),
    "ctx_size": Field(type="int", minimum=0),
    "batch_size": Field(type="int", minimum=1),
    "ubatch_size": Field(type="int", minimum=1),
    "kv_unified": Field(),
    "cont_batching": Field(),
    "flash_attn": Field(),  # rendered by _render_flash_attn
    "cache_type_k": Field(type="str", values="cache_types"),
    "cache_type_v": Field(type="str", values="cache_types"),
    "cache_reuse": Field(type="int", minimum=0),
    "cache_ram": Field(type="int", minimum=-1),
    "ctx_checkpoints": Field(type="int", minimum=0),
    # placement
    "n_gpu_layers": Field(
        aliases=("gpu_layers",), type="int", minimum=-2, words=("auto", "all"), words_since=_NEW
    ),
    "fit": Field(type="str"),
    "threads": Field(type="int", minimum=-1),
    "threads_batch": Field(type="int", minimum=-1),
    "threads_http": Field(type="int", minimum=-1),
    # speculative decoding
    "spec_type": Field(type="str", values="spec_types"),
    "spec_draft_model": Field(
        flags=((_OLD, _OLD, "--model-draft"), (_NEW, _LAST, "--spec-draft-model")),
        aliases=("model_draft",),
        type="str",
    ),
    "spec_draft_n_max": Field(
        flags=((_OLD, _OLD, "--draft-max"), (_NEW, _LAST, "--spec-draft-n-max")),
        aliases=("draft_max",),
        type="int",
        minimum=0,
    ),
    "spec_draft_n_min": Field(
        flags=((_OLD, _OLD, "--draft-min"), (_NEW, _LAST, "--spec-draft-n-min")),
        aliases=("draft_min",),
        type="int",
        minimum=0,
    ),
    "spec_draft_ngl": Field(
        flags=((_OLD, _OLD, "--gpu-layers-draft"), (_NEW, _LAST, "--spec-draft-ngl")),
        aliases=("gpu_layers_draft", "n_gpu_layers_draft"),
        type="int",
        minimum=-2,
        words=("auto", "all"),
        words_since=_NEW,
    ),
    "spec_ngram_mod_n_min": Field(type="int", minimum=0),
    "spec_ngram_mod_n_max": Field(type="int", minimum=0),
    "spec_ngram_mod_n_match": Field(type="int", minimum=1),
    "spec_ngram_simple_size_n": Field(type="int", minimum=1),
    "spec_ngram_simple_size_m": Field(type="int", minimum=1),
    "spec_ngram_simple_min_hits": Field(type="int", minimum=1),
    # serving
    "metrics": Field(),
    "verbosity": Field(type="int", minimum=0),
    "slots": Field(),
    "warmup": Field(),
    "jinja": Field(),
    "alias": Field(type="str"),
}

ALIASES: dict[str, str] = {a: name for name, f in FIELDS.items() for a in f.aliases}

# Emitted unless the config sets the option (to another value, or false): the tuner scrapes
# /metrics, and 0.3.30+ print the buffer sizes parse_startup reads (model, KV, compute) only at
# verbosity 4 ("trace"); 3 is the default.
DEFAULTS: dict[str, Any] = {"metrics": True, "verbosity": 4}

# Set through build_command's own arguments, never through the config.
RESERVED: dict[str, str] = {"model": "model", "host": "host", "port": "port"}


def _field_name(flag: str) -> str:
    return flag[2:].replace("-", "_")


@functools.cache
def known_fields() -> tuple[str, ...]:
    """Every config field name accepted for some supported version (what a space may name)."""
    names = set(FIELDS) | set(ALIASES)
    for specs in _catalog().values():
        for spec in specs:
            names.update(_field_name(f) for f in spec.flags if f.startswith("--"))
    return tuple(sorted(names - set(RESERVED)))


def canonical_field(name: str) -> str:
    """The table's name for a config key (aliases resolved).

    Raises:
        UnknownNameError: no supported version has the field, with close matches.
    """
    if name in FIELDS:
        return name
    if name in ALIASES:
        return ALIASES[name]
    if name not in RESERVED and name in known_fields():
        return name
    raise UnknownNameError("llama-server config field", name, known_fields())


def _candidates(canonical: str) -> tuple[tuple[int, int, str], ...]:
    field = FIELDS.get(canonical, Field())
    if not field.flags:
        return ((0, len(supported_versions()) - 1, mechanical_flag(canonical)),)
    return tuple((version_index(a), version_index(b), f) for a, b, f in field.flags)


def _resolve(name: str, canonical: str, index: int) -> OptionSpec:
    for first, last, flag in _candidates(canonical):
        if first <= index <= last:
            spec = _spec_at(flag, index)
            if spec is not None and not spec.removed and flag not in spec.neg:
                return spec
    have = {
        i
        for first, last, flag in _candidates(canonical)
        for i in range(first, last + 1)
        if (s := _spec_at(flag, i)) is not None and not s.removed and flag not in s.neg
    }
    shown = name if name == canonical else f"{name} (= {canonical})"
    raise UnsupportedFlagError(
        f"config field {shown!r} is not supported by llama-server from llama-cpp-python "
        f"{supported_versions()[index]}; versions that have it: {_versions_text(have)}"
    )


def field_flag(name: str, version: str) -> str:
    """The flag a config field uses in `version` (aliases resolved).

    Raises:
        UnknownNameError: unknown field.
        UnsupportedFlagError: the version lacks it (names the versions that have it).
    """
    canonical = canonical_field(name)
    index = version_index(version)
    spec = _resolve(name, canonical, index)
    return _emitted(canonical, spec, index)


def _emitted(canonical: str, spec: OptionSpec, index: int) -> str:
    for first, last, flag in _candidates(canonical):
        if first <= index <= last and flag in spec.flags:
            return flag
    return spec.flag


# ---------------------------------------------------------------------------------------------
# Values -> argv


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _scalar(name: str, flag: str, field: Field, value: Any, version: str) -> str:
    index = version_index(version)
    if isinstance(value, str) and value in field.words:
        if index < version_index(field.words_since):
            raise ConfigError(
                f"{flag} {value!r} needs llama-cpp-python >= {field.words_since}; "
                f"{supported_versions()[index]} takes an integer",
                field=name,
            )
        return value
    if field.type == "int":
        if not _is_int(value):
            words = f" or one of {', '.join(field.words)}" if field.words else ""
            raise ConfigError(f"{flag} expects an integer{words}, got {value!r}", field=name)
        if field.minimum is not None and value < field.minimum:
            raise ConfigError(f"{flag} expects >= {field.minimum}, got {value}", field=name)
        return str(value)
    if field.type == "num":
        if not (_is_int(value) or isinstance(value, float)):
            raise ConfigError(f"{flag} expects a number, got {value!r}", field=name)
        return str(value)
    if field.type == "str" and not (isinstance(value, str) and value):
        raise ConfigError(f"{flag} expects a non-empty string, got {value!r}", field=name)
    if isinstance(value, bool) or not isinstance(value, str | int | float) or value == "":
        raise ConfigError(
            f"{flag} expects one value (string or number), got {value!r}", field=name
        )
    text = str(value)
    if field.values is not None:
        valid = value_set(version, field.values)
        parts = text.split(",") if field.values == "spec_types" else [text]
        bad = [p for p in parts if p not in valid]
        if bad:
            raise ConfigError(
                f"{bad[0]!r} is not valid for {flag} in llama-cpp-python "
                f"{supported_versions()[index]}; valid: {', '.join(valid)}",
                field=name,
            )
    return text


def _render_flash_attn(name: str, spec: OptionSpec, value: Any, index: int) -> list[str]:
    word = {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value
    if spec.kind == "v":
        if word not in spec.choices:
            raise ConfigError(
                f"--flash-attn expects one of {', '.join(spec.choices)} (or true/false), "
                f"got {value!r}",
                field=name,
            )
        return ["--flash-attn", str(word)]
    # 0.3.16: a bare switch, off unless given
    if word not in ("on", "off"):
        raise ConfigError(
            f"--flash-attn in llama-cpp-python {supported_versions()[index]} is a bare switch: "
            f"on or off (auto needs >= 0.3.30), got {value!r}",
            field=name,
        )
    return ["--flash-attn"] if word == "on" else []


def _render_switch(name: str, spec: OptionSpec, flag: str, value: Any, index: int) -> list[str]:
    if not isinstance(value, bool):
        raise ConfigError(f"{flag} is a switch: expects true or false, got {value!r}", field=name)
    if value:
        return [flag]
    negated = [f for f in spec.neg if f.startswith("--")]
    if negated:
        return [negated[0]]
    # An old bare switch: its separate `--no-x` option (0.3.16's -nocb), else leave it off.
    no = "--no-" + flag[2:]
    other = _spec_at(no, index)
    return [no] if other is not None and other.kind == "b" and not other.removed else []


def build_flags(config: Mapping[str, Any], version: str) -> list[str]:
    """Config -> flag tokens in a stable order for llama-server `version`.

    Order: the FIELDS table order, then other fields alphabetically. `None` emits nothing;
    DEFAULTS (`--metrics`, `--verbosity 4`) are added unless the config sets those options.

    Raises:
        UnknownNameError, UnsupportedFlagError, ConfigError: see `field_flag` and value checks.
    """
    index = version_index(version)
    by_canonical = by_canonical_field(config, RESERVED, canonical_field)
    for name, value in DEFAULTS.items():
        spec = _spec_at(mechanical_flag(name), index)
        taken = {_resolve(k, c, index).key for c, (k, v) in by_canonical.items() if v is not None}
        if spec is not None and spec.key not in taken:
            by_canonical[name] = (name, value)

    order = [n for n in FIELDS if n in by_canonical]
    order += sorted(n for n in by_canonical if n not in FIELDS)
    argv: list[str] = []
    options: dict[str, str] = {}
    for canonical in order:
        key, value = by_canonical[canonical]
        if value is None:
            continue
        spec = _resolve(key, canonical, index)
        if spec.key in options:
            raise ConfigError(
                f"sets the same llama-server option ({spec.flag}) as {options[spec.key]!r}; "
                "keep one",
                field=key,
            )
        options[spec.key] = key
        flag = _emitted(canonical, spec, index)
        if canonical == "flash_attn":
            argv += _render_flash_attn(key, spec, value, index)
        elif spec.kind in ("b", "n"):
            argv += _render_switch(key, spec, flag, value, index)
        elif spec.kind == "2":
            if not (isinstance(value, list | tuple) and len(value) == 2):
                raise ConfigError(f"{flag} takes two values, got {value!r}", field=key)
            field = FIELDS.get(canonical, Field())
            argv += [flag, *(_scalar(key, flag, field, v, version) for v in value)]
        else:
            field = FIELDS.get(canonical, Field())
            token = _scalar(key, flag, field, value, version)
            if spec.choices and token not in spec.choices:
                raise ConfigError(
                    f"{token!r} is not valid for {flag} in llama-cpp-python "
                    f"{supported_versions()[index]}; valid: {', '.join(spec.choices)}",
                    field=key,
                )
            argv += [flag, token]
    return argv
