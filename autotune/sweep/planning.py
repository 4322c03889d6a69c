"""The sweep's gate before any launch: rules, the memory planner of the target's engine
(autotune.planner.dispatch), the workload's needs, and the planner's correction from what real
launches reported.

Rules test target facts; a target that cannot state some (a GGUF model has no ModelCard
quantization scheme, a CPU target has no gpu.* facts) skips the rules that test them: they are
listed in `skipped_rules` and the sweep notes them, rather than being decided on made-up values.

The planner mirrors SGLang's accounting, but a real engine may allocate a KV pool a few percent
off the prediction (driver reserve, allocator slack, a version's quirk). Every launch reports the
pool it got; the running median of actual/predicted KV tokens then scales later predictions, so
a configuration whose corrected pool cannot hold the workload is pruned before it wastes a launch.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

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
        self._ratios: list[float] = []

    # -- correction --------------------------------------------------------------------------

    @property
    def kv_ratio(self) -> float:
        """Median actual/predicted KV pool over the launches seen (1.0 before any)."""
        return statistics.median(self._ratios) if self._ratios else 1.0

    def observe(self, predicted_kv: int | None, actual_kv: int | None) -> None:
        """Learn from one launch: the KV pool predicted (uncorrected) vs allocated."""
        if predicted_kv and actual_kv and predicted_kv > 0 and actual_kv > 0:
            self._ratios.append(actual_kv / predicted_kv)
            del self._ratios[:-MAX_SAMPLES]

    def correction(self) -> dict[str, Any]:
        r = self._ratios
        return {
            "kv_ratio": round(self.kv_ratio, 4),
            "launches": len(r),
            "min": round(min(r), 4) if r else None,
            "max": round(max(r), 4) if r else None,
        }

    # -- verdict -----------------------------------------------------------------------------

    def plan(self, config: Mapping[str, Any]) -> Any:
        from autotune.planner.dispatch import plan_for

        return plan_for(
            self.engine,
            self.card,
            self.gpu,
            dict(config),
            version=self.version,
            tp=self.tp,
            gpu_free_gib=self.gpu_free_gib,
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
        corrected = int(plan.kv_pool_tokens * ratio)
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
                    f"KV pool too small for the workload: {plan.kv_pool_tokens} tokens predicted "
                    f"x {ratio:.3f} (correction from launches) = {corrected} < "
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
