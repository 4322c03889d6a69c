"""Analytic mode: run a workload through the simulated engine's scheduler in virtual time, with no
process, no HTTP and no sleeping, so a sweep can score thousands of configurations a minute.

The same `Scheduler` serves the simulated server; here decode steps whose batch does not change
are advanced together (`step(fuse=True)`), which keeps a 16-request workload near a millisecond.

    from autotune.sim.analytic import closed_loop, evaluate
    r = evaluate("qwen3.8-27b-awq-int4", "rtx-4080-super-32g", {"max_running_requests": 4},
                 closed_loop(concurrency=4, num_requests=16, prompt_len=512, output_len=256))
    r["output_tok_s"], r["ttft_p50_s"]

Times in the result are virtual seconds (what the simulated GPU would take).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune.errors import ConfigError
from autotune.hardware.gpus import GPUSpec, get_gpu
from autotune.models.card import ModelCard
from autotune.models.registry import load_card
from autotune.planner.perf import PerfModel
from autotune.planner.sglang import plan_sglang
from autotune.sim import tokens
from autotune.sim.allocator import allocate_sglang, machine
from autotune.sim.records import RequestTooLong, SimRequest
from autotune.sim.scheduler import Scheduler

TEXT_KINDS = ("prose", "code", "extraction")


@dataclass(frozen=True)
class RequestSpec:
    """One request of a workload. Give `prompt_ids`, or `prompt_len` for fresh random tokens
    (distinct per request, so unrelated requests share no prefix)."""

    prompt_len: int = 0
    output_len: int = 128
    kind: str = "prose"
    arrival_s: float = 0.0  # open loop only
    prompt_ids: tuple[int, ...] | None = None
    session: int | None = None  # multi-turn: turns of one session run in order
    new_tokens: int = 0  # multi-turn: tokens appended to the previous turn's prompt + answer


@dataclass(frozen=True)
class Workload:
    """Requests plus how they arrive: open loop at `arrival_s` (concurrency None), or closed loop
    with at most `concurrency` in flight (the next one is sent when one finishes). Multi-turn
    sessions are closed loops of sessions: a session's next turn follows its previous one."""

    requests: tuple[RequestSpec, ...]
    concurrency: int | None = None
    name: str = ""
    warmup: int = field(default=0, metadata={"doc": "leading requests left out of aggregates"})


def closed_loop(
    concurrency: int, num_requests: int, prompt_len: int, output_len: int, kind: str = "prose"
) -> Workload:
    """N clients, each sending its next request as soon as the previous one finishes."""
    _check_kind(kind)
    reqs = tuple(RequestSpec(prompt_len, output_len, kind) for _ in range(num_requests))
    return Workload(reqs, concurrency=concurrency, name=f"closed_loop_c{concurrency}")


def open_loop(
    rate_per_s: float,
    num_requests: int,
    prompt_len: int,
    output_len: int,
    kind: str = "prose",
    seed: int = 0,
) -> Workload:
    """Poisson arrivals at `rate_per_s`."""
    _check_kind(kind)
    if rate_per_s <= 0:
        raise ConfigError(f"rate_per_s must be > 0, got {rate_per_s}", field="rate_per_s")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate_per_s, num_requests)
    times = np.cumsum(gaps) - gaps[0]
    reqs = tuple(RequestSpec(prompt_len, output_len, kind, float(t)) for t in times)
    return Workload(reqs, name=f"open_loop_{rate_per_s:g}rps")


def multi_turn(
    sessions: int,
    turns: int,
    first_prompt_len: int,
    turn_prompt_len: int,
    output_len: int,
    kind: str = "prose",
    concurrency: int | None = None,
) -> Workload:
    """Agent sessions (FIELD-NOTES W): each turn = previous prompt + its answer + new text."""
    _check_kind(kind)
    reqs = []
    for s in range(sessions):
        for t in range(turns):
            reqs.append(
                RequestSpec(
                    first_prompt_len if t == 0 else 0,
                    output_len,
                    kind,
                    session=s,
                    new_tokens=0 if t == 0 else turn_prompt_len,
                )
            )
    return Workload(tuple(reqs), concurrency=concurrency or sessions, name="multi_turn")


def _check_kind(kind: str) -> None:
    if kind not in TEXT_KINDS:
        raise ConfigError(
            f"unknown text kind {kind!r}; valid: {', '.join(TEXT_KINDS)}", field="kind"
        )


