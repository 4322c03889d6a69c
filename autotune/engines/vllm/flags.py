"""vLLM launch flags by engine version: config fields -> argv tokens and environment variables.

Two data tables drive everything (no per-flag if-chains):

- `_catalog.CATALOG`: every long option of `vllm serve` for 0.10.0 .. 0.34.0 by release range,
  read from the PyPI wheels with `ast` (tests/engines/regen_vllm_catalog.py): kind (value,
  switch, BooleanOptional, list), dest, choices; and `SPECULATIVE_METHODS`, the values
  SpeculativeConfig.method takes. Read by autotune.engines.vllm.releases.
- `FIELDS` (autotune.engines.vllm.fields): the fields autotune handles specially, in emission
  order: renames across versions, aliases (`tp_size`), value checks argparse does not do
  (autotune.engines.vllm.values), and env-only fields.

Search-space pseudo fields (not vLLM flags; documented in
autotune/data/search_spaces/vllm.yaml): `speculative_method`, `num_speculative_tokens`,
`prompt_lookup_max`, `prompt_lookup_min` and `speculative_model` fold into ONE argv element,
`--speculative-config '{"method": ...}'` (autotune.engines.vllm.speculative).

Any other config field follows the mechanical rule `field_name -> --field-name` and is accepted
when the catalog has that flag for the version. A boolean (`enable_prefix_caching`) emits
`--enable-prefix-caching` for true and `--no-enable-prefix-caching` for false.

This module is the builder and the package's one place to import flag names from: the release,
field and speculative names it uses are importable from here as well.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from autotune.engines._flags import by_canonical_field, emit_fields, mechanical_flag
from autotune.engines.vllm.fields import (
    ALIASES,
    FIELDS,
    FIRST,
    GRAPH_RENAME,
    LAST,
    NGRAM_METHODS,
    RESERVED,
    SPECULATIVE_FIELDS,
    TABLE,
    Field,
    ValueType,
    field_of,
)
from autotune.engines.vllm.releases import (
    FlagSpec,
    at_least,
    compilation_keys,
    parse_version,
    release_index,
    release_name,
    speculative_methods,
    supported_versions,
    version_index,
)
from autotune.engines.vllm.speculative import speculative_config
from autotune.engines.vllm.values import check_value, env_value, render
from autotune.errors import ConfigError, did_you_mean

__all__ = [
    "ALIASES",
    "FIELDS",
    "NGRAM_METHODS",
    "RESERVED",
    "SPECULATIVE_FIELDS",
    "Field",
    "FlagSpec",
    "ValueType",
    "at_least",
    "build_flags",
    "canonical_field",
    "compilation_keys",
    "field_flag",
    "flag_names",
    "flag_spec",
    "known_fields",
    "parse_version",
    "speculative_config",
    "speculative_methods",
    "supported_versions",
    "version_index",
]


def flag_spec(flag: str, version: str) -> FlagSpec | None:
    """How `flag` behaves in `version`, or None when that release's parser lacks it."""
    return TABLE.spec(flag, version_index(version))


def flag_names(version: str) -> set[str]:
    """Every long flag `vllm serve` accepts in `version` (deprecated ones included)."""
    return TABLE.names(version_index(version))


def known_fields() -> tuple[str, ...]:
    """Every config field name accepted for some catalogued release."""
    return TABLE.known


def canonical_field(name: str) -> str:
    """The table's name for a config key (aliases resolved).

    Raises:
        UnknownNameError: no catalogued vLLM release has the field, with close matches.
    """
    return TABLE.canonical(name)


def field_flag(name: str, version: str) -> str:
    """The flag a config field uses in `version` (aliases resolved).

    Raises:
        UnknownNameError: unknown field.
        UnsupportedFlagError: the version lacks it (names the releases that have it).
        ConfigError: the field is env-only or a speculative pseudo field (no flag of its own).
    """
    canonical = canonical_field(name)
    field = field_of(canonical)
    if field.env is not None:
        raise ConfigError(f"is set through env {field.env}, not a flag", field=name)
    if field.pseudo:
        raise ConfigError("is folded into --speculative-config, not a flag", field=name)
    return _resolve_flag(name, canonical, field, version_index(parse_version(version)))[0]


