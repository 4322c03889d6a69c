"""The one version type of autotune: `packaging.version.Version` (PEP 440), parsed here.

Every engine version autotune reads (`--engine-version`, `engine.version` in a sweep spec, a
rule's `engine_version` bound, a stored sweep) goes through `parse_version`, so `0.5.15.post1`,
`v0.11.0` and `0.20.2+cu128` mean the same thing everywhere. What a given engine supports is
decided by its flag catalog (autotune.engines.sglang.flags, autotune.engines.vllm.flags) on the
parsed value, not by a second parser.
"""

from __future__ import annotations

import contextlib

from packaging.version import InvalidVersion, Version

from autotune.errors import ConfigError

__all__ = ["Version", "base_release", "is_version", "parse_version", "release3", "try_version"]

VALID_FORMS = "a PEP 440 version such as 0.5.17, 0.5.15.post1, v0.11.0 or 0.20.2+cu128"


def parse_version(
    text: str | Version, *, field: str | None = None, source: str | None = None
) -> Version:
    """`text` as a Version (surrounding spaces and a leading `v` allowed).

    Raises:
        ConfigError: `text` is not a version; the message names `field` (and `source`) and the
            valid forms.
    """
    if isinstance(text, Version):
        return text
    if isinstance(text, str):
        with contextlib.suppress(InvalidVersion):  # refused below, naming the valid forms
            return Version(text.strip())
    raise ConfigError(
        f"{text!r} is not a version number (expected {VALID_FORMS})", field=field, source=source
    )


def try_version(text: object) -> Version | None:
    """`text` as a Version, or None when it is not one (numbers are read as their text)."""
    if isinstance(text, Version):
        return text
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        return None
    try:
        return Version(str(text).strip())
    except InvalidVersion:
        return None


def is_version(text: object) -> bool:
    """Whether `text` parses as a version."""
    return try_version(text) is not None


def release3(version: Version) -> tuple[int, int, int]:
    """The first three release numbers, zero-padded: `0.5.15.post1` -> (0, 5, 15)."""
    parts = (*version.release, 0, 0, 0)
    return (parts[0], parts[1], parts[2])


def base_release(version: Version) -> str:
    """The release the version is built from, without its post, pre, dev or local parts:
    `0.11.0.post2`, `0.11.0+cu128` -> `0.11.0`; `0.10.1.1` stays `0.10.1.1`. A post release or
    a local build carries its base's flags."""
    return version.base_version
