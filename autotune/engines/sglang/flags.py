"""SGLang launch flags by engine version: config fields -> argv tokens and environment variables.

Two data tables drive everything (no per-flag if-chains):

- `_catalog.CATALOG`: every long option of SGLang's own argparse parser for 0.5.9 .. 0.5.23,
  generated from the PyPI wheels (kind, type, choices, dest per version range).
- `FIELDS` below: the fields autotune uses, in emission order, with the renames across versions
  (FIELD-NOTES P13), aliases, validation argparse does not do, and env-only fields (P4).

A config field not in `FIELDS` follows the mechanical rule `field_name -> --field-name` and is
accepted when the catalog has that flag. Version boundaries below come from the catalog, which
was read from the wheels themselves and is finer than reference/sglang-internals.md §1.3 (which
only spot-checked 0.5.9/12/16/20/23): the renamed mamba strategy and cuda-graph flags appear in
0.5.14 (old spellings stay as deprecated aliases to 0.5.19), `extra_buffer_lazy` in 0.5.13, and
`DFLASH` is already an argparse choice in 0.5.11.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from autotune.engines._flags import (
    CatalogFlag,
    FlagTable,
    by_canonical_field,
    check_choices,
    emit_fields,
    mechanical_flag,
    read_catalog,
    switch_tokens,
)
from autotune.engines.builds import Followed, follow
from autotune.errors import CompanionFieldError, ConfigError
from autotune.versions import Version, release3

MINOR_FIRST, MINOR_LAST = 9, 23
SUPPORTED_VERSIONS: tuple[str, ...] = tuple(f"0.5.{n}" for n in range(MINOR_FIRST, MINOR_LAST + 1))

# SGLang's human_readable_int (sglang/srt/utils/common.py): SI with decimals, IEC integers.
_SIZE_RE = re.compile(r"\d+|\d+(?:\.\d+)?[kMGT]|\d+(?:Ki|Mi|Gi|Ti)")


def parse_version(version: str) -> tuple[int, int, int]:
    """`"0.5.17"` -> `(0, 5, 17)`; post releases (`0.5.15.post1`), local builds
    (`0.5.17+cu128`), release candidates (`0.5.10rc0`) and development builds of a catalogued
    0.5.N use its flags (autotune.engines.builds). Parsed by autotune.versions (PEP 440).

    Raises:
        ConfigError: not a version, or outside 0.5.9 .. 0.5.23, naming --engine-version.
    """
    return release3(Version(followed_release(version).release))


def followed_release(version: str) -> Followed:
    """The catalogued 0.5.N an SGLang build follows, and what kind of build it is; every 0.5.N
    is its own line, so 0.5.24rc0 is refused rather than run with 0.5.23's flags."""
    return _followed(version if isinstance(version, str) else repr(version))


@functools.cache
def _followed(version: str) -> Followed:
    return follow(
        "SGLang",
        version,
        SUPPORTED_VERSIONS,
        line=3,
        forms="0.5.N, optionally .postM, rcM, .devM or +local",
        shape=lambda v: len(v.release) == 3 and v.release[:2] == (0, 5),
    )


def _minor(version: str) -> int:
    return parse_version(version)[2]


# ---------------------------------------------------------------------------------------------
# The generated argparse catalog


@dataclass(frozen=True)
class FlagSpec(CatalogFlag):
    """One flag as SGLang's parser defines it over a range of 0.5.N minors."""

    type: str
    choices: tuple[str, ...]


def _row_spec(common: CatalogFlag, cells: list[str]) -> FlagSpec:
    """A catalog row (minors 9..23): the common cells, then `type|choices`."""
    typ, choices = cells
    return FlagSpec(**vars(common), type=typ, choices=tuple(choices.split()))


@functools.cache
def _catalog() -> dict[str, tuple[FlagSpec, ...]]:
    from autotune.engines.sglang._catalog import CATALOG

    return read_catalog(CATALOG, _row_spec, int)