def _resolve_flag(name: str, canonical: str, field: Field, i: int) -> tuple[str, FlagSpec]:
    spellings = field.flags or ((FIRST, LAST, mechanical_flag(canonical)),)
    candidates = [(release_index(a), release_index(b), flag) for a, b, flag in spellings]
    return TABLE.resolve(name, canonical, candidates, i)


def _graph_fields(config: Mapping[str, object], i: int) -> None:
    """Before 0.11.1 both graph fields map onto --cuda-graph-sizes, whose single value means a
    maximum: refuse what that flag cannot say."""
    if i >= release_index(GRAPH_RENAME):
        return
    sizes = config.get("cudagraph_capture_sizes")
    cap = config.get("max_cudagraph_capture_size")
    if sizes is not None and cap is not None:
        raise ConfigError(
            f"vLLM {release_name(i)} has one flag (--cuda-graph-sizes) for both "
            "cudagraph_capture_sizes and max_cudagraph_capture_size: set one",
            field="max_cudagraph_capture_size",
        )
    if isinstance(sizes, list | tuple) and len(set(sizes)) == 1:
        raise ConfigError(
            f"vLLM {release_name(i)} reads a single --cuda-graph-sizes value as a maximum "
            f"(capture 1, 2, 4, 8, ... up to it), not as the only size: give two or more "
            "sizes, or use max_cudagraph_capture_size",
            field="cudagraph_capture_sizes",
        )


def build_flags(config: Mapping[str, object], version: str) -> tuple[list[str], dict[str, str]]:
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
    if spec_obj is not None or "speculative_config" in by_canonical:
        # the whole object, checked, or the pseudo fields folded where speculative_config sits
        key = by_canonical.get("speculative_config", ("speculative_method", None))[0]
        by_canonical["speculative_config"] = (key, spec_obj)
    fields = {c: kv for c, kv in by_canonical.items() if not field_of(c).pseudo}
    return emit_fields(fields, FIELDS, _Emitter(version, i))


@dataclass(frozen=True)
class _Emitter:
    """vLLM `version`'s (catalogue index `i`) env variables and argv for a config's fields."""

    version: str
    i: int

    def env(self, key: str, canonical: str, value: object) -> tuple[str, str] | None:
        field = field_of(canonical)
        if field.env is None:
            return None
        return field.env, env_value(key, field, value, self.i)

    def flag(self, key: str, canonical: str) -> FlagSpec:
        return _resolve_flag(key, canonical, field_of(canonical), self.i)[1]

    def tokens(self, key: str, canonical: str, spec: FlagSpec, value: object) -> list[str]:
        value = check_value(key, field_of(canonical), spec, value)
        if canonical == "compilation_config" and isinstance(value, dict):
            _check_compilation_keys(key, value, self.version)
        if canonical == "max_cudagraph_capture_size" and spec.kind == "l":
            value = [value]  # --cuda-graph-sizes N: capture up to N
        return render(key, spec, value, self.version)


def _check_compilation_keys(name: str, value: Mapping[str, object], version: str) -> None:
    """Every key of `--compilation-config` a field of the release's CompilationConfig: an unknown
    one fails the launch (pydantic's extra="forbid", from 0.13.0) or is dropped unread (before).

    Raises:
        ConfigError: names the first unknown key, the closest fields and the release's.
    """
    keys = compilation_keys(version)
    unknown = [k for k in value if k not in keys]
    if unknown:
        k = str(unknown[0])
        raise ConfigError(
            f"compilation_config key {k!r} is not a CompilationConfig field in vLLM {version}"
            f"{did_you_mean(k, keys)}",
            field=name,
        )
