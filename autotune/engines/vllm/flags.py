"""vLLM launch flags by engine version: config fields -> argv tokens and environment variables.

Two data tables drive everything (no per-flag if-chains):

- `_catalog.CATALOG`: every long option of `vllm serve` for 0.10.0 .. 0.33.0 by release range,
  read from the PyPI wheels with `ast` (regen.py): kind (value, switch, BooleanOptional, list),
  dest, choices; and `SPECULATIVE_METHODS`, the values SpeculativeConfig.method takes.
- `FIELDS` below: the fields autotune handles specially, in emission order: renames across
  versions (`--cuda-graph-sizes` up to 0.12.0, `--cudagraph-capture-sizes` /
  `--max-cudagraph-capture-size` from 0.11.1), aliases (`tp_size`), value checks argparse does
  not do, and env-only fields.

Search-space pseudo fields (not vLLM flags; documented in
autotune/data/search_spaces/vllm.yaml):
`speculative_method`, `num_speculative_tokens`, `prompt_lookup_max`, `prompt_lookup_min` and
`speculative_model` fold into ONE argv element, `--speculative-config '{"method": ...}'` (compact
JSON, never through a shell), the form every version 0.10.0 .. 0.33.0 accepts.

Any other config field follows the mechanical rule `field_name -> --field-name` and is accepted
when the catalog has that flag for the version. A boolean (`enable_prefix_caching`) emits
`--enable-prefix-caching` for true and `--no-enable-prefix-caching` for false.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from autotune.engines._flags import (
    CatalogFlag,
    by_canonical_field,
    canonical_name,
    check_choices,
    claim_dest,
    emission_order,
    flag_at,
    flags_at,
    kind_cell,
    mechanical_flag,
    merge_ranges,
    ranges_having,
    read_catalog,
    spec_at,
    switch_tokens,
)
from autotune.errors import ConfigError, UnsupportedFlagError
from autotune.versions import base_release, try_version

ValueType = Literal["int", "float", "fraction", "str", "bool", "int_list", "str_or_list", "json"]


@functools.cache
def _versions() -> tuple[str, ...]:
    from autotune.engines.vllm._catalog import VERSIONS

    return VERSIONS


def supported_versions() -> tuple[str, ...]:
    """Every vLLM release whose flags are catalogued, oldest first."""
    return _versions()


def parse_version(version: str) -> str:
    """The catalogued release for `version` (`v0.11.0`, `0.11.0.post2` and `0.11.0+cu128`
    use 0.11.0's flags).

    Raises:
        ConfigError: a release outside the catalogue, naming --engine-version and the range.
    """
    parsed = try_version(version) if isinstance(version, str) else None
    base = base_release(parsed) if parsed is not None and not parsed.is_prerelease else None
    if base is None or base not in _versions():
        vs = _versions()
        raise ConfigError(
            f"unsupported vLLM version {version!r}; supported: the releases {vs[0]} to "
            f"{vs[-1]} (e.g. {', '.join(vs[-3:])})",
            field="--engine-version",
        )
    return base


def version_index(version: str) -> int:
    """Position of the release in the catalogue (for ordering versions)."""
    return _versions().index(parse_version(version))


def at_least(version: str, first: str) -> bool:
    """Whether `version` is the release `first` or newer."""
    return version_index(version) >= _versions().index(first)


def _ranges_text(ranges: list[tuple[int, int]]) -> str:
    vs = _versions()
    parts = [vs[a] if a == b else f"{vs[a]}-{vs[b]}" for a, b in merge_ranges(ranges)]
    return ", ".join(parts) if parts else "none"


# ---------------------------------------------------------------------------------------------
# The generated catalog


@dataclass(frozen=True)
class FlagSpec(CatalogFlag):
    """One flag as `vllm serve` defines it over a range of releases (catalogue indices)."""

    choices: tuple[str, ...]


@functools.cache
def _catalog() -> dict[str, tuple[FlagSpec, ...]]:
    from autotune.engines.vllm._catalog import CATALOG

    index = {v: i for i, v in enumerate(_versions())}

    def row_spec(cells: list[str]) -> FlagSpec:
        """`flag|first-last|kind|dest|choices` (release names)."""
        flag, span, kind, dest, choices = cells
        first, last = span.split("-")
        kind_, deprecated = kind_cell(kind)
        return FlagSpec(
            flag=flag,
            first=index[first],
            last=index[last],
            kind=kind_,
            deprecated=deprecated,
            dest=dest,
            choices=tuple(choices.split()),
        )

    return read_catalog(CATALOG, row_spec)


@functools.cache
def _spec_methods() -> tuple[tuple[int, int, tuple[str, ...]], ...]:
    from autotune.engines.vllm._catalog import SPECULATIVE_METHODS

    index = {v: i for i, v in enumerate(_versions())}
    out = []
    for row in SPECULATIVE_METHODS.splitlines():
        span, methods = row.split("|")
        first, last = span.split("-")
        out.append((index[first], index[last], tuple(methods.split())))
    return tuple(out)


def speculative_methods(version: str) -> tuple[str, ...]:
    """The values SpeculativeConfig.method accepts in `version`."""
    i = version_index(version)
    return next(m for a, b, m in _spec_methods() if a <= i <= b)


def _spec_at(flag: str, i: int) -> FlagSpec | None:
    return spec_at(_catalog().get(flag, ()), i)


def flag_spec(flag: str, version: str) -> FlagSpec | None:
    """How `flag` behaves in `version`, or None when that release's parser lacks it."""
    return _spec_at(flag, version_index(version))


def flag_names(version: str) -> set[str]:
    """Every long flag `vllm serve` accepts in `version` (deprecated ones included)."""
    return flags_at(_catalog(), version_index(version))


# ---------------------------------------------------------------------------------------------
# The fields autotune handles


@dataclass(frozen=True)
class Field:
    """A config field: its flag per release range and the checks argparse lacks.

    flags: (first, last, flag) per range of releases; empty = `--field-name` wherever the
        catalogue has it.
    aliases: other config names for the same field.
    type: the value check (None: from the catalogue's kind).
    env: the field sets this environment variable instead of a flag (from release env_since).
    pseudo: folded into --speculative-config (the search space's speculative fields).
    """

    flags: tuple[tuple[str, str, str], ...] = ()
    aliases: tuple[str, ...] = ()
    type: ValueType | None = None
    minimum: float | None = None
    env: str | None = None
    env_since: str = "0.10.0"
    pseudo: bool = False


_FIRST, _LAST = "0.10.0", "0.33.0"
# `--cuda-graph-sizes` (0.10.0 .. 0.12.0, deprecated from 0.11.1): a list, or one value meaning
# "capture 1, 2, 4 and multiples of 8 up to N" (vllm/config SchedulerConfig.cuda_graph_sizes).
_OLD_GRAPH = ("0.10.0", "0.11.0", "--cuda-graph-sizes")

FIELDS: dict[str, Field] = {
    # memory and capacity
    "max_model_len": Field(type="int", minimum=1),
    "gpu_memory_utilization": Field(type="fraction"),
    "kv_cache_dtype": Field(type="str"),
    "block_size": Field(type="int", minimum=1),
    "max_num_seqs": Field(type="int", minimum=1),
    "max_num_batched_tokens": Field(type="int", minimum=1),
    "enable_chunked_prefill": Field(type="bool"),
    "enable_prefix_caching": Field(type="bool"),
    "quantization": Field(type="str"),
    "tensor_parallel_size": Field(type="int", minimum=1, aliases=("tp_size", "tp")),
    # speculative decoding (pseudo fields -> --speculative-config JSON)
    "speculative_config": Field(type="json"),
    "speculative_method": Field(type="str", pseudo=True),
    "num_speculative_tokens": Field(type="int", minimum=1, pseudo=True),
    "speculative_model": Field(type="str", pseudo=True),
    "prompt_lookup_max": Field(type="int", minimum=1, pseudo=True),
    "prompt_lookup_min": Field(type="int", minimum=1, pseudo=True),
    # CUDA graphs
    "enforce_eager": Field(type="bool"),
    "cudagraph_capture_sizes": Field(
        flags=(_OLD_GRAPH, ("0.11.1", _LAST, "--cudagraph-capture-sizes")), type="int_list"
    ),
    "max_cudagraph_capture_size": Field(
        flags=(_OLD_GRAPH, ("0.11.1", _LAST, "--max-cudagraph-capture-size")),
        type="int",
        minimum=1,
    ),
    "compilation_config": Field(type="json"),
    # vLLM >= 0.18 subtracts the profiled CUDA graph memory from the KV cache when this is on
    # (the default from 0.20.0; gpu_worker.determine_available_memory).
    "memory_profiler_estimate_cudagraphs": Field(
        type="bool", env="VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", env_since="0.18.0"
    ),
    # serving
    "served_model_name": Field(type="str_or_list"),
    "reasoning_parser": Field(type="str"),
    "tool_call_parser": Field(type="str"),
    "enable_auto_tool_choice": Field(type="bool"),
    "trust_remote_code": Field(type="bool"),
}

SPECULATIVE_FIELDS = (
    "speculative_method",
    "speculative_model",
    "num_speculative_tokens",
    "prompt_lookup_max",
    "prompt_lookup_min",
)
# The JSON keys of SpeculativeConfig each pseudo field sets.
_SPEC_KEYS = {
    "speculative_method": "method",
    "speculative_model": "model",
    "num_speculative_tokens": "num_speculative_tokens",
    "prompt_lookup_max": "prompt_lookup_max",
    "prompt_lookup_min": "prompt_lookup_min",
}
NGRAM_METHODS = ("ngram", "ngram_gpu")

ALIASES: dict[str, str] = {a: name for name, f in FIELDS.items() for a in f.aliases}

# Set through build_command's own arguments, never through the config.
RESERVED: dict[str, str] = {"model": "model", "model_tag": "model", "host": "host", "port": "port"}


@functools.cache
def known_fields() -> tuple[str, ...]:
    """Every config field name accepted for some catalogued release."""
    names = set(FIELDS) | set(ALIASES)
    for flag in _catalog():
        if not flag.startswith("--no-"):
            names.add(flag[2:].replace("-", "_"))
    return tuple(sorted(names - set(RESERVED)))


def canonical_field(name: str) -> str:
    """The table's name for a config key (aliases resolved).

    Raises:
        UnknownNameError: no catalogued vLLM release has the field, with close matches.
    """
    return canonical_name(
        name,
        fields=FIELDS,
        aliases=ALIASES,
        reserved=RESERVED,
        catalog=_catalog(),
        what="vLLM config field",
        known=known_fields,
    )


def _field(name: str) -> Field:
    return FIELDS.get(name, Field())


def field_flag(name: str, version: str) -> str:
    """The flag a config field uses in `version` (aliases resolved).

    Raises:
        UnknownNameError: unknown field.
        UnsupportedFlagError: the version lacks it (names the releases that have it).
        ConfigError: the field is env-only or a speculative pseudo field (no flag of its own).
    """
    canonical = canonical_field(name)
    field = _field(canonical)
    if field.env is not None:
        raise ConfigError(f"is set through env {field.env}, not a flag", field=name)
    if field.pseudo:
        raise ConfigError("is folded into --speculative-config, not a flag", field=name)
    return _resolve_flag(name, canonical, field, version_index(parse_version(version)))[0]


def _resolve_flag(name: str, canonical: str, field: Field, i: int) -> tuple[str, FlagSpec]:
    vs = _versions()
    spellings = field.flags or ((_FIRST, _LAST, mechanical_flag(canonical)),)
    candidates = [(vs.index(first), vs.index(last), flag) for first, last, flag in spellings]
    found = flag_at(candidates, _catalog(), i)
    if found is not None:
        return found
    have = ranges_having(candidates, _catalog())
    shown = name if name == canonical else f"{name} (= {canonical})"
    raise UnsupportedFlagError(
        f"config field {shown!r} is not supported by vLLM {vs[i]}; "
        f"releases that have it: {_ranges_text(have)}"
    )


# ---------------------------------------------------------------------------------------------
# Values -> argv


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(name: str, field: Field, spec: FlagSpec | None, value: Any) -> Any:
    """Validate a value against the field's type (or the flag's kind); returns it normalized."""
    typ = field.type
    if typ is None and spec is not None:
        typ = "bool" if spec.kind in ("b", "n") else None
    flag = spec.flag if spec is not None else name
    if typ == "bool":
        if not isinstance(value, bool):
            raise ConfigError(
                f"{flag} is a switch: expects true or false, got {value!r}", field=name
            )
        return value
    if typ == "int":
        if not _is_int(value):
            raise ConfigError(f"{flag} expects an integer, got {value!r}", field=name)
    elif typ == "float":
        if not (_is_int(value) or isinstance(value, float)):
            raise ConfigError(f"{flag} expects a number, got {value!r}", field=name)
    elif typ == "fraction":
        if not (_is_int(value) or isinstance(value, float)) or not 0 < value <= 1:
            raise ConfigError(f"{flag} expects a fraction in (0, 1], got {value!r}", field=name)
    elif typ == "str":
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{flag} expects a non-empty string, got {value!r}", field=name)
    elif typ == "int_list":
        if not isinstance(value, list | tuple) or not value or not all(map(_is_int, value)):
            raise ConfigError(f"{flag} expects a list of integers, got {value!r}", field=name)
        value = sorted(set(value))
        if value[0] < 1:
            raise ConfigError(f"{flag} sizes must be positive, got {value!r}", field=name)
    elif typ == "str_or_list":
        items = [value] if isinstance(value, str) else value
        if (
            not isinstance(items, list | tuple)
            or not items
            or not all(isinstance(v, str) and v for v in items)
        ):
            raise ConfigError(
                f"{flag} expects a name or a list of names, got {value!r}", field=name
            )
        value = list(items)
    elif typ == "json":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{flag} expects a JSON object: {exc}", field=name) from None
        if not isinstance(value, dict):
            raise ConfigError(f"{flag} expects a JSON object, got {value!r}", field=name)
    if field.minimum is not None and _is_int(value) and value < field.minimum:
        raise ConfigError(f"{flag} must be at least {field.minimum:g}, got {value}", field=name)
    return value


def _scalar(name: str, spec: FlagSpec, value: Any) -> str:
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool) or not isinstance(value, str | int | float) or value == "":
        raise ConfigError(f"{spec.flag} expects a value, got {value!r}", field=name)
    return str(value)


