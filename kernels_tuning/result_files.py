"""The files a tuning run writes: results grouped by shape and merge-written, atomically
(kernels_tuning.output), as the engine files and our own, each with its provenance sidecar; on an
engine release's own kernel, the file that release reads (`write_engine_file`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kernels_tuning.work_items import ItemResult, us_or_none


def write_outputs(
    results: Iterable[ItemResult],
    out_dir: Path,
    device_name: str,
    provenance: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Group results by (kind, N, K) and merge-write the engine and our own files."""
    from kernels_tuning import output as O

    groups: dict[tuple[str, int, int, str], list[ItemResult]] = {}
    engine_groups: dict[tuple[str, int, int], list[ItemResult]] = {}
    for r in results:
        if r.best is not None and r.item.engine:
            engine_groups.setdefault((r.item.engine, r.item.n, r.item.k), []).append(r)
        elif r.best is not None:
            groups.setdefault(r.item.shape_key, []).append(r)
    written: list[Path] = [
        write_engine_file(rs, out_dir, device_name, provenance)
        for _key, rs in sorted(engine_groups.items())
    ]
    for (kind, n, k, packing), rs in sorted(groups.items()):
        rs.sort(key=lambda r: r.item.m)
        base = dict(provenance) if provenance is not None else O.current_provenance(kind).to_json()
        base["kernel"] = kind
        base["kernel_sha256"] = O.kernel_source_sha256(kind)

        def prov(entries: dict[str, dict[str, Any]], base: dict[str, Any] = base) -> O.Provenance:
            p = O.Provenance.from_json(base)
            p.entries = entries
            return p

        own_entries = _entries(rs, engine=False)
        if kind == "fp8":
            eng = {
                r.item.m: r.engine_best.as_dict(engine=True)
                for r in rs
                if r.engine_best is not None
            }
            eng_entries = _entries(rs, engine=True)
            for sub, name in (
                ("sglang", O.sglang_filename(n, k, device_name)),
                ("vllm", O.vllm_filename(n, k, device_name)),
            ):
                path = out_dir / sub / name
                O.merge_write(path, eng)
                O.write_provenance(path, prov(eng_entries))
                written.append(path)
            own = out_dir / "autotune" / O.fp8_splitk_filename(n, k, device_name)
        else:
            own = out_dir / "autotune" / O.int4_filename(n, k, device_name, 128, packing)
        O.merge_write(own, {r.item.m: r.best.as_dict() for r in rs if r.best is not None})
        O.write_provenance(own, prov(own_entries))
        written.append(own)
    return written


def _entries(rs: Iterable[ItemResult], *, engine: bool) -> dict[str, dict[str, Any]]:
    """The sidecar's per-M figures of one file: the engine winner's (`engine`) or our own."""
    return {
        str(r.item.m): {
            "us": us_or_none(r.engine_best_us if engine else r.best_us),
            "evaluations": r.evaluations,
            "space": r.space_size,
            "default_us": r.default_us,
        }
        for r in rs
        if not engine or r.engine_best is not None
    }


def write_engine_file(
    rs: list[ItemResult],
    out_dir: Path,
    device_name: str,
    provenance: Mapping[str, Any] | None = None,
) -> Path:
    """One shape's results on an engine release's own kernel: the file that release reads, named
    and keyed as it reads it (only the keys it honours on this architecture), under
    OUT/ENGINE/VERSION/, with a sidecar naming the release and its kernel fingerprint."""
    from kernels_tuning import output as O
    from kernels_tuning.engine_kernel import honoured_config
    from kernels_tuning.engine_space import EngineTarget

    rs = sorted(rs, key=lambda r: r.item.m)
    target = EngineTarget.parse(rs[0].item.engine)
    facts = target.facts()
    base = dict(provenance) if provenance is not None else O.current_provenance("fp8").to_json()
    arch = str(base.get("arch") or "")
    base.update(
        kernel="fp8",
        kernel_sha256="",
        engine=facts.engine,
        engine_version=facts.version,
        engine_kernel_fingerprint=facts.kernel_fingerprint,
    )
    prov = O.Provenance.from_json(base)
    prov.entries = _entries(rs, engine=True)
    table = {
        r.item.m: honoured_config(r.engine_best.as_dict(), facts, arch)
        for r in rs
        if r.engine_best is not None
    }
    path = out_dir / facts.engine / facts.version
    path = path / facts.file_name_for(rs[0].item.n, rs[0].item.k, device_name)
    O.merge_write(path, table)
    O.write_provenance(path, prov)
    return path
