"""The simulated server's two clocks: the scheduler's virtual time and the event loop's real time,
mapped by the time scale S (simulated seconds per real second). A step of t simulated seconds
takes t / S real seconds; at S = 0 nothing sleeps and every reported time is virtual."""

from __future__ import annotations

import asyncio

from autotune.sim.scheduler import Scheduler


class SimClock:
    """Real and virtual time of one server; `start` sets the origin both are measured from."""

    def __init__(self, sched: Scheduler, scale: float):
        self.sched = sched
        self.scale = scale
        self.t0 = 0.0  # real time at the origin
        self.v0 = 0.0  # virtual time at the origin

    def real(self) -> float:
        return asyncio.get_running_loop().time()

    def start(self, virtual: float = 0.0) -> None:
        """Make now the origin, at virtual time `virtual`."""
        self.t0 = self.real()
        self.v0 = virtual

    def reported(self) -> float:
        """Seconds as reported to clients: wall time at S > 0, virtual time at S = 0."""
        if self.scale > 0:
            return self.real() - self.t0
        return self.sched.now

    def virtual_now(self) -> float:
        if self.scale > 0:
            return self.v0 + (self.real() - self.t0) * self.scale
        return self.sched.now

    def real_for(self, virtual: float) -> float:
        return self.t0 + (virtual - self.v0) / self.scale

    def rate(self, per_virtual_s: float) -> float:
        """A per-second figure as clients see it (per real second at S > 0)."""
        return per_virtual_s * self.scale if self.scale > 0 else per_virtual_s

    async def sleep_until(self, real: float) -> None:
        """Sleep until the loop's clock reads `real` (no sleep when it already has)."""
        delay = real - self.real()
        if delay > 0:
            await asyncio.sleep(delay)
