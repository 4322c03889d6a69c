"""Run-to-run variation of a simulated launch: what makes two launches of one configuration
measure differently on a real machine (clocks and thermals, where the weights land, neighbours
on a shared host), drawn once per launch from its seed so that a sweep is reproducible.

- speed: exp(x) with x from Student's t (3 degrees of freedom) scaled to a standard deviation of
  `sigma` and capped at 4 sigma: most launches within sigma, a few well off (heavy tails);
- stragglers: with `straggler_rate`, the whole run is 1.2x to 1.6x slower (a throttled GPU, a
  busy neighbour);
- flaky starts: with `flaky_start_rate`, the launch fails before it serves for a reason that is
  not the configuration's (a timed-out rendezvous, a driver hiccup).

The simulator's step noise (sim/scheduler.py) averages out over a run (0.2-0.8 % per
configuration); real engines vary 3-5 % from launch to launch, which this adds on top.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

# Student's t with 3 degrees of freedom has variance 3: divide by sqrt(3) for a unit spread.
_T3_SD = math.sqrt(3.0)
_CAP = 4.0  # sigmas: a launch is never more than exp(4 sigma) off


@dataclass(frozen=True)
class LaunchLuck:
    """What one launch drew: its time factor (> 1: slower) and whether its start fails."""

    slowdown: float = 1.0
    straggler: bool = False
    start_fails: bool = False


@dataclass(frozen=True)
class RunVariation:
    sigma: float = 0.0
    straggler_rate: float = 0.0
    flaky_start_rate: float = 0.0

    @property
    def enabled(self) -> bool:
        return bool(self.sigma or self.straggler_rate or self.flaky_start_rate)

    def draw(self, seed: int) -> LaunchLuck:
        """The launch with this seed (the same seed, the same luck)."""
        if not self.enabled:
            return LaunchLuck()
        rng = random.Random(f"launch-variation:{seed}")
        # t(3) = z / sqrt(chi2(3) / 3)
        z = rng.gauss(0.0, 1.0)
        chi2 = sum(rng.gauss(0.0, 1.0) ** 2 for _ in range(3))
        t = z / math.sqrt(max(chi2, 1e-12) / 3.0)
        x = max(-_CAP, min(_CAP, t / _T3_SD)) * self.sigma
        slowdown = math.exp(x)
        straggler = rng.random() < self.straggler_rate
        if straggler:
            slowdown *= rng.uniform(1.2, 1.6)
        return LaunchLuck(
            slowdown=slowdown,
            straggler=straggler,
            start_fails=rng.random() < self.flaky_start_rate,
        )


# The message a simulated flaky start leaves in its log: not the configuration's fault.
FLAKY_START = (
    "RuntimeError: simulated transient start failure (a timed-out rendezvous; "
    "autotune --sim-start-fails): not the configuration's fault"
)
