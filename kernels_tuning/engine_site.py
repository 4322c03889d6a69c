"""Where an engine release is installed, which release it is, and the folder its own config
lookup reads, found without importing the engine: its top-level package with
importlib.util.find_spec and its version from the distribution's metadata, in this interpreter,
in a site-packages folder, or in another interpreter (which runs PROBE). The release's catalogued
facts (autotune.engines.kernel_facts) must match what is on disk.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.engines.kernel_derive import installed_facts
from autotune.engines.kernel_facts import ENGINE_DISTS, KernelFacts, facts_for, is_catalogued
from autotune.errors import ConfigError
from autotune.versions import try_version

# Distribution names that install each engine's top-level package.

# Runs here (exec) and in another interpreter (python -c): where the package is and which
# distribution version installed it, without importing the engine.
PROBE = r"""
import importlib.metadata as md, importlib.util, os, sys

def probe(name, dists):
    out = {"python": sys.executable, "site": None, "version": None}
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return out
    out["site"] = os.path.dirname(list(spec.submodule_search_locations)[0])
    found = [d for d in md.distributions(path=[out["site"]])
             if (d.metadata["Name"] or "").lower().replace("_", "-") in dists]
    if not found:  # an editable install keeps its metadata elsewhere
        found = [d for d in md.distributions()
                 if (d.metadata["Name"] or "").lower().replace("_", "-") in dists]
    if found:
        out["version"] = found[0].version
    return out
"""


@dataclass(frozen=True)
class EngineSite:
    """An engine installation as found on disk."""

    engine: str
    version: str | None
    version_source: str
    site: Path | None  # the folder holding the engine's package (site-packages)
    python: str | None = None
    # False when --engine-version names another version than the installed distribution's
    metadata_agrees: bool = True


def find_engine(
    engine: str,
    *,
    site_packages: Path | None = None,
    engine_python: str | None = None,
    engine_version: str | None = None,
) -> EngineSite:
    """Where the engine is installed and which release, without importing it."""
    if engine not in ENGINE_DISTS:
        raise ConfigError(
            f"expected one of {sorted(ENGINE_DISTS)}, got {engine!r}", field="--engine"
        )
    dists = ENGINE_DISTS[engine]
    if site_packages is not None:
        if not (site_packages / engine).is_dir():
            raise ConfigError(f"no {engine}/ package folder here", source=str(site_packages))
        version = _dist_version(site_packages, dists)
        found = EngineSite(engine, version, f"metadata in {site_packages}", site_packages)
    elif engine_python is not None:
        info = run_probe(engine_python, engine, dists)
        found = EngineSite(
            engine,
            info.get("version"),
            f"metadata seen by {engine_python}",
            Path(info["site"]) if info.get("site") else None,
            engine_python,
        )
    else:
        ns: dict[str, Any] = {}
        exec(PROBE, ns)  # the same probe another interpreter runs
        info = ns["probe"](engine, dists)
        found = EngineSite(
            engine,
            info["version"],
            "metadata of this interpreter",
            Path(info["site"]) if info["site"] else None,
            info["python"],
        )
    if engine_version is not None:
        source = "--engine-version"
        agrees = not (found.version and _same(found.version, engine_version) is False)
        if not agrees:
            source += f" (the installed distribution says {found.version})"
        return EngineSite(engine, engine_version, source, found.site, found.python, agrees)
    return found


def _dist_version(site: Path, dists: Sequence[str]) -> str | None:
    import importlib.metadata as md

    for d in md.distributions(path=[str(site)]):
        if (d.metadata["Name"] or "").lower().replace("_", "-") in dists:
            return str(d.version)
    return None


def run_probe(
    python: str, engine: str, dists: Sequence[str], env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """What interpreter `python` sees of `engine` (PROBE run there: version, site folder, the
    interpreter), read from the distributions `dists` without importing the engine; `env`: the
    environment it runs with (default: this process's)."""
    script = PROBE + f"\nimport json; print(json.dumps(probe({engine!r}, {list(dists)!r})))\n"
    try:
        res = subprocess.run(
            [python, "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env=None if env is None else dict(env),
        )
        info = json.loads(res.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError, IndexError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        raise ConfigError(
            f"cannot ask this interpreter where {engine} is: {detail}", field="--engine-python"
        ) from None
    return dict(info)


def _same(a: str, b: str) -> bool | None:
    va, vb = try_version(a), try_version(b)
    if va is None or vb is None:
        return None
    return va.public == vb.public


def release_facts(found: EngineSite, *, have_target: bool) -> KernelFacts:
    """The facts of the found release; refuses a missing engine, an unknown release or a
    package whose layout is not the catalogued one."""
    engine = found.engine
    if found.version is None:
        if found.site is None:
            where = (
                f"--engine-python {found.python}"
                if "seen by" in found.version_source
                else f"this interpreter ({found.python})"
            )
            hint = (
                "give --engine-version V with --target"
                if have_target
                else "point at it with --engine-python PY or --site-packages DIR, or give "
                "--target DIR with --engine-version V"
            )
            raise ConfigError(f"{engine} is not installed in {where}: {hint}", field="--engine")
        raise ConfigError(
            f"{engine} found in {found.site} but not its version (no {engine} .dist-info "
            "there): give --engine-version V",
            field="--engine-version",
        )
    version = found.version
    # a local build tag (+cpu) names the same sources; an unparsable one is refused by
    # facts_for, naming the known releases
    parsed = try_version(version)
    if parsed is not None:
        version = parsed.public
    if (
        found.site is not None
        and parsed is not None
        and found.metadata_agrees
        and not is_catalogued(engine, version)
    ):
        # a nightly or a source build that its metadata (or --engine-version agreeing with it)
        # names: its facts are read from its installed source; a version that the installed
        # distribution contradicts must be a catalogued release
        return installed_facts(engine, found.version, found.site)
    facts = facts_for(engine, version)
    if found.site is not None and not (found.site / facts.lookup_module).is_file():
        raise ConfigError(
            f"unknown layout: {engine} {version} should have {facts.lookup_module} (the module "
            f"whose {facts.lookup_function} reads the configs), but {found.site} has none; "
            "this is not the catalogued release (check --engine-version) or a patched build",
            source=str(found.site),
        )
    return facts


def destination(facts: KernelFacts, found: EngineSite, target: Path | None) -> tuple[Path, Path]:
    """(folder to write, site it implies): the release's config_dir, under the found site or
    given as --target, which must end in that same path (the lookup reads nothing else)."""
    parts = tuple(facts.config_dir.split("/"))
    if target is None:
        if found.site is None:
            raise ConfigError(f"{facts.engine} is not installed here: give --target DIR")
        return found.site / facts.config_dir, found.site
    t = Path(os.path.abspath(target))
    if t.parts[-len(parts) :] != parts:
        raise ConfigError(
            f"{facts.engine} {facts.version} reads <site-packages>/{facts.config_dir} "
            f"({facts.lookup_module}:{facts.lookup_function}); --target {target} is not such a "
            "folder, so the engine would never read what is written there",
            field="--target",
        )
    return t, t.parents[len(parts) - 1]
