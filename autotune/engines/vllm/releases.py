"""The catalogued vLLM releases (0.10.0 .. 0.34.0) and what the generated catalog says of each:
release names and their order, the flags `vllm serve` defines, and the speculative methods
SpeculativeConfig takes.

`_catalog.py` is generated from the PyPI wheels with `ast` (tests/engines/regen_vllm_catalog.py):
`CATALOG` rows are `flag|first-last|kind|dest|choices` (release names; kind as in
autotune.engines._flags.FlagKind, `!` deprecated), `SPECULATIVE_METHODS` rows `first-last|methods`,
`COMPILATION_KEYS` rows `first-last|keys`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from autotune.engines._flags import CatalogFlag, read_catalog
from autotune.engines.builds import Followed, follow


@functools.cache
def supported_versions() -> tuple[str, ...]:
    """Every vLLM release whose flags are catalogued, oldest first."""
    from autotune.engines.vllm._catalog import VERSIONS

    return VERSIONS


def parse_version(version: str) -> str:
    """The catalogued release whose flags `version` gets (`v0.11.0`, `0.11.0.post2` and
    `0.11.0+cu128` use 0.11.0's; a nightly `0.34.1.dev5+g0123abc` 0.34.0's: see
    autotune.engines.builds).

    Raises:
        ConfigError: a build older than the catalogue or of a newer release line, naming
            --engine-version and the range.
    """
    return followed_release(version).release


def followed_release(version: str) -> Followed:
    """The catalogued release a vLLM build follows, and what kind of build it is."""
    return _followed(version if isinstance(version, str) else repr(version))


@functools.cache
def _followed(version: str) -> Followed:
    vs = supported_versions()
    return follow(
        "vLLM",
        version,
        vs,
        line=2,
        forms=f"a release such as {', '.join(vs[-3:])}, a post, local, release-candidate or "
        f"development build of one, or of {vs[-1].rsplit('.', 1)[0]}.x",
    )


def release_index(release: str) -> int:
    """Position of a catalogued release name (exactly as catalogued) in the catalogue."""
    return supported_versions().index(release)


def release_name(index: int) -> str:
    """The catalogued release at position `index`."""
    return supported_versions()[index]


def version_index(version: str) -> int:
    """Position of the release in the catalogue (for ordering versions)."""
    return release_index(parse_version(version))


# The first release whose KV cache is sized after warmup by default on CUDA and ROCm: the
# extensible KV cache (config/cache.py enable_extensible_kv_cache, vllm-project/vllm#56492).
EXTENSIBLE_KV_CACHE_SINCE = "0.34.0"


def at_least(version: str, first: str) -> bool:
    """Whether `version` is the release `first` or newer."""
    return version_index(version) >= release_index(first)


@dataclass(frozen=True)
class FlagSpec(CatalogFlag):
    """One flag as `vllm serve` defines it over a range of releases (catalogue indices)."""

    choices: tuple[str, ...]


def _row_spec(common: CatalogFlag, cells: list[str]) -> FlagSpec:
    """A catalog row: the common cells, then `choices`."""
    (choices,) = cells
    return FlagSpec(**vars(common), choices=tuple(choices.split()))


@functools.cache
def flag_catalog() -> dict[str, tuple[FlagSpec, ...]]:
    """{flag: its specs over ranges of releases}, every long option of `vllm serve`."""
    from autotune.engines.vllm._catalog import CATALOG

    return read_catalog(CATALOG, _row_spec, release_index)


def _ranges(rows: str) -> tuple[tuple[int, int, tuple[str, ...]], ...]:
    """`first-last|names` rows as (first, last, names) over catalogue indices."""
    out = []
    for row in rows.splitlines():
        span, names = row.split("|")
        first, last = span.split("-")
        out.append((release_index(first), release_index(last), tuple(names.split())))
    return tuple(out)


@functools.cache
def method_ranges() -> tuple[tuple[int, int, tuple[str, ...]], ...]:
    """(first, last, methods): the SpeculativeConfig methods over ranges of catalogue indices."""
    from autotune.engines.vllm._catalog import SPECULATIVE_METHODS

    return _ranges(SPECULATIVE_METHODS)


@functools.cache
def compilation_ranges() -> tuple[tuple[int, int, tuple[str, ...]], ...]:
    """(first, last, keys): the CompilationConfig JSON keys over ranges of catalogue indices."""
    from autotune.engines.vllm._catalog import COMPILATION_KEYS

    return _ranges(COMPILATION_KEYS)


def compilation_keys(version: str) -> tuple[str, ...]:
    """The keys `--compilation-config` JSON may hold in `version` (CompilationConfig's fields)."""
    i = version_index(version)
    return next(k for a, b, k in compilation_ranges() if a <= i <= b)


def speculative_methods(version: str) -> tuple[str, ...]:
    """The values SpeculativeConfig.method accepts in `version`."""
    i = version_index(version)
    return next(m for a, b, m in method_ranges() if a <= i <= b)
