"""The sweep's stored spec read back: the spec itself (or the plain YAML when it no longer
validates), whether the sweep was simulated, the engine env, the objectives and the scenario
order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.report.collect.data import Direction, TrialInfo

if TYPE_CHECKING:
    from autotune.store.models import SweepRow


def stored_spec(row: SweepRow, notes: list[str]) -> tuple[Any, dict[str, Any] | None]:
    import yaml

    if not row.spec_yaml.strip():
        notes.append("the sweep stored no spec: objective and workload order are guessed")
        return None, None
    try:
        raw = yaml.safe_load(row.spec_yaml)
    except yaml.YAMLError:
        notes.append("the stored spec is not valid YAML")
        return None, None
    from autotune.errors import AutotuneError
    from autotune.sweep.spec import spec_from_yaml

    base = row.notes.get("spec_dir") if isinstance(row.notes, Mapping) else None
    try:
        spec = spec_from_yaml(
            row.spec_yaml,
            source=f"sweep {row.name} (stored spec)",
            base_dir=Path(base) if base else None,
        )
        return spec, raw
    except AutotuneError as exc:
        notes.append(f"the stored spec no longer validates ({exc}); read as plain YAML")
        return None, raw if isinstance(raw, dict) else None


def is_simulated(row: SweepRow, spec: Any) -> bool:
    if isinstance(row.notes, Mapping) and "simulated" in row.notes:
        return bool(row.notes["simulated"])
    return bool(spec is not None and spec.simulated)


def spec_env(spec: Any) -> dict[str, str]:
    return dict(spec.engine.env) if spec is not None else {}


def objective_refs(spec: Any) -> list[tuple[str, Direction]]:
    """(metric, direction) of each objective the spec names; ("value", "maximize") without one."""
    refs: list[tuple[str, Direction]] = []
    if spec is not None:
        refs = [(r.metric, r.direction or "maximize") for r in spec.objective_refs()]
    if not refs:
        refs = [("value", "maximize")]
    return refs


def scenario_order(spec: Any, trials: Sequence[TrialInfo]) -> list[str]:
    order: list[str] = []
    if spec is not None:
        from autotune.bench.scenarios import scenario_from_dict

        for raw in spec.workload.scenarios:
            try:
                order.append(scenario_from_dict(raw).label)
            except Exception:
                continue
    from autotune.quality.guard import SCENARIO

    for t in trials:
        for name in t.scenarios:
            if name not in order and name != SCENARIO:  # the quality probe has its own section
                order.append(name)
    return order
