"""The engine a real sweep will launch, checked against the release its spec follows.

A spec says which release's flags, defaults and memory rules apply (`target.engine_version`);
the engine that starts is whatever the launcher's interpreter has installed. When the two follow
different catalogued releases (an upgraded vLLM under an old spec, a nightly of a newer line),
every launch would get another release's argv and every plan another release's arithmetic, so
the sweep stops before its first launch and says which version to write. The version is read
from the distribution's metadata by that interpreter (sweep.starter.probe_engine_version: no
import of the engine). Launchers that are not a Python interpreter or a Python console script
(a container, a wrapper script) and interpreters without the engine are not checked: what they
start is not knowable from here, and a missing engine fails the first launch with its own error.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from autotune.errors import ConfigError

_PYTHON = re.compile(r"python(\d+(\.\d+)*)?")
# pip's console-script header for an interpreter path too long for a shebang line
_SH_EXEC = re.compile(r"^'''exec' \"?([^\" ]+)\"? ")


def launcher_python(argv0: str) -> str | None:
    """The Python interpreter a launcher's first word runs: itself (`python3`,
    `/opt/venv/bin/python`), or the interpreter of a console script (`vllm` installed by pip:
    its `#!` line, or pip's `'''exec'` header); None for anything else."""
    path = shutil.which(argv0)
    if path is None:
        return None
    if _PYTHON.fullmatch(Path(argv0).name):
        return path
    try:
        with open(path, "rb") as fh:
            head = fh.read(1024).decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    if not head or not head[0].startswith("#!"):
        return None
    words = head[0][2:].split()
    if words and Path(words[0]).name == "env":
        words = words[1:]
    if words and _PYTHON.fullmatch(Path(words[0]).name):
        return shutil.which(words[0])
    for line in head[1:3]:
        m = _SH_EXEC.match(line)
        if m and _PYTHON.fullmatch(Path(m[1]).name):
            return m[1]
    return None


def installed_version(engine: str, python: str) -> str | None:
    """The `engine` version `python` has installed (metadata only), None without one."""
    from autotune.sweep.starter import probe_engine_version

    try:
        return probe_engine_version(engine, python)
    except ConfigError:  # the interpreter cannot be asked: the first launch will say why
        return None


def check_installed_engine(
    engine: str, version: str, launcher: list[str] | tuple[str, ...] | None
) -> str | None:
    """The version the launcher's interpreter has installed when it follows the same catalogued
    release as `version`; None when there is nothing to check (see the module docstring).

    Raises:
        ConfigError: the installed engine follows another release (or none), naming
            target.engine_version and the version to write.
    """
    import importlib

    from autotune.planner.dispatch import followed

    if engine not in ("sglang", "vllm"):
        return None
    default = importlib.import_module(f"autotune.engines.{engine}").DEFAULT_LAUNCHER
    argv = list(launcher) if launcher else list(default)
    python = launcher_python(argv[0])
    found = installed_version(engine, python) if python else None
    if found is None:
        return None
    wanted = followed(engine, version)
    try:
        have = followed(engine, found).release
    except ConfigError:
        have = None
    if have == wanted.release:
        return found
    follows = f"follows {have}" if have else "is not a release autotune catalogues"
    spec = wanted.release if wanted.exact else f"{wanted.release} ({version})"
    raise ConfigError(
        f"the engine this sweep launches is {engine} {found} (installed for {python}), which "
        f"{follows}; the spec follows {spec}, so every launch would get {wanted.release}'s flags "
        f'and every plan its memory rules: set target.engine_version: "{found}" (`autotune '
        f"init --engine-python {python}` writes it), or point engine.launcher at an "
        f"interpreter with {engine} {wanted.release}",
        field="target.engine_version",
    )
