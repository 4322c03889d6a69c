"""The sweep's gate before any launch: rules, the memory planner of the target's engine
(autotune.planner.dispatch), the workload's needs, and the planner's correction from what real
launches reported.

Rules test target facts; a target that cannot state some (a GGUF model has no ModelCard
quantization scheme, a CPU target has no gpu.* facts) skips the rules that test them: they are
listed in `skipped_rules` and the sweep notes them, rather than being decided on made-up values.

The planner mirrors the engine's accounting, but a real engine allocates a KV pool a few percent
off the prediction (driver reserve, allocator slack, a version's quirk). Every launch reports the
pool it got; later predictions are corrected by what those launches showed, so a configuration
whose corrected pool cannot hold the workload is pruned before it wastes a launch. Two models of
the miss are tried in turn. Where the startup lines state the free memory before the weights and
what the weights took (SGLang's `Load weight begin/end`), the machine's own figures are learnt
and the planner plans again with them ("memory"): a driver that takes more, an allocator that
holds more than the checkpoint. Where they state the available KV memory (vLLM), the pool scales
with that memory's shift ("kv_memory"). Otherwise a constant share (actual/predicted, e.g. a cell the
engine sizes differently) and a constant amount of memory (bytes per launch) compete; with two
launches or more the one that would have predicted the others better (leave-one-out) wins.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from autotune.calibration.calibrate import memory_shifts
from autotune.hardware.gpus import GPUSpec
from autotune.space.models import SearchSpace
from autotune.space.rules import Rule, check

if TYPE_CHECKING:
    from autotune.planner.dispatch import TargetModel

# Samples kept for the running correction (a night's sweep has a few hundred launches).
MAX_SAMPLES = 200


class Assessment(BaseModel):
    """The gate's verdict on one configuration."""

    fits: bool
    reasons: list[str] = Field(default_factory=list, description="why it is pruned")
    rule_ids: list[str] = Field(default_factory=list, description="rules it breaks")
    plan: dict[str, Any] | None = None
    predicted_kv_pool_tokens: int | None = None
    corrected_kv_pool_tokens: int | None = None
    kv_ratio: float = 1.0
    headroom_gib: float | None = Field(
        None, description="predicted free GPU memory at peak load: slack - activations/graphs"
    )
    constraints: dict[str, float] = Field(
        default_factory=dict, description="Optuna constraints (> 0: violated)"
    )

    def prediction(self) -> dict[str, Any]:
        """What is stored with the trial (TrialRow.prediction)."""
        return {
            "fits": self.fits,
            "reasons": self.reasons,
            "rules": self.rule_ids,
            "kv_pool_tokens": self.predicted_kv_pool_tokens,
            "kv_pool_tokens_corrected": self.corrected_kv_pool_tokens,
            "kv_ratio": self.kv_ratio,
            "headroom_gib": self.headroom_gib,
            "constraints": self.constraints,
            "plan": self.plan,
        }


GIB = 1024**3


@dataclass(frozen=True)
class KVSample:
    """One launch's KV pool: predicted (uncorrected), allocated, bytes per token."""

    predicted: int
    actual: int
    cell: int | None
    free_shift_gib: float | None = None  # logged free memory before weights - the plan's
    weights_shift_gib: float | None = None  # logged weights - the plan's
    kv_memory_shift_gib: float | None = None  # logged available KV memory - the plan's (vLLM)

    @property
    def ratio(self) -> float:
        return self.actual / self.predicted

    @property
    def offset_bytes(self) -> int | None:
        return None if self.cell is None else (self.actual - self.predicted) * self.cell


def _correct(samples: Sequence[KVSample], model: str, predicted: int, cell: int | None) -> int:
    """`predicted` corrected by `samples` under `model` (unchanged without samples)."""
    if not samples:
        return predicted
    offsets = [x.offset_bytes for x in samples]
    if model == "bytes" and cell and all(o is not None for o in offsets):
        return max(int(predicted + statistics.median(o or 0 for o in offsets) / cell), 0)
    return int(predicted * statistics.median(x.ratio for x in samples))


