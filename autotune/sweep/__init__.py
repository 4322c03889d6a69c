"""Engine sweeps: the spec, the trial a worker runs, executors (threads, Ray actors, the
simulator's analytic mode), and the orchestrator that asks Optuna, gates with the planner,
dispatches, stores and tells. Attributes load on first use (SQLAlchemy, Optuna and Ray stay
unimported until a sweep needs them).

    from autotune.sweep import load_spec, run_sweep
    spec, text = load_spec("examples/demo.yaml")
    outcome = run_sweep(spec, store=Store(path="autotune.db"), spec_yaml=text)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.sweep.analytic import AnalyticExecutor
    from autotune.sweep.control import StopController
    from autotune.sweep.executors import (
        Executor,
        InProcessExecutor,
    )
    from autotune.sweep.orchestrator import run_sweep
    from autotune.sweep.outcome import SweepOutcome
    from autotune.sweep.ray_executor import RayExecutor
    from autotune.sweep.spec import SweepSpec, load_spec, parse_spec, spec_from_yaml
    from autotune.sweep.trial import TrialResult, TrialSpec, run_trial

_WHERE = {
    "Executor": "executors",
    "InProcessExecutor": "executors",
    "RayExecutor": "ray_executor",
    "AnalyticExecutor": "analytic",
    "StopController": "control",
    "SweepOutcome": "outcome",
    "run_sweep": "orchestrator",
    "SweepSpec": "spec",
    "load_spec": "spec",
    "parse_spec": "spec",
    "spec_from_yaml": "spec",
    "TrialResult": "trial",
    "TrialSpec": "trial",
    "run_trial": "trial",
}

__all__ = [
    "AnalyticExecutor",
    "Executor",
    "InProcessExecutor",
    "RayExecutor",
    "StopController",
    "SweepOutcome",
    "SweepSpec",
    "TrialResult",
    "TrialSpec",
    "load_spec",
    "parse_spec",
    "run_sweep",
    "run_trial",
    "spec_from_yaml",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'autotune.sweep' has no attribute {name!r}")
    return getattr(importlib.import_module(f"autotune.sweep.{_WHERE[name]}"), name)
