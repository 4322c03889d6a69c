"""Engine builds that are not catalogued releases, and the catalogued release each one follows.

People run more than PyPI releases: vLLM's nightly wheels and source builds (setuptools_scm
versions such as `0.19.2rc1.dev134+gfe9c3d6c5`, 134 commits after the v0.19.2rc0 tag), release
candidates (SGLang's `v0.5.10rc0` images), vendor builds (`0.11.0+582e4e37.nv25.11`) and patch
releases newer than the catalogue. Every flag, default and memory rule autotune applies is read
from a catalogued release's wheel, so a build follows exactly one catalogued release:

- a release, a post release or a local build of one: that release (post releases and local
  builds keep their release's flags);
- a pre-release or a development build: the release it leads to (its base version) when that is
  catalogued, else the newest catalogued release before it (a vLLM nightly built after 0.34.0
  is `0.34.1.devN`: 0.34.0);
- an uncatalogued release of a catalogued line (vLLM 0.34.1): the newest catalogued release before
  it.

A build of a newer line than the catalogue's newest (vLLM 0.35, SGLang 0.5.24) or of one older
than its first is refused: its flags and rules are unknown until its wheel is read, and the error
names the release to give instead to follow the newest catalogued one on purpose.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autotune.errors import ConfigError
from autotune.versions import Version, try_version

FIELD = "--engine-version"


@dataclass(frozen=True)
class Followed:
    """A build and the catalogued release whose flags and rules it gets."""

    engine: str  # label: SGLang, vLLM
    build: str  # as given or installed
    release: str  # catalogued release name
    kind: str  # release | pre-release | development build | uncatalogued release

    @property
    def exact(self) -> bool:
        """A catalogued release, a post release or a local build of one."""
        return self.kind == "release"

    def note(self) -> str | None:
        """What a plan, a starter spec or a report says about an inexact build; None for a
        release."""
        if self.exact:
            return None
        what = {
            "pre-release": "a pre-release",
            "development build": "a development build (a nightly wheel or a source build)",
            "uncatalogued release": "a release autotune has not catalogued",
        }[self.kind]
        parsed = try_version(self.build)
        same = parsed is not None and Version(parsed.base_version) == Version(self.release)
        which = (
            "the newest catalogued release before it"
            if not same
            else "the release it builds on"
            if parsed is not None and parsed.post is not None
            else "the release it leads to"
        )
        return (
            f"{self.engine} {self.build} is {what}: autotune follows {self.release}'s flags, "
            f"defaults and memory rules ({which}); a flag the build renamed or dropped fails "
            "the launch with the engine's own error"
        )


def follow(
    engine: str,
    version: str,
    releases: Sequence[str],
    *,
    line: int,
    forms: str,
    shape: Callable[[Version], bool] = lambda v: True,
) -> Followed:
    """The catalogued release (one of `releases`, oldest first) that `version` follows.
    `line` is how many leading release numbers name a release line (vLLM 2: 0.34.x; SGLang 3:
    every 0.5.N is its own line); `shape` refuses versions of another form (SGLang's 0.5.17.1);
    `forms` describes the accepted versions for the error.

    Raises:
        ConfigError: not a version, or a build older than the catalogue or of a newer line,
            naming --engine-version and the catalogued range.
    """
    parsed = try_version(version) if isinstance(version, str) else None
    catalogued = [Version(r) for r in releases]
    first, last = catalogued[0], catalogued[-1]
    base = (
        Version(parsed.base_version)
        if parsed is not None and not parsed.epoch and shape(parsed)
        else None
    )
    if parsed is None or base is None or base < first or _line(base, line) > _line(last, line):
        newer = base is not None and base > last
        hint = (
            f"; its flags and rules are read from its wheel once it is catalogued: use "
            f"{releases[-1]} to follow the newest catalogued release instead"
            if newer
            else ""
        )
        raise ConfigError(
            f"unsupported {engine} version {version!r}; supported: {releases[0]} to "
            f"{releases[-1]} ({forms}){hint}",
            field=FIELD,
        )
    at_or_before = [r for r, v in zip(releases, catalogued, strict=True) if v <= base]
    release = at_or_before[-1]
    if Version(release) == base and not (parsed.is_prerelease or parsed.is_devrelease):
        kind = "release"
    elif parsed.is_devrelease:
        kind = "development build"
    elif parsed.is_prerelease:
        kind = "pre-release"
    else:
        kind = "uncatalogued release"
    return Followed(engine=engine, build=version.strip(), release=release, kind=kind)


def _line(version: Version, depth: int) -> tuple[int, ...]:
    return (*version.release, *(0,) * depth)[:depth]