class TrialPlanner:
    """Rules + planner + workload fit, with the KV correction learnt from launches.

    Args:
        card: the target model as the engine's planner reads it (a ModelCard; for llama.cpp the
            GGUF header, autotune.planner.dispatch.load_target_model).
        gpu: the GPU, or None for a CPU target.
        need_tokens: the longest single request of the workload (prompt + output); a KV pool
            (or a context per request) that cannot hold it is pruned.
        headroom_gib: memory that must stay free at peak load (the objective's headroom; on a
            CPU target, host RAM).
    """

    def __init__(
        self,
        *,
        card: TargetModel,
        gpu: GPUSpec | None,
        space: SearchSpace,
        version: str,
        tp: int = 1,
        gpu_free_gib: float | None = None,
        host_free_gib: float | None = None,
        headroom_gib: float = 0.0,
        need_tokens: int = 0,
        engine: str = "sglang",
    ):
        self.card, self.gpu, self.space = card, gpu, space
        self.version, self.tp, self.engine = version, tp, engine
        self.gpu_free_gib, self.host_free_gib = gpu_free_gib, host_free_gib
        self.headroom_gib, self.need_tokens = headroom_gib, need_tokens
        from autotune.planner.dispatch import target_facts

        self.context, self.unknown_facts = target_facts(engine, card, gpu, version, tp)
        self.rules: list[Rule] = []
        self.skipped_rules: list[str] = []
        for rule in space.rules:
            if self.unknown_facts.intersection(rule.keys()):
                self.skipped_rules.append(rule.id)
            else:
                self.rules.append(rule)
        self._samples: list[KVSample] = []
        self._curve: list[float] = []  # |corrected before the launch / allocated - 1|

    # -- correction --------------------------------------------------------------------------

    @property
    def kv_ratio(self) -> float:
        """Median actual/predicted KV pool over the launches seen (1.0 before any)."""
        return statistics.median(s.ratio for s in self._samples) if self._samples else 1.0

    def corrected_kv(
        self, predicted_kv: int, cell_bytes: int | None = None, kv_memory_gib: float | None = None
    ) -> int:
        """`predicted_kv` corrected by the launches seen, with the model that fits them best
        (`kv_memory_gib`: the plan's available KV memory, for the kv_memory model)."""
        if self._model() == "kv_memory" and kv_memory_gib:
            shift = statistics.median(x.kv_memory_shift_gib or 0.0 for x in self._samples)
            return max(int(predicted_kv * (kv_memory_gib + shift) / kv_memory_gib), 0)
        return _correct(self._samples, self._model(), predicted_kv, cell_bytes)

    def observe(
        self,
        predicted_kv: int | None,
        actual_kv: int | None,
        *,
        cell_bytes: int | None = None,
        corrected_kv: int | None = None,
        plan: Mapping[str, Any] | None = None,
        report: Mapping[str, Any] | None = None,
    ) -> None:
        """Learn from one launch: the KV pool predicted (uncorrected; `corrected_kv` as the gate
        corrected it before the launch) vs allocated; `cell_bytes` per token (bytes model);
        the uncorrected `plan` and the parsed startup `report` (memory model)."""
        if not (predicted_kv and actual_kv and predicted_kv > 0 and actual_kv > 0):
            return
        if corrected_kv:
            self._curve.append(abs(corrected_kv / actual_kv - 1))
        shifts = memory_shifts(plan or {}, report or {})
        self._samples.append(KVSample(predicted_kv, actual_kv, cell_bytes or None, *shifts))
        del self._samples[:-MAX_SAMPLES]

    def seed(self, calibrations: Sequence[Any]) -> int:
        """Start from stored calibrations of this target (`autotune calibrate`, rows with
        predicted_kv, logged_kv, cell_bytes, free_shift_gib, weights_shift_gib): the first
        launch is then corrected too. Returns how many were taken."""
        taken = 0
        for c in calibrations:
            if c.predicted_kv > 0 and c.logged_kv > 0:
                self._samples.append(
                    KVSample(
                        c.predicted_kv,
                        c.logged_kv,
                        c.cell_bytes or None,
                        c.free_shift_gib,
                        c.weights_shift_gib,
                        c.kv_memory_shift_gib,
                    )
                )
                taken += 1
        del self._samples[:-MAX_SAMPLES]
        return taken

    def memory_shift(self) -> tuple[float, float] | None:
        """(free memory before weights, weights) as the launches logged them minus the plans',
        GiB (medians); None before a launch that logged both."""
        both = [
            (x.free_shift_gib, x.weights_shift_gib)
            for x in self._samples
            if x.free_shift_gib is not None and x.weights_shift_gib is not None
        ]
        if not both:
            return None
        return statistics.median(f for f, _ in both), statistics.median(w for _, w in both)

    def corrected_plan(self, plan: Any, config: Mapping[str, Any]) -> Any | None:
        """The planner's plan again with the machine's learnt memory (SGLang): free memory
        before weights shifted, and the weights' extra taken from it at this mem fraction;
        None without a memory shift or for a plan without those figures."""
        shift = self.memory_shift()
        pre, mfs = (
            getattr(plan, "pre_weights_free_gib", None),
            getattr(plan, "mem_fraction_static", None),
        )
        if shift is None or pre is None or not mfs:
            return None
        return self.plan(config, gpu_free_gib=pre + shift[0] - shift[1] / mfs)

    def _model(self) -> str:
        """'memory' where launches logged their memory; else 'bytes' or 'ratio', the one whose
        leave-one-out error over the samples is lower (bytes needs every sample's cell; with
        one sample, bytes if it has a cell)."""
        s = self._samples
        if self.memory_shift() is not None:
            return "memory"
        if s and all(x.kv_memory_shift_gib is not None for x in s):
            return "kv_memory"
        if len(s) < 2 or any(x.cell is None for x in s):
            return "bytes" if s and all(x.cell for x in s) else "ratio"
        loo = {
            m: statistics.mean(
                abs(_correct(s[:i] + s[i + 1 :], m, x.predicted, x.cell) / x.actual - 1)
                for i, x in enumerate(s)
            )
            for m in ("ratio", "bytes")
        }
        return min(loo, key=lambda m: loo[m])

    def correction(self) -> dict[str, Any]:
        """What the sweep learnt, for the outcome and the report: the median ratio, the model
        in use and its offset, and the error of each launch's corrected prediction in order."""
        r = [x.ratio for x in self._samples]
        offsets = [x.offset_bytes for x in self._samples if x.offset_bytes is not None]
        shift = self.memory_shift()
        return {
            "kv_ratio": round(self.kv_ratio, 4),
            "launches": len(r),
            "min": round(min(r), 4) if r else None,
            "max": round(max(r), 4) if r else None,
            "model": self._model() if r else None,
            "offset_gib": round(statistics.median(offsets) / GIB, 4) if offsets else None,
            "memory_shift_gib": [round(v, 3) for v in shift] if shift else None,
            "curve": [round(e, 5) for e in self._curve],
        }

    # -- verdict -----------------------------------------------------------------------------

    def plan(self, config: Mapping[str, Any], *, gpu_free_gib: float | None = None) -> Any:
        """The planner's plan (`gpu_free_gib`: instead of the target's free memory)."""
        from autotune.planner.dispatch import plan_for

        return plan_for(
            self.engine,
            self.card,
            self.gpu,
            dict(config),
            version=self.version,
            tp=self.tp,
            gpu_free_gib=self.gpu_free_gib if gpu_free_gib is None else gpu_free_gib,
            host_free_gib=self.host_free_gib,
        )

    def check_rules(self, config: Mapping[str, Any]) -> list[Any]:
        """Constraint rules `config` breaks (the rules the target can decide)."""
        return check(self.rules, config, self.context)

    def assess(self, config: Mapping[str, Any]) -> Assessment:
        """Rules first (cheap, and their reason is the clearest), then the planner."""
        violations = self.check_rules(config)
        reasons = [str(v) for v in violations]
        rule_ids = [v.rule_id for v in violations]
        plan = self.plan(config)
        reasons += [f"planner: {r}" for r in plan.reasons]
        ratio = self.kv_ratio
        again = self.corrected_plan(plan, config) if plan.fits else None
        if again is not None:
            corrected = again.kv_pool_tokens
            reasons += [
                f"planner (with the machine's memory from launches): {r}" for r in again.reasons
            ]
        else:
            corrected = self.corrected_kv(
                plan.kv_pool_tokens,
                getattr(plan, "kv_cell_bytes", None),
                getattr(plan, "kv_cache_gib", None),
            )
        # One request is limited by the pool and by the context it may have (a llama.cpp slot's
        # context, vLLM's max_model_len).
        room = min(corrected, plan.context_len) if plan.context_len else corrected
        if plan.fits and self.need_tokens and room < self.need_tokens:
            if room < corrected:
                reasons.append(
                    f"context too short for the workload: {plan.context_len} tokens per request "
                    f"< {self.need_tokens} tokens of its longest request"
                )
            else:
                reasons.append(
                    f"KV pool too small for the workload: {plan.kv_pool_tokens} tokens predicted, "
                    f"{corrected} corrected by the launches so far < "
                    f"{self.need_tokens} tokens of its longest request"
                )
        headroom = round(plan.slack_gib - plan.slack_needed_gib, 3)
        if plan.fits and headroom < self.headroom_gib:
            reasons.append(
                f"VRAM headroom {headroom:.2f} GiB at peak load is below the required "
                f"{self.headroom_gib:.2f} GiB (objective.vram_headroom_gib)"
            )
        constraints = {
            "rules": float(len(violations)),
            "planner": float(len(plan.reasons)),
            "vram_headroom": round(self.headroom_gib - headroom, 4),
        }
        if self.need_tokens:
            constraints["kv_fit"] = float(self.need_tokens - room) / self.need_tokens
        return Assessment(
            fits=not reasons,
            reasons=reasons,
            rule_ids=rule_ids,
            plan=plan.model_dump(mode="json"),
            predicted_kv_pool_tokens=plan.kv_pool_tokens,
            corrected_kv_pool_tokens=corrected,
            kv_ratio=round(ratio, 4),
            headroom_gib=headroom,
            constraints=constraints,
        )