def flag_spec(flag: str, version: str) -> FlagSpec | None:
    """How `flag` behaves in `version`, or None when that version's parser lacks it."""
    return TABLE.spec(flag, _minor(version))


def flag_names(version: str) -> set[str]:
    """Every long flag SGLang `version` accepts (deprecated aliases included)."""
    return TABLE.names(_minor(version))


# ---------------------------------------------------------------------------------------------
# The fields autotune uses


@dataclass(frozen=True)
class Field:
    """A config field: its flag spelling per version range and the checks argparse lacks.

    flags: (first, last, flag) spelling per range of 0.5.N minors; empty = `--field-name` in
        every version whose catalog has it.
    aliases: other config names accepted for the same field (old spellings).
    choices: (first, last, values) validated here although argparse takes a free string.
    env: the field sets this environment variable instead of a flag (from minor env_since).
    requires: (field, value) the config must also set for this field to mean anything.
    """

    flags: tuple[tuple[int, int, str], ...] = ()
    aliases: tuple[str, ...] = ()
    choices: tuple[tuple[int, int, tuple[str, ...]], ...] = ()
    env: str | None = None
    env_since: int = MINOR_FIRST
    requires: tuple[str, str] | None = None


# SpeculativeAlgorithm builtins (sglang/srt/speculative/spec_info.py), validated by from_string
# once argparse stopped listing choices (0.5.12). NEXTN is rewritten to EAGLE before that check.
_SPEC_12 = ("DFLASH", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM", "NEXTN")
_SPEC_16 = (*_SPEC_12, "DSPARK")
_SPEC_20 = (*_SPEC_16, "UNO")

_HICACHE_FILE = ("hicache_storage_backend", "file")

FIELDS: dict[str, Field] = {
    # memory and capacity
    "context_length": Field(),
    "mem_fraction_static": Field(),
    "max_total_tokens": Field(),
    "max_running_requests": Field(),
    "max_prefill_tokens": Field(),
    "chunked_prefill_size": Field(),
    "page_size": Field(),
    "kv_cache_dtype": Field(),
    "quantization": Field(),
    "tp_size": Field(),
    # scheduling
    "schedule_policy": Field(),
    "schedule_conservativeness": Field(),
    "enable_mixed_chunk": Field(),
    "disable_radix_cache": Field(),
    "disable_overlap_schedule": Field(),
    "attention_backend": Field(),
    "prefill_attention_backend": Field(),
    "decode_attention_backend": Field(),
    # hybrid mamba / GDN state
    "max_mamba_cache_size": Field(),
    "mamba_full_memory_ratio": Field(),
    "mamba_ssm_dtype": Field(),
    "mamba_radix_cache_strategy": Field(
        flags=((9, 13, "--mamba-scheduler-strategy"), (14, 23, "--mamba-radix-cache-strategy")),
        aliases=("mamba_scheduler_strategy",),
    ),
    "mamba_track_interval": Field(),
    # HiCache (host L2, storage L3)
    "enable_hierarchical_cache": Field(),
    "hicache_ratio": Field(),
    "hicache_size": Field(),
    "hicache_write_policy": Field(),
    "hicache_io_backend": Field(),
    "hicache_mem_layout": Field(),
    "hicache_storage_backend": Field(),
    "hicache_storage_prefetch_policy": Field(),
    "file_storage_path": Field(),
    # P4: the file backend's directory and eviction bounds come from the environment
    # (--file-storage-path was ignored in 0.5.17; without the bounds it grew to 24 GB).
    "hicache_file_storage_dir": Field(
        env="SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", requires=_HICACHE_FILE
    ),
    "hicache_file_max_size": Field(
        env="SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE", env_since=14, requires=_HICACHE_FILE
    ),
    "hicache_file_min_free_space": Field(
        env="SGLANG_HICACHE_FILE_BACKEND_MIN_FREE_SPACE", env_since=14, requires=_HICACHE_FILE
    ),
    # speculative decoding
    "speculative_algorithm": Field(
        choices=((12, 15, _SPEC_12), (16, 19, _SPEC_16), (20, 23, _SPEC_20))
    ),
    "speculative_num_steps": Field(),
    "speculative_eagle_topk": Field(),
    "speculative_num_draft_tokens": Field(),
    "speculative_draft_model_path": Field(),
    # CUDA graphs (P13: renamed in 0.5.14, old spellings removed in 0.5.20)
    "cuda_graph_max_bs_decode": Field(
        flags=((9, 13, "--cuda-graph-max-bs"), (14, 23, "--cuda-graph-max-bs-decode")),
        aliases=("cuda_graph_max_bs",),
    ),
    "cuda_graph_bs_decode": Field(
        flags=((9, 13, "--cuda-graph-bs"), (14, 23, "--cuda-graph-bs-decode")),
        aliases=("cuda_graph_bs",),
    ),
    "disable_cuda_graph": Field(),
    # serving
    "reasoning_parser": Field(),
    "tool_call_parser": Field(),
    "served_model_name": Field(),
    "trust_remote_code": Field(),
    "skip_server_warmup": Field(),
    "enable_cache_report": Field(),
    "log_level": Field(),
    "decode_log_interval": Field(),
    "enable_metrics": Field(),
}

ALIASES: dict[str, str] = {a: name for name, f in FIELDS.items() for a in f.aliases}

# Set through build_command's own arguments, never through the config.
RESERVED: dict[str, str] = {"model_path": "model", "host": "host", "port": "port"}

TABLE: FlagTable[FlagSpec] = FlagTable(
    engine="SGLang",
    releases="versions",
    release_name="0.5.{}".format,
    load=_catalog,
    fields=FIELDS,
    aliases=ALIASES,
    reserved=RESERVED,
    what="SGLang config field",
)


def known_fields() -> tuple[str, ...]:
    """Every config field name accepted for some supported version."""
    return TABLE.known


def canonical_field(name: str) -> str:
    """The table's name for a config key (aliases resolved).

    Raises:
        UnknownNameError: no SGLang version has the field, with close matches.
    """
    return TABLE.canonical(name)


def _field(name: str) -> Field:
    return FIELDS.get(name, Field())


def field_flag(name: str, version: str) -> str:
    """The flag a config field uses in `version` (aliases resolved).

    Raises:
        UnknownNameError: unknown field.
        UnsupportedFlagError: the version lacks it (names the versions that have it).
        ConfigError: the field is env-only (no flag).
    """
    canonical = canonical_field(name)
    field = _field(canonical)
    if field.env is not None:
        raise ConfigError(f"is set through env {field.env}, not a flag", field=name)
    return _resolve_flag(name, canonical, field, _minor(version))[0]


def _resolve_flag(name: str, canonical: str, field: Field, minor: int) -> tuple[str, FlagSpec]:
    candidates = field.flags or ((MINOR_FIRST, MINOR_LAST, mechanical_flag(canonical)),)
    return TABLE.resolve(name, canonical, candidates, minor)


# ---------------------------------------------------------------------------------------------
# Values -> argv


def _choices(field: Field, spec: FlagSpec, minor: int) -> tuple[str, ...]:
    for first, last, values in field.choices:
        if first <= minor <= last:
            return values
    return spec.choices


def _check_scalar(name: str, spec: FlagSpec, value: object) -> str:
    ok: bool
    if spec.type == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
        want = "an integer"
    elif spec.type == "float":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        want = "a number"
    elif spec.type == "str":
        ok = isinstance(value, str) and value != ""
        want = "a non-empty string"
    else:  # JSON-valued and other custom argparse types
        if isinstance(value, dict | list):
            return json.dumps(value, sort_keys=True, separators=(",", ":"))
        ok = isinstance(value, str | int | float) and not isinstance(value, bool)
        want = "a string (or a JSON object/list)"
    if not ok:
        raise ConfigError(f"{spec.flag} expects {want}, got {value!r}", field=name)
    return str(value)


def _render(name: str, field: Field, spec: FlagSpec, value: object, minor: int) -> list[str]:
    flag = spec.flag
    if spec.kind in ("b", "n"):
        return switch_tokens(name, flag, spec.kind == "n", value)
    choices = _choices(field, spec, minor)
    items = list(value) if isinstance(value, list | tuple) else [value]
    if spec.kind != "l" and isinstance(value, list | tuple) and spec.type != "other":
        raise ConfigError(f"{flag} takes one value, got a list {value!r}", field=name)
    if spec.kind == "l" and not items:
        raise ConfigError(f"{flag} needs at least one value", field=name)
    rendered = (
        [_check_scalar(name, spec, v) for v in items]
        if spec.kind == "l"
        else [_check_scalar(name, spec, value)]
    )
    check_choices(name, flag, rendered, choices, f"SGLang 0.5.{minor}")
    return [flag, *rendered]


def _render_env(name: str, field: Field, value: object, minor: int) -> str:
    assert field.env is not None
    if minor < field.env_since:
        raise TABLE.unsupported(f"{name!r} ({field.env})", minor, [(field.env_since, MINOR_LAST)])
    if field.env.endswith("_DIR"):
        if not isinstance(value, str) or not value:
            raise ConfigError(f"expects a directory path, got {value!r}", field=name)
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return str(value)
    if isinstance(value, str) and _SIZE_RE.fullmatch(value.strip()):
        return value.strip()
    raise ConfigError(
        f"expects a size in bytes or with a suffix (k, M, G, T, Ki, Mi, Gi, Ti), got {value!r}",
        field=name,
    )


def build_flags(config: Mapping[str, object], version: str) -> tuple[list[str], dict[str, str]]:
    """Config -> (flag tokens in a stable order, environment variables) for `version`.

    Order: the FIELDS table order, then other fields alphabetically. `None` emits nothing;
    `--enable-metrics` is added unless the config sets `enable_metrics: false` (the tuner
    scrapes /metrics).

    Raises:
        UnknownNameError, UnsupportedFlagError, ConfigError: see `field_flag` and value checks.
    """
    minor = _minor(version)
    by_canonical = by_canonical_field(config, RESERVED, canonical_field)
    if by_canonical.get("enable_metrics", ("", None))[1] is None:
        by_canonical["enable_metrics"] = ("enable_metrics", True)
    return emit_fields(by_canonical, FIELDS, _Emitter(minor, config))


@dataclass(frozen=True)
class _Emitter:
    """SGLang 0.5.`minor`'s env variables and argv for the fields of `config`."""

    minor: int
    config: Mapping[str, object]

    def env(self, key: str, canonical: str, value: object) -> tuple[str, str] | None:
        field = _field(canonical)
        _check_requires(key, field, self.config)
        if field.env is None:
            return None
        return field.env, _render_env(key, field, value, self.minor)

    def flag(self, key: str, canonical: str) -> FlagSpec:
        return _resolve_flag(key, canonical, _field(canonical), self.minor)[1]

    def tokens(self, key: str, canonical: str, spec: FlagSpec, value: object) -> list[str]:
        return _render(key, _field(canonical), spec, value, self.minor)


def _check_requires(key: str, field: Field, config: Mapping[str, object]) -> None:
    """A field that means something only beside another field's value (the file backend's).

    Raises:
        CompanionFieldError: the config does not set that value.
    """
    if field.requires is None:
        return
    need_field, need_value = field.requires
    if config.get(need_field) != need_value:
        raise CompanionFieldError(
            f"only applies with {need_field}={need_value!r} (got {config.get(need_field)!r})",
            field=key,
        )
