"""Where the results come from: engine, GPU and driver, the model's hash, the spec's hash,
autotune's versions, the sweep's times and the database."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.planner.dispatch import engine_label, is_cpu_target
from autotune.report.collect.data import Provenance, TrialInfo

if TYPE_CHECKING:
    from autotune.store.db import Store
    from autotune.store.models import SweepRow


def gpu_spec(name: str) -> Any:
    from autotune.errors import AutotuneError
    from autotune.hardware.gpus import get_gpu

    try:
        return get_gpu(name)
    except AutotuneError:
        return None


def _driver(row: SweepRow, simulated: bool) -> str:
    meta = row.notes if isinstance(row.notes, Mapping) else {}
    # notes["driver"] is the sweep's driver process (PID, host), not the GPU driver.
    for key in ("nvidia_driver", "driver_version"):
        if isinstance(meta.get(key), str) and meta[key]:
            return str(meta[key])
    if simulated:
        return "n/a (simulated)"
    if is_cpu_target(row.gpu):
        return "n/a (CPU run, no GPU)"
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        text = v.decode() if isinstance(v, bytes) else str(v)
        return f"{text} (read when the report was written)"
    except Exception:
        return "n/a (no NVIDIA driver where the report was written; the sweep stored none)"


MODEL_FILE_HEAD_BYTES = 4 * 2**20  # a GGUF header (metadata, vocabulary, tensor table)


def model_hash(model: str) -> str:
    """A built-in card: hash of its JSON; a folder: hash of config.json and the safetensors
    headers' names and sizes (not the tensors: gigabytes)."""
    from autotune.models.builtin import BUILTIN_CARDS

    if model in BUILTIN_CARDS:
        blob = BUILTIN_CARDS[model].model_dump_json().encode()
        return f"built-in card, sha256 {hashlib.sha256(blob).hexdigest()[:16]}"
    path = Path(model).expanduser()
    if path.is_file():  # one file (a GGUF): its size and header, not gigabytes of tensors
        h = hashlib.sha256(str(path.stat().st_size).encode())
        with open(path, "rb") as fh:
            h.update(fh.read(MODEL_FILE_HEAD_BYTES))
        return f"file (size + first {MODEL_FILE_HEAD_BYTES // 2**20} MiB), sha256 {h.hexdigest()[:16]}"
    if not path.is_dir():
        return "n/a (model folder not found where the report was written)"
    h = hashlib.sha256()
    cfg = path / "config.json"
    if cfg.is_file():
        h.update(cfg.read_bytes())
    for f in sorted(path.glob("*.safetensors")):
        h.update(f.name.encode())
        h.update(str(f.stat().st_size).encode())
        with open(f, "rb") as fh:
            head = fh.read(8)
            if len(head) == 8:
                n = int.from_bytes(head, "little")
                if 0 < n < 100 * 2**20:
                    h.update(fh.read(n))
    return f"folder (config.json + safetensors headers), sha256 {h.hexdigest()[:16]}"


def sweep_provenance(
    store: Store, row: SweepRow, spec: Any, simulated: bool, trials: Sequence[TrialInfo]
) -> Provenance:
    from autotune import __version__

    gpu = gpu_spec(row.gpu)
    meta = row.notes if isinstance(row.notes, Mapping) else {}
    starts = [t.started_at for t in trials if t.started_at is not None]
    ends = [t.finished_at for t in trials if t.finished_at is not None]
    model = row.model or (spec.target.model if spec is not None else "")
    engine = row.engine or (spec.target.engine if spec is not None else "sglang")
    return Provenance(
        engine=engine,
        engine_label=engine_label(engine),
        engine_version=row.engine_version,
        gpu=row.gpu,
        gpu_label=gpu.label
        if gpu is not None
        else ("CPU (no GPU)" if is_cpu_target(row.gpu) else None),
        tp=spec.target.tp if spec is not None else 1,
        driver=_driver(row, simulated),
        model=model,
        model_hash=str(meta.get("model_hash") or model_hash(model)),
        spec_hash=row.spec_hash,
        autotune_version_sweep=str(meta["autotune_version"])
        if meta.get("autotune_version")
        else None,
        autotune_version_report=__version__,
        sweep_created=row.created_at,
        sweep_updated=row.updated_at,
        first_trial_started=min(starts) if starts else None,
        last_trial_finished=max(ends) if ends else None,
        generated_at=datetime.now(UTC),
        db=store.display_url,
        optuna_study=row.optuna_study_name,
    )