def longest_request_tokens(scenarios: Sequence[Any]) -> int:
    """Tokens one request of the workload holds in the KV cache at its longest."""
    need = 0
    for s in scenarios:
        kind = getattr(s, "kind", "")
        out = int(getattr(s, "output_len", 0))
        if kind in ("prefill", "long_context"):
            need = max(need, max(s.prompt_lens) + out)
        elif kind == "agent":
            need = max(need, s.prompt_len + (s.turns - 1) * s.turn_len + s.turns * out)
        else:
            need = max(need, int(getattr(s, "prompt_len", 0)) + out)
    return need


def vet_seed(
    space: SearchSpace,
    planner: TrialPlanner,
    cfg: Mapping[str, Any],
    *,
    source: str,
    extra: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], str | None]:
    """A seed's values of `space`'s parameters as it would launch: validated against the
    space, resolved (plus `extra` flags the space does not search) and gated by the planner.
    (the configuration, why it cannot be queued or None)."""
    from autotune.errors import ConfigError

    try:
        space.validate_config(dict(cfg), source=source)
    except ConfigError as exc:
        return dict(cfg), f"outside this sweep's space: {exc}"
    config = {**space.resolve(dict(cfg)), **(extra or {})}
    verdict = planner.assess(config)
    return config, None if verdict.fits else "; ".join(verdict.reasons)