def _pct(values: Sequence[float], q: float) -> float | None:
    """numpy's default (linear) percentile, without numpy's overhead on short lists."""
    if not values:
        return None
    v = sorted(values)
    pos = (len(v) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def evaluate(
    card: ModelCard | str,
    gpu: GPUSpec | str,
    config: Mapping[str, Any] | None,
    workload: Workload,
    *,
    version: str = "0.5.17",
    tp: int = 1,
    seed: int = 0,
    gpu_free_gib: float | None = None,
    host_free_gib: float | None = None,
    alloc_deviation: float = 1.0,
    noise: float | None = None,
    slowdown: float = 1.0,
) -> dict[str, Any]:
    """Simulate `workload` on `card` x `gpu` under SGLang `config` (engine field names), the KV
    pool as the simulated machine allocates it (sim/allocator.py; `alloc_deviation` 0: as
    planned); `noise`: the step-time noise (None: the scheduler's, 0: the noise-free value);
    `slowdown`: the launch's run-to-run time factor (sim/variation.py).

    Returns ``fits`` (False with ``reasons`` when the planner rejects the config), per-request
    ``requests`` (ttft_s, e2e_s, prompt/output/cached tokens) and aggregates: ``duration_s``,
    ``output_tok_s``, ``input_tok_s``, ``ttft_p50_s``/``ttft_p95_s``, ``e2e_p50_s``,
    ``tpot_mean_s``, ``itl_mean_s``, ``accept_length``, ``cached_tokens``. Virtual seconds.
    """
    card = load_card(card) if isinstance(card, str) else card
    gpu = get_gpu(gpu) if isinstance(gpu, str) else gpu
    cfg = {k: v for k, v in dict(config or {}).items() if v is not None}
    if host_free_gib is None and cfg.get("enable_hierarchical_cache"):
        host_free_gib = 1e6  # analytic what-if: do not read this machine's RAM
    plan = plan_sglang(
        card,
        gpu,
        cfg,
        version=version,
        tp=tp,
        gpu_free_gib=gpu_free_gib,
        host_free_gib=host_free_gib,
    )
    if plan.fits:
        box = machine(gpu, seed, alloc_deviation)
        plan = allocate_sglang(
            plan, box, card, gpu, cfg, version=version, tp=tp,
            gpu_free_gib=gpu_free_gib, host_free_gib=host_free_gib,
        )  # fmt: skip
    base: dict[str, Any] = {
        "fits": plan.fits,
        "reasons": plan.reasons,
        "simulated": True,
        "time": "virtual",
        "kv_pool_tokens": plan.kv_pool_tokens,
        "max_running_requests": plan.max_running_requests,
        "mamba_slots": plan.mamba_slots,
        "free_before_weights_gib": round(plan.pre_weights_free_gib, 2),  # as SGLang logs them
        "weights_gib": round(plan.weights_gib, 2),
    }
    if not plan.fits:
        return base
    perf = PerfModel(card, gpu, plan, config=cfg)
    sched = Scheduler(
        plan,
        perf,
        config=cfg,
        seed=seed,
        slowdown=slowdown,
        **({} if noise is None else {"noise": noise}),
    )
    return base | _run(sched, workload, seed)


class _Driver:
    """Feeds a workload's requests into the scheduler (open loop, closed loop, sessions)."""

    def __init__(self, sched: Scheduler, workload: Workload, seed: int):
        self.sched = sched
        self.workload = workload
        self.rng = np.random.default_rng(seed + 7919)
        self.seed = seed
        self.done: list[SimRequest] = []
        self.failed: list[tuple[int, str]] = []
        self.index: dict[int, int] = {}  # id(SimRequest) -> workload index
        self.sessions: dict[int, deque[int]] = {}
        self.last_turn: dict[int, SimRequest] = {}
        self.open: deque[int] = deque()
        self.closed: deque[int] = deque()
        for i, spec in enumerate(workload.requests):
            if spec.session is not None:
                self.sessions.setdefault(spec.session, deque()).append(i)
            elif workload.concurrency is None:
                self.open.append(i)
            else:
                self.closed.append(i)
        self.open = deque(sorted(self.open, key=lambda i: workload.requests[i].arrival_s))
        self.in_flight = 0

    def _prompt(self, i: int, spec: RequestSpec) -> tokens.IdArray:
        if spec.session is not None and spec.session in self.last_turn:
            prev = self.last_turn[spec.session]
            assert prev.output_ids is not None
            fresh = self.rng.integers(0, 2**31, spec.new_tokens, dtype=np.int64)
            return np.concatenate([prev.prompt, prev.output_ids[: prev.generated], fresh])
        if spec.prompt_ids is not None:
            return np.asarray(spec.prompt_ids, dtype=np.int64)
        return self.rng.integers(0, 2**31, max(spec.prompt_len, 1), dtype=np.int64)

    def send(self, i: int, at: float) -> None:
        spec = self.workload.requests[i]
        prompt = self._prompt(i, spec)
        req = SimRequest(
            rid=str(i),
            prompt=prompt,
            output_len=max(spec.output_len, 1),
            kind=spec.kind,
            seed=tokens.request_seed(self.seed, prompt),
            arrival=at,
        )
        if spec.session is not None:
            # the next turn needs this turn's answer ids
            req.output_ids = tokens.generate(spec.kind, req.output_len, req.seed, prompt)
        try:
            self.sched.submit(req)
        except RequestTooLong as exc:
            self.failed.append((i, str(exc)))
            return
        self.index[id(req)] = i
        self.in_flight += 1

    def start(self) -> None:
        now = self.sched.now
        limit = self.workload.concurrency or 0
        for _ in range(min(limit, len(self.closed))):
            self.send(self.closed.popleft(), now)
        for s in list(self.sessions)[: limit or len(self.sessions)]:
            self.send(self.sessions[s].popleft(), now)
        self._active_sessions = list(self.sessions)[: limit or len(self.sessions)]
        self._idle_sessions = deque(list(self.sessions)[limit or len(self.sessions) :])

    def release_open(self) -> None:
        while self.open and self.workload.requests[self.open[0]].arrival_s <= self.sched.now:
            i = self.open.popleft()
            self.send(i, self.workload.requests[i].arrival_s)

    def next_arrival(self) -> float:
        return self.workload.requests[self.open[0]].arrival_s if self.open else math.inf

    def on_finish(self, req: SimRequest) -> None:
        self.done.append(req)
        self.in_flight -= 1
        now = self.sched.now
        spec = self.workload.requests[self.index[id(req)]]
        if spec.session is not None:
            self.last_turn[spec.session] = req
            q = self.sessions[spec.session]
            if q:
                self.send(q.popleft(), now)
            elif self._idle_sessions:
                nxt = self._idle_sessions.popleft()
                self.send(self.sessions[nxt].popleft(), now)
        elif self.closed:
            self.send(self.closed.popleft(), now)

    def pending(self) -> bool:
        return bool(self.in_flight or self.open or self.closed or any(self.sessions.values()))


def _run(sched: Scheduler, workload: Workload, seed: int) -> dict[str, Any]:
    drv = _Driver(sched, workload, seed)
    drv.start()
    t0 = sched.now
    guard = 0
    while drv.pending():
        drv.release_open()
        res = sched.step(fuse=True, until=drv.next_arrival())
        if res is None:
            nxt = min(sched.next_ready_time() or math.inf, drv.next_arrival())
            if nxt == math.inf:
                break  # nothing can ever run (should not happen; guards against a hang)
            sched.advance_to(nxt)
            continue
        for r in res.finished:
            drv.on_finish(r)
        guard += 1
        if guard > 50_000_000:
            raise RuntimeError("analytic simulation did not converge")
    return _aggregate(drv, workload, t0)


def _aggregate(drv: _Driver, workload: Workload, t0: float) -> dict[str, Any]:
    done = sorted(drv.done, key=lambda r: drv.index[id(r)])
    measured = [r for r in done if drv.index[id(r)] >= workload.warmup]
    per = []
    for r in done:
        assert r.arrival is not None and r.first_token_at is not None and r.finished_at is not None
        per.append(
            {
                "index": drv.index[id(r)],
                "prompt_tokens": r.prompt_len,
                "output_tokens": r.generated,
                "cached_tokens": r.cached,
                "cached_host_tokens": r.cached_host,
                "ttft_s": r.first_token_at - r.arrival,
                "e2e_s": r.finished_at - r.arrival,
                "decode_steps": r.decode_steps,
            }
        )
    if not measured:
        return {"requests": per, "failed": drv.failed, "completed": 0}
    start = min(r.arrival for r in measured if r.arrival is not None)
    end = max(r.finished_at for r in measured if r.finished_at is not None)
    duration = max(end - start, 1e-12)
    out_tokens = sum(r.generated for r in measured)
    in_tokens = sum(r.prompt_len for r in measured)
    ttft = [r.first_token_at - r.arrival for r in measured]  # type: ignore[operator]
    e2e = [r.finished_at - r.arrival for r in measured]  # type: ignore[operator]
    tpot = [
        (r.finished_at - r.first_token_at) / (r.generated - 1)  # type: ignore[operator]
        for r in measured
        if r.generated > 1
    ]
    itl_time = sum(r.decode_time for r in measured)
    itl_steps = sum(r.decode_steps for r in measured)
    verify = sum(r.spec_steps for r in measured)
    accepted = sum(r.spec_accepted for r in measured)
    return {
        "requests": per,
        "failed": drv.failed,
        "completed": len(measured),
        "duration_s": duration,
        "output_tokens": out_tokens,
        "input_tokens": in_tokens,
        "cached_tokens": sum(r.cached for r in measured),
        "cached_host_tokens": sum(r.cached_host for r in measured),
        "output_tok_s": out_tokens / duration,
        "input_tok_s": in_tokens / duration,
        "request_s": len(measured) / duration,
        "ttft_mean_s": sum(ttft) / len(ttft),
        "ttft_p50_s": _pct(ttft, 50),
        "ttft_p95_s": _pct(ttft, 95),
        "e2e_mean_s": sum(e2e) / len(e2e),
        "e2e_p50_s": _pct(e2e, 50),
        "e2e_p95_s": _pct(e2e, 95),
        "tpot_mean_s": sum(tpot) / len(tpot) if tpot else None,
        "itl_mean_s": itl_time / itl_steps if itl_steps else None,
        "accept_length": accepted / verify if verify else 1.0,
        "virtual_end_s": end - t0,
    }