def _render(name: str, spec: FlagSpec, value: Any, version: str) -> list[str]:
    flag = spec.flag
    if spec.kind in ("b", "n"):
        return switch_tokens(name, flag, spec.kind == "n", value)
    if spec.kind == "o" and isinstance(value, bool):
        return [flag] if value else []
    if spec.kind == "l":
        items = list(value) if isinstance(value, list | tuple) else [value]
        if not items:
            raise ConfigError(f"{flag} needs at least one value", field=name)
        tokens = [_scalar(name, spec, v) for v in items]
    else:
        if isinstance(value, list | tuple):
            raise ConfigError(f"{flag} takes one value, got a list {value!r}", field=name)
        tokens = [_scalar(name, spec, value)]
    check_choices(name, flag, tokens, spec.choices, f"vLLM {version}")
    return [flag, *tokens]


def speculative_config(config: Mapping[str, Any], version: str) -> dict[str, Any] | None:
    """The SpeculativeConfig JSON object the config's speculative fields describe (None: no
    speculation). `speculative_config` given whole is validated and passed through.

    Raises:
        ConfigError: both forms given, fields without a method, bad values.
        UnsupportedFlagError: a method this release does not know (e.g. `mtp` before 0.11.0).
    """
    version = parse_version(version)
    parts = {k: config.get(k) for k in SPECULATIVE_FIELDS if config.get(k) is not None}
    obj = _speculative_object(config.get("speculative_config"), parts)
    if obj is None:
        return None
    method = obj.get("method")
    if method is None:
        others = sorted(parts) or ["speculative_config"]
        raise ConfigError(
            f"{', '.join(others)} only apply with speculative_method set",
            field="speculative_method",
        )
    _check_method(method, version)
    _check_method_fields(obj, method)
    return obj


