"""What a simulated engine process does before it serves, whichever engine it impersonates: load
the model card and the GPU, plan the launch with the engine's planner (`plan_launch`), report a
card or GPU it cannot find (`target_error`), and print the engine's pre-rendered lines
(`write_line`). Refusing a plan that does not fit and serving one that does are the engine's
(server.py, vllm_server.py)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from autotune.hardware.gpus import GPUSpec, get_gpu
from autotune.models.card import ModelCard
from autotune.models.registry import load_card
from autotune.sim.options import SimOptions

PlanT = TypeVar("PlanT")
PlanT_co = TypeVar("PlanT_co", covariant=True)


@dataclass(frozen=True)
class Launch(Generic[PlanT]):
    """The model card and GPU a simulated engine runs, and its planner's plan for them."""

    card: ModelCard
    gpu: GPUSpec
    plan: PlanT


class Planner(Protocol[PlanT_co]):
    """An engine's planner (planner.sglang.plan_sglang, planner.vllm.plan_vllm), as
    `plan_launch` calls it: every argument given."""

    def __call__(
        self,
        card: ModelCard,
        gpu: GPUSpec,
        config: dict[str, Any],
        /,
        *,
        version: str,
        tp: int,
        gpu_free_gib: float | None,
        host_free_gib: float | None,
    ) -> PlanT_co: ...


def plan_launch(
    planner: Planner[PlanT], ns: argparse.Namespace, config: dict[str, Any], sim: SimOptions
) -> Launch[PlanT]:
    """The card (--sim-model, else the engine's model argument), the GPU (--sim-gpu) and the
    plan for `config` on them.

    Raises:
        AutotuneError: an unknown card or GPU, or a configuration the planner refuses to read.
    """
    card = load_card(sim.model or ns.model_path)
    gpu = get_gpu(sim.gpu)
    plan = planner(
        card,
        gpu,
        config,
        version=sim.engine_version,
        tp=ns.tp_size,
        gpu_free_gib=sim.gpu_free_gib,
        host_free_gib=sim.host_free_gib,
    )
    return Launch(card, gpu, plan)


def target_error(sim: SimOptions, model_flag: str, exc: Exception) -> int:
    """Report a card or GPU `plan_launch` could not find (model_flag: the engine's model
    argument); the exit status, argparse's."""
    what = "--sim-model" if sim.model else f"{model_flag} (or --sim-model)"
    print(f"python -m autotune.sim: error: {what}/--sim-gpu: {exc}", file=sys.stderr)
    return 2


def write_line(line: str) -> None:
    """Print a line already in the engine's format (its timestamp filled in) on stderr."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
