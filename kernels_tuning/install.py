"""Install tuned block-FP8 files where the installed engine release reads them, and prove it.

`autotune kernels install` (autotune/cli/kernels.py) is a thin wrapper over `install()`:

1. find the engine without importing it (its top-level package with importlib.util.find_spec,
   its version from the distribution's metadata), in this interpreter, in `--site-packages
   DIR`, or in another interpreter (`--engine-python`, which runs PROBE);
2. take that release's catalogued facts (autotune.engines.kernel_facts): a package without the
   catalogued lookup module is refused; a build no catalogued release is (a nightly, a source
   build, as its own metadata says) has its facts read from its installed source
   (autotune.engines.kernel_derive), and one whose kernel path cannot be followed is refused;
3. choose the files tuned on that release's kernel: a sidecar whose engine_kernel_fingerprint
   equals the release's (files tuned on our own kernel, or on another engine kernel, never
   qualify), whose entries carry only keys the kernel honours on the sidecar's architecture;
4. copy them all or none (temporaries in the destination, then renames; any failure restores
   what was there), under the release's own file name;
5. run the release's own lookup function, its source taken from the installed module and
   executed with that module's path as `__file__`, and check that it returns every file
   ("engine-source"); where that source cannot be run, reproduce its path computation from the
   catalog ("catalog"). A file the lookup does not find undoes the install.

Steps 1-2 live in kernels_tuning.engine_site, 3 in kernels_tuning.tuned_files, 4 in
kernels_tuning.atomic_copy and 5 in kernels_tuning.lookup_proof; their public names are
importable from here too.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.engines.kernel_facts import ENGINE_DISTS, KernelFacts, is_catalogued
from autotune.errors import AutotuneError
from kernels_tuning.atomic_copy import Copied, copy_all_or_nothing
from kernels_tuning.engine_site import (
    PROBE,
    EngineSite,
    destination,
    find_engine,
    release_facts,
    run_probe,
)
from kernels_tuning.lookup_proof import FileProof, Proof, engine_lookup, prove
from kernels_tuning.tuned_files import TunedFile, check_keys, select_files

__all__ = [
    "ENGINE_DISTS",
    "PROBE",
    "Copied",
    "EngineSite",
    "FileProof",
    "InstallProofError",
    "InstallResult",
    "Proof",
    "TunedFile",
    "check_keys",
    "copy_all_or_nothing",
    "destination",
    "engine_lookup",
    "find_engine",
    "install",
    "prove",
    "release_facts",
    "run_probe",
    "select_files",
]


class InstallProofError(AutotuneError):
    """The engine's own lookup did not find an installed file (the install was undone)."""


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
    def facts_from(self) -> str:
        """`catalog`, or `installed source` for a build no catalogued release is (a nightly)."""
        catalogued = is_catalogued(self.facts.engine, self.facts.version)
        return "catalog" if catalogued else "installed source"

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
            "facts_from": self.facts_from,
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