def _speculative_object(whole: Any, parts: dict[str, Any]) -> dict[str, Any] | None:
    """The object from `speculative_config` given whole or from the pseudo fields (checked).

    Raises:
        ConfigError: both forms given, or bad values.
    """
    if whole is not None and parts:
        raise ConfigError(
            f"set either speculative_config or {', '.join(sorted(parts))}, not both",
            field="speculative_config",
        )
    if whole is not None:
        return dict(_check("speculative_config", FIELDS["speculative_config"], None, whole))
    if not parts:
        return None
    obj = {}
    for key in SPECULATIVE_FIELDS:
        if key in parts:
            obj[_SPEC_KEYS[key]] = _check(key, FIELDS[key], None, parts[key])
    return obj


def _check_method(method: Any, version: str) -> None:
    """The method must be one `version` knows (speculative_methods).

    Raises:
        UnsupportedFlagError: a method other releases know.
        ConfigError: a method no release knows.
    """
    methods = speculative_methods(version)
    if method in methods:
        return
    have = [(a, b) for a, b, ms in _spec_methods() if method in ms]
    if have:
        raise UnsupportedFlagError(
            f"speculative_method {method!r} is not supported by vLLM {version}; "
            f"releases that have it: {_ranges_text(have)}"
        )
    raise ConfigError(
        f"unknown speculative method {method!r} for vLLM {version}; valid: {', '.join(methods)}",
        field="speculative_method",
    )


