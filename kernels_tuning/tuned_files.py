"""The tuned files an engine release can take: those whose sidecar names that release's kernel
fingerprint (files tuned on our own kernel, or on another engine kernel, never qualify), under
the release's own file name, with entries that carry only keys its kernel honours on the file's
architecture.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.engines.kernel_facts import KernelFacts, facts_for, known_versions
from autotune.errors import ConfigError
from kernels_tuning import output


@dataclass(frozen=True)
class TunedFile:
    source: Path
    sidecar: Path
    name: str  # under the installed release's file-name template
    tuned_on: str  # engine release whose kernel it was timed on
    arch: str | None
    table: Mapping[int, Mapping[str, Any]]
    gpu_name: str | None = None  # torch's name of the GPU it was tuned on (sidecar)


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
