"""The engine a real sweep will launch, checked against the release its spec follows.

A spec says which release's flags, defaults and memory rules apply (`target.engine_version`);
the engine that starts is whatever the launcher's interpreter has installed. When the two follow
different catalogued releases (an upgraded vLLM under an old spec), every launch would get
another release's argv and every plan another release's arithmetic, so the sweep stops before its
first launch and says which version to write. The version is read from the distribution's
metadata by that interpreter, with the launch's environment (no import of the engine).

The driver checks its own machine before the first launch (orchestrator.check_target); every
worker checks its own before it launches (`worker_mismatch`, once per worker process), since a
Ray trial starts on whichever node Ray places it and each node has its own install. What a
launcher that is not a Python interpreter or console script starts (a container image, a
wrapper script) is not knowable before it runs: once such an engine is ready, the release it
reports (vLLM's log line or GET /version, SGLang's GET /server_info) is checked the same way
before anything is measured (`served_mismatch`, sweep/trial_serving.py). A mismatch fails the
trial as ENGINE_MISMATCH, and the sweep stops at once (sweep/recording.py), the configuration
queued to run again on --resume. An interpreter without the engine is not refused here: the
first launch fails with its own error. An installed build of
a newer line than the catalogue passes when the spec follows the newest catalogued release, as
the refusal of that build tells the user to do.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from autotune.errors import ConfigError

FIELD = "target.engine_version"
CHECKED_ENGINES = ("sglang", "vllm")  # whose releases the catalogue follows (engines/builds.py)
_PYTHON = re.compile(r"python(\d+(\.\d+)*)?")
# pip's (double quotes) and uv's (single quotes) console-script header for an interpreter path
# that a `#!` line cannot hold
_SH_EXEC = re.compile(r"^'''exec' (?:\"([^\"]+)\"|'([^']+)'|(\S+)) ")


def launcher_python(argv0: str, path: str | None = None) -> str | None:
    """The Python interpreter a launcher's first word runs: itself (`python3`,
    `/opt/venv/bin/python`), or the interpreter of a console script (`vllm` installed by pip:
    its `#!` line, or pip's and uv's `exec` header); None for anything else. `path`: the PATH
    the launch gets."""
    exe = shutil.which(argv0, path=path)
    if exe is None:
        return None
    if _PYTHON.fullmatch(Path(argv0).name):
        return exe
    try:
        with open(exe, "rb") as fh:
            head = fh.read(1024).decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    if not head or not head[0].startswith("#!"):
        return None
    words = head[0][2:].split()
    if words and Path(words[0]).name == "env":
        words = [w for w in words[1:] if not w.startswith("-")]  # `env -S python3`
    if words and _PYTHON.fullmatch(Path(words[0]).name):
        return shutil.which(words[0], path=path)
    for line in head[1:3]:
        m = _SH_EXEC.match(line)
        interpreter = next((g for g in m.groups() if g), None) if m else None
        if interpreter and _PYTHON.fullmatch(Path(interpreter).name):
            return interpreter
    return None


def installed_version(engine: str, python: str, env: Mapping[str, str]) -> str | None:
    """The `engine` version `python` has installed (metadata only, run with the launch's
    environment `env`), None without one."""
    from autotune.sweep.starter import probe_engine_version

    try:
        return probe_engine_version(engine, python, env)
    except ConfigError:  # the interpreter cannot be asked: the first launch will say why
        return None


def check_installed_engine(
    engine: str,
    version: str,
    launcher: Sequence[str] | None,
    env: Mapping[str, str] | None = None,
) -> str | None:
    """The version the launcher's interpreter has installed when the spec may launch it; None
    when there is nothing to check (see the module docstring). `env`: what engine.env adds to
    the launch's environment (PATH, PYTHONPATH or a virtualenv change what is found).

    Raises:
        ConfigError: the installed engine follows another release than the spec, naming
            target.engine_version and the version to write.
    """
    import importlib

    if engine not in CHECKED_ENGINES:
        return None
    default = importlib.import_module(f"autotune.engines.{engine}").DEFAULT_LAUNCHER
    argv = list(launcher) if launcher else list(default)
    launch_env = {**os.environ, **(env or {})}
    python = launcher_python(argv[0], launch_env.get("PATH"))
    found = installed_version(engine, python, launch_env) if python else None
    if found is None:
        return None
    judge(
        engine,
        version,
        found,
        what=f"the engine this sweep launches is {{label}} {found} (installed for {python})",
        fix_same=f"`autotune init --engine-python {python}`",
        elsewhere="point engine.launcher at an interpreter with",
    )
    return found


def judge(
    engine: str, version: str, found: str, *, what: str, fix_same: str, elsewhere: str
) -> None:
    """Whether an engine of version `found` may serve a spec following `version`: the same
    catalogued release, or a newer line when the spec follows the newest catalogued release on
    purpose (what the refusal of such a build says to do). `what` opens the refusal ("{label}"
    stands for the engine's name), `fix_same` says how to write the found version into the spec
    and `elsewhere` how to run the spec's release instead.

    Raises:
        ConfigError: on target.engine_version, naming the version to write.
    """
    from autotune.planner.dispatch import followed

    try:
        wanted = followed(engine, version)
    except ConfigError as exc:  # the spec's own version: its field, not a CLI flag
        raise ConfigError(str(exc).removeprefix("--engine-version: "), field=FIELD) from None
    try:
        have: str | None = followed(engine, found).release
    except ConfigError:
        have = None
    newest = _newest(engine)
    newer = _newer(found, newest)
    if have == wanted.release or (have is None and newer and wanted.release == newest):
        return
    label = wanted.engine
    spec = wanted.release if wanted.exact else f"{wanted.release} ({version})"
    if have is not None:
        follows = f"follows {have}"
        fix = f'set target.engine_version: "{found}" ({fix_same})'
    elif newer:
        follows = "is newer than any release autotune catalogues"
        fix = f'set target.engine_version: "{newest}" to follow the newest catalogued release'
    else:
        follows = "is not a release autotune catalogues"
        fix = "install a catalogued release"
    raise ConfigError(
        f"{what.format(label=label)}, which {follows}; the spec follows {spec}, so every "
        f"launch would get {wanted.release}'s flags and every plan its memory rules: {fix}, "
        f"or {elsewhere} {label} {wanted.release}",
        field=FIELD,
    )


def served_mismatch(engine: str, version: str, reported: str, source: str) -> str | None:
    """Why a ready engine that reports release `reported` (`source`: where it said so) must not
    be measured for a spec following `version`, None when it may: the check for launchers
    that nothing before the launch can read (a container image, a wrapper script)."""
    try:
        judge(
            engine,
            version,
            reported,
            what=f"the engine serving this trial is {{label}} {reported} ({source})",
            fix_same="the release engine.launcher runs",
            elsewhere="point engine.launcher at",
        )
    except ConfigError as exc:
        return str(exc)
    return None


def worker_mismatch(
    engine: str,
    version: str,
    launcher: Sequence[str] | None,
    env: Mapping[str, str] | None = None,
) -> str | None:
    """Why this worker must not launch a trial of a spec following `version` (the installed
    engine follows another release), None when it may. An install that passed is not asked
    again by this process for the same launcher and search path (a sweep does not change
    it); one that failed is asked again, so that a fixed install is seen on --resume."""
    key = (
        engine,
        version,
        tuple(launcher) if launcher else None,
        tuple((k, (env or {}).get(k)) for k in _FINDING_VARS),
    )
    if key in _PASSED:
        return None
    try:
        check_installed_engine(engine, version, launcher, env)
    except ConfigError as exc:
        return str(exc)
    _PASSED.add(key)
    return None


# what changes which interpreter and which packages a launch finds (other values, API keys
# among them, stay out of the process-wide memo)
_FINDING_VARS = ("PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "VIRTUAL_ENV")
_PASSED: set[tuple[object, ...]] = set()


def _newest(engine: str) -> str:
    if engine == "vllm":
        from autotune.engines.vllm.releases import supported_versions

        return supported_versions()[-1]
    from autotune.engines.sglang.flags import SUPPORTED_VERSIONS

    return SUPPORTED_VERSIONS[-1]


def _newer(version: str, newest: str) -> bool:
    """Whether `version` is past the newest catalogued release (a newer line)."""
    from autotune.versions import Version, try_version

    v = try_version(version)
    return v is not None and v > Version(newest)