def _check_method_fields(obj: dict[str, Any], method: Any) -> None:
    """The prompt-lookup bounds apply to ngram only (min <= max); other methods but suffix
    need num_speculative_tokens.

    Raises:
        ConfigError: a field the method does not take, or lacks.
    """
    lookup = [k for k in ("prompt_lookup_max", "prompt_lookup_min") if k in obj]
    if lookup and method not in NGRAM_METHODS:
        raise ConfigError(
            f"{', '.join(lookup)} only apply with speculative_method ngram", field=lookup[0]
        )
    lo, hi = obj.get("prompt_lookup_min"), obj.get("prompt_lookup_max")
    if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
        raise ConfigError(
            f"prompt_lookup_min={lo} must be <= prompt_lookup_max={hi}", field="prompt_lookup_min"
        )
    if method not in NGRAM_METHODS + ("suffix",) and "num_speculative_tokens" not in obj:
        raise ConfigError(
            f"speculative_method {method!r} needs num_speculative_tokens",
            field="num_speculative_tokens",
        )


def _graph_fields(config: Mapping[str, Any], i: int) -> None:
    """Before 0.11.1 both graph fields map onto --cuda-graph-sizes, whose single value means a
    maximum: refuse what that flag cannot say."""
    if i >= _versions().index("0.11.1"):
        return
    sizes = config.get("cudagraph_capture_sizes")
    cap = config.get("max_cudagraph_capture_size")
    if sizes is not None and cap is not None:
        raise ConfigError(
            f"vLLM {_versions()[i]} has one flag (--cuda-graph-sizes) for both "
            "cudagraph_capture_sizes and max_cudagraph_capture_size: set one",
            field="max_cudagraph_capture_size",
        )
    if isinstance(sizes, list | tuple) and len(set(sizes)) == 1:
        raise ConfigError(
            f"vLLM {_versions()[i]} reads a single --cuda-graph-sizes value as a maximum "
            f"(capture 1, 2, 4, 8, ... up to it), not as the only size: give two or more "
            "sizes, or use max_cudagraph_capture_size",
            field="cudagraph_capture_sizes",
        )


def build_flags(config: Mapping[str, Any], version: str) -> tuple[list[str], dict[str, str]]:
    """Config -> (flag tokens in a stable order, environment variables) for `version`.

    Order: the FIELDS table order (the speculative fields as one --speculative-config where
    `speculative_config` sits), then other fields alphabetically. `None` emits nothing.

    Raises:
        UnknownNameError, UnsupportedFlagError, ConfigError: see `field_flag` and the checks.
    """
    version = parse_version(version)
    i = version_index(version)
    # tp_size=2 beside tensor_parallel_size=2 is fine: the sweep adds tp_size
    by_canonical = by_canonical_field(config, RESERVED, canonical_field, merge_equal=True)
    present = {c: kv[1] for c, kv in by_canonical.items()}
    _graph_fields(present, i)
    spec_obj = speculative_config(present, version)
    if spec_obj is not None and "speculative_config" not in by_canonical:
        by_canonical["speculative_config"] = ("speculative_method", spec_obj)

    argv: list[str] = []
    env: dict[str, str] = {}
    dests: dict[str, str] = {}
    for canonical in emission_order(by_canonical, FIELDS):
        key, value = by_canonical[canonical]
        field = _field(canonical)
        if field.pseudo:
            continue
        if canonical == "speculative_config":
            value = spec_obj
        if value is None:
            continue
        if field.env is not None:
            env[field.env] = _env_value(key, field, value, version)
            continue
        _flag, spec = _resolve_flag(key, canonical, field, i)
        claim_dest(dests, spec.dest, key)
        value = _check(key, field, spec, value)
        if canonical == "max_cudagraph_capture_size" and spec.kind == "l":
            value = [value]  # --cuda-graph-sizes N: capture up to N
        argv += _render(key, spec, value, version)
    return argv, env


def _env_value(key: str, field: Field, value: Any, version: str) -> str:
    """An env-only field's value ("1" / "0").

    Raises:
        UnsupportedFlagError: the release predates the variable.
        ConfigError: not a bool.
    """
    assert field.env is not None
    if version_index(version) < _versions().index(field.env_since):
        raise UnsupportedFlagError(
            f"config field {key!r} ({field.env}) is not supported by vLLM {version}; "
            f"releases that have it: {field.env_since}-{_LAST}"
        )
    return "1" if _check(key, field, None, value) else "0"
