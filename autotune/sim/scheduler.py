"""The simulated engine's scheduler: a pure discrete-event model of SGLang's (no I/O, no clocks).

One `step()` is one forward pass in virtual time, chosen the way SGLang's scheduler does:

- New requests are admitted first-come first-served while fewer than `max_running_requests`
  run (the planner's figure, which already holds the mamba-slot cap) and the KV pool can hold the
  prompt plus the requested output (pool tokens held by unlocked cache entries count as free; they
  are evicted least-recently-used). SGLang over-admits and retracts instead; reserving the whole
  output keeps the model simple and never retracts.
- Prefill has priority: a step prefills up to `chunked_prefill_size` new tokens (one request at a
  time is split across steps); the running decodes wait, unless mixed chunk is on (never with
  speculative decoding, P6), in which case one forward carries both.
- Otherwise a decode step advances every running request by one token, or under speculative
  decoding by a verify step of 1 + D tokens that yields a seeded number of accepted tokens whose
  mean is the perf model's accept length for the request's kind of text (C4).
- Prefixes come from the radix cache (radix.py): device hits are free, host hits (HiCache) cost
  what the layer-by-layer PCIe copy adds to the prefill that waits for it (C3,
  planner/hicache_perf.py), and hybrid models reuse only up to their last mamba checkpoint (P12).

- The waiting queue follows schedule_policy (lpm and dfs-weight: longest cached prefix first,
  lpm only up to 128 waiting requests as SGLang; lof; random); vLLM's
  long_prefill_token_threshold caps one request's chunk per step.
- Not priced: schedule_conservativeness (admission here reserves each request's whole output,
  so there is no over-admission to retract) and sleep_on_idle (idle CPU only).

Step times come from the roofline perf model (autotune.planner.perf) with seeded lognormal noise.
`step(fuse=True)` (the analytic mode) advances many identical decode steps at once: their cost is
linear in the context, so k steps cost k times the mean of the first and last.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from autotune.planner.perf import DecodeSeq, PerfModel, PrefillChunk
from autotune.planner.sglang import Plan
from autotune.sim import tokens
from autotune.sim.radix import Match, RadixCache
from autotune.sim.records import RequestTooLong, SimRequest, Stats, StepResult
from autotune.sim.speculation import AcceptanceSampler
from autotune.sim.tokens import IdArray

NOISE_SIGMA = 0.02  # lognormal step-time noise
DECODE_LOG_INTERVAL = 40  # SGLang's --decode-log-interval: gen_throughput window
DEFAULT_MAX_PREFILL_TOKENS = 16384
# SGLang's lpm turns into fcfs while more requests wait (schedule_policy.py: "turn off the
# expensive prefix matching and sorting when the #queue is large")
LPM_MAX_WAITING = 128


class Scheduler:
    """Continuous batching over a KV pool, a radix cache and (for hybrids) mamba slots."""

    def __init__(
        self,
        plan: Plan,
        perf: PerfModel,
        *,
        config: Mapping[str, Any] | None = None,
        seed: int = 0,
        noise: float = NOISE_SIGMA,
        slowdown: float = 1.0,
    ):
        cfg = dict(config or {})
        self.plan, self.perf = plan, perf
        self.hybrid = perf.card.is_hybrid
        self.kv_capacity = plan.kv_pool_tokens
        self.mrr = max(plan.max_running_requests, 1)
        self.cps = plan.chunked_prefill_size
        self.max_prefill_tokens = int(cfg.get("max_prefill_tokens") or DEFAULT_MAX_PREFILL_TOKENS)
        self.policy = str(cfg.get("schedule_policy") or "fcfs")
        # vLLM's long_prefill_token_threshold: the most prompt tokens one request prefills per step
        self.long_prefill_cap = int(cfg.get("long_prefill_token_threshold") or 0)
        self.spec_d = perf.spec_draft_tokens if perf.spec_algorithm else 0
        self.mixed = plan.mixed_chunk and not self.spec_d
        self.track_interval = int(cfg.get("mamba_track_interval") or 256)
        self.page = int(cfg.get("page_size") or 1)
        self.noise = noise
        self.slowdown = slowdown  # the launch's run-to-run factor (sim/variation.py)
        self.rng = random.Random(seed)
        self.nprng = np.random.default_rng(seed)
        self.seed = seed
        hicache = bool(cfg.get("enable_hierarchical_cache")) and bool(plan.host_pool_tokens)
        slot_bytes = plan.mamba_slot_mib * 2**20
        host_slots = 0
        if hicache and self.hybrid and slot_bytes > 0:
            host_slots = int((plan.host_mamba_gb or 0.0) * 1e9 // slot_bytes)
        self.cache = RadixCache(
            enabled=plan.radix_cache,
            page=self.page,
            host_tokens=int(plan.host_pool_tokens or 0) if hicache else 0,
            hybrid=self.hybrid,
            mamba_host_slots=host_slots,
            write_back=cfg.get("hicache_write_policy") == "write_back",
            mamba_device_slots=self._free_mamba_slots,
        )
        self.now = 0.0
        self.pending: list[SimRequest] = []  # submitted, not yet through the tokenizer
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.prefilling: deque[SimRequest] = deque()
        self.kv_used = 0  # KV reserved by running requests beyond what they hold in the tree
        self.stats = Stats()
        self.acceptance = AcceptanceSampler(perf, self.spec_d, self.rng, self.nprng)

    # -- capacities ------------------------------------------------------------------------------

    def _free_mamba_slots(self) -> int:
        # each running request works in one slot; the rest can hold cached checkpoints
        return max(self.plan.mamba_slots - len(self.running), 0)

    def max_request_tokens(self) -> int:
        return self.kv_capacity

    def token_usage(self) -> float:
        if not self.kv_capacity:
            return 0.0
        return self.used_tokens() / self.kv_capacity

    def used_tokens(self) -> int:
        own = sum(max(r.prefilled + r.generated - r._in_tree, 0) for r in self.running)
        return self.cache.locked_device_tokens + own

    def mamba_usage(self) -> float:
        if not self.hybrid or not self.plan.mamba_slots:
            return 0.0
        return min((len(self.running) + self.cache.ck_dev_count) / self.plan.mamba_slots, 1.0)

    # -- queue -----------------------------------------------------------------------------------

    def submit(self, req: SimRequest, *, delay: float | None = None) -> None:
        """Queue a request arriving now (or at req.arrival); it becomes schedulable after the
        per-request overhead (tokenizer, scheduler hand-off)."""
        if req.prompt_len + req.output_len > self.kv_capacity:
            raise RequestTooLong(
                f"prompt ({req.prompt_len} tokens) + max_new_tokens ({req.output_len}) exceed "
                f"the KV cache pool ({self.kv_capacity} tokens)"
            )
        if req.arrival is None:
            req.arrival = self.now
        overhead = self.perf.request_overhead_s if delay is None else delay
        req.ready_at = req.arrival + overhead
        self.pending.append(req)
        if not req.internal:
            self.stats.num_requests += 1

    def abort(self, req: SimRequest) -> None:
        """Drop a request (client went away); frees what it holds."""
        if req.finished or req.aborted:
            return
        req.aborted = True
        if req in self.pending:
            self.pending.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        elif req in self.running:
            self.running.remove(req)
            if req in self.prefilling:
                self.prefilling.remove(req)
            self.kv_used -= req._alloc
            req._alloc = 0
            self.cache.unlock(req._node)
            req._node = None

    def has_work(self) -> bool:
        return bool(self.pending or self.waiting or self.running)

    def num_queued(self) -> int:
        return len(self.pending) + len(self.waiting)

    def next_ready_time(self) -> float | None:
        return min((r.ready_at for r in self.pending), default=None)

    def _release_ready(self) -> None:
        if not self.pending:
            return
        ready = [r for r in self.pending if r.ready_at <= self.now + 1e-12]
        if ready:
            ready.sort(key=lambda r: r.ready_at)
            self.pending = [r for r in self.pending if r.ready_at > self.now + 1e-12]
            self.waiting.extend(ready)

    def advance_to(self, t: float) -> None:
        """Idle until virtual time t."""
        self.now = max(self.now, t)

    def flush_cache(self) -> bool:
        """SGLang's /flush_cache: only when nothing is pending (P5)."""
        if self.has_work():
            return False
        self.cache.reset()
        return True

    # -- admission -------------------------------------------------------------------------------

    def _admit(self, req: SimRequest) -> bool:
        m: Match = self.cache.match(req.prompt)
        node = m.path[-1] if m.path else None
        self.cache.lock(node)
        need = req.prompt_len - m.device + req.output_len
        free = self.kv_capacity - self.kv_used - self.cache.device_tokens
        if need > free + self.cache.evictable():
            self.cache.unlock(node)
            return False
        if need > free:
            self.cache.evict_device(need - free)
        self.kv_used += need
        req._alloc = need
        req._node = node
        req._in_tree = m.device
        req.prefilled = m.usable
        req.cached, req.cached_device, req.cached_host = m.usable, m.device, m.host
        if m.restore:
            state = self.hybrid and bool(m.path) and not m.path[-1].ck_dev
            req._restore = (m.host, int(state))
            self.stats.load_back_tokens += m.host
        req.admitted_at = self.now
        self.running.append(req)
        self.prefilling.append(req)
        if self.hybrid:
            self.cache.trim_checkpoints()
        return True

    def _order_waiting(self) -> None:
        """SGLang's schedule_policy over the waiting queue (fcfs keeps arrival order): lpm and
        dfs-weight (priced alike) put the longest cached prefix first, lof the longest
        requested output, random shuffles. Cache-aware policies need the radix cache."""
        if len(self.waiting) < 2 or self.policy == "fcfs":
            return
        if self.policy in ("lpm", "dfs-weight"):
            if not self.cache.enabled or (
                self.policy == "lpm" and len(self.waiting) > LPM_MAX_WAITING
            ):
                return
            hits = {id(r): self.cache.match(r.prompt).device for r in self.waiting}
            ordered = sorted(self.waiting, key=lambda r: -hits[id(r)])
        elif self.policy == "lof":
            ordered = sorted(self.waiting, key=lambda r: -r.output_len)
        elif self.policy == "random":
            ordered = list(self.waiting)
            self.rng.shuffle(ordered)
        else:
            return
        self.waiting = deque(ordered)

    def _chunk(self, req: SimRequest, budget: int, chunked: bool) -> int:
        rem = req.prompt_len - req.prefilled
        if not chunked:
            return rem
        n = min(budget, rem)
        if self.long_prefill_cap and req.prompt_len > self.long_prefill_cap:
            n = min(n, self.long_prefill_cap)
        return n

    def _schedule_prefill(self) -> list[tuple[SimRequest, int]]:
        chunked = self.cps > 0
        # a round admits up to max_prefill_tokens, each request in chunks of at most cps
        budget = min(self.cps, self.max_prefill_tokens) if chunked else self.max_prefill_tokens
        chunks: list[tuple[SimRequest, int]] = []
        for req in self.prefilling:
            if budget <= 0:
                break
            n = self._chunk(req, budget, chunked)
            chunks.append((req, n))
            budget -= n
        if self.waiting and budget > 0 and len(self.running) < self.mrr:
            self._order_waiting()
        while self.waiting and budget > 0 and len(self.running) < self.mrr:
            req = self.waiting[0]
            if not chunked and chunks and req.prompt_len > budget:
                break
            if not self._admit(req):
                break
            self.waiting.popleft()
            n = self._chunk(req, budget, chunked)
            chunks.append((req, n))
            budget -= n
        return chunks

    # -- the step --------------------------------------------------------------------------------

    def _noise(self, k: int = 1) -> float:
        if not self.noise:
            return self.slowdown
        return math.exp(self.rng.gauss(0.0, self.noise / math.sqrt(k))) * self.slowdown

    def step(self, *, fuse: bool = False, until: float = math.inf) -> StepResult | None:
        """Run one forward pass (or, with fuse, a run of identical decode steps that ends before
        `until`, before any request finishes early and before anything new can be scheduled).
        Returns None when nothing can run now (see next_ready_time)."""
        self._release_ready()
        chunks = self._schedule_prefill()
        decodes = [r for r in self.running if r.first_token_at is not None]
        if chunks:
            return self._prefill_step(chunks, decodes if self.mixed else [])
        if decodes:
            return self._decode_step(decodes, fuse, until)
        return None

    def _prefill_step(
        self, chunks: list[tuple[SimRequest, int]], decodes: list[SimRequest]
    ) -> StepResult:
        pchunks = [PrefillChunk(n, r.prefilled) for r, n in chunks]
        # SGLang merges the round's load-backs into one copy that the forward waits for layer by
        # layer (planner/hicache_perf.py)
        host_tokens = host_states = 0
        for r, _ in chunks:
            if r._restore is not None:
                host_tokens += r._restore[0]
                host_states += r._restore[1]
                r._restore = None
        q = 1 + self.spec_d
        if decodes:
            dseqs = [DecodeSeq(r.prompt_len + r.generated, q) for r in decodes]
            t = self.perf.mixed_step_s(pchunks, dseqs)
            kind = "mixed"
        else:
            t = self.perf.prefill_step_s(pchunks)
            kind = "prefill"
        t = t * self._noise()
        if host_tokens or host_states:
            t += self.perf.load_back_s(host_tokens, t, host_states)
        self.now += t
        self.stats.forward_steps += 1
        self.stats.prefill_steps += 1
        self.stats.busy_s += t
        emitted: list[tuple[SimRequest, int]] = []
        finished: list[SimRequest] = []
        for r, n in chunks:
            r.prefilled += n
            if self.hybrid and n == self.cps:
                r._ckpts.append(r.prefilled)  # a full chunk ends at a checkpoint (P12)
            if r.prefilled >= r.prompt_len:
                self.prefilling.remove(r)
                self._cache_prompt(r)
                r.first_token_at = self.now
                r.generated = 1
                emitted.append((r, 1))
                if r.generated >= r.output_len:
                    finished.append(r)
        for r in decodes:
            got = self._advance_decode(r, 1, t)
            emitted.append((r, got))
            if r.generated >= r.output_len:
                finished.append(r)
        for r in finished:
            self._finish(r)
        return StepResult(kind, t, 1, emitted, finished, sum(n for _, n in chunks))

    def _advance_decode(
        self, r: SimRequest, steps: int, dt: float, total: int | None = None
    ) -> int:
        old = r.prompt_len + r.generated
        if self.spec_d:
            acc = total if total is not None else self.acceptance.one(r.kind)
            r.spec_steps += steps
            r.spec_accepted += acc
            self.stats.spec_verify_ct += steps
            self.stats.spec_accepted += acc
            self.stats._win_verify += steps
            self.stats._win_accepted += acc
            got = min(acc, r.output_len - r.generated)
        else:
            got = min(steps, r.output_len - r.generated)
        r.generated += got
        r.decode_steps += steps
        r.decode_time += dt
        self.stats._win_tokens += got
        if self.hybrid:
            new = old + got
            ti = self.track_interval
            first = (old // ti + 1) * ti
            r._ckpts.extend(range(first, new + 1, ti))
        return got

    def _decode_step(self, decodes: list[SimRequest], fuse: bool, until: float) -> StepResult:
        q = 1 + self.spec_d
        dseqs = [DecodeSeq(r.prompt_len + r.generated, q) for r in decodes]
        t1 = self.perf.decode_step_s(dseqs)
        k = 1
        if fuse:
            rem = [r.output_len - r.generated for r in decodes]
            k = min(rem) if not self.spec_d else max(min((x - 1) // q for x in rem), 1)
            if self.pending:
                until = min(until, min(r.ready_at for r in self.pending))
            if until < math.inf:
                k = min(k, max(int((until - self.now) / t1), 1))
        emitted: list[tuple[SimRequest, int]] = []
        finished: list[SimRequest] = []
        if k <= 1:
            t = t1 * self._noise()
            self.now += t
            for r in decodes:
                got = self._advance_decode(r, 1, t)
                emitted.append((r, got))
                if r.generated >= r.output_len:
                    finished.append(r)
        else:
            totals: list[int] = []
            if self.spec_d:
                for r in decodes:
                    totals.append(int(self.acceptance.draws(r.kind, k).sum()))
            else:
                totals = [k] * len(decodes)
            last = [
                DecodeSeq(r.prompt_len + r.generated + tot * (k - 1) // k, q)
                for r, tot in zip(decodes, totals, strict=True)
            ]
            t = k * (t1 + self.perf.decode_step_s(last)) / 2 * self._noise(k)
            self.now += t
            for r, tot in zip(decodes, totals, strict=True):
                got = self._advance_decode(r, k, t, tot if self.spec_d else None)
                emitted.append((r, got))
                if r.generated >= r.output_len:
                    finished.append(r)
        self.stats.forward_steps += k
        self.stats.decode_steps += k
        self.stats.busy_s += t
        self._log_window(k, t)
        for r in finished:
            self._finish(r)
        return StepResult("decode", t, k, emitted, finished)

    def _log_window(self, k: int, t: float) -> None:
        s = self.stats
        s._win_steps += k
        s._win_time += t
        if s._win_steps >= DECODE_LOG_INTERVAL:
            s.gen_throughput = s._win_tokens / s._win_time if s._win_time else 0.0
            if s._win_verify:
                s.spec_accept_length = s._win_accepted / s._win_verify
                s.spec_accept_rate = (s._win_accepted - s._win_verify) / (
                    s._win_verify * self.spec_d
                )
            s._win_steps = s._win_tokens = s._win_verify = s._win_accepted = 0
            s._win_time = 0.0

    # -- cache updates -----------------------------------------------------------------------------

    def _relock(self, r: SimRequest, seq: IdArray, ckpts: Sequence[int]) -> int:
        added, node = self.cache.insert(seq, ckpts)
        self.cache.lock(node)
        self.cache.unlock(r._node)
        r._node = node if node is not self.cache.root else None
        r._in_tree = node.end if r._node is not None else 0
        added = min(added, r._alloc)
        r._alloc -= added
        self.kv_used -= added
        return added

    def _cache_prompt(self, r: SimRequest) -> None:
        if self.cache.enabled:
            self._relock(r, r.prompt, r._ckpts)

    def _finish(self, r: SimRequest) -> None:
        r.finished_at = self.now
        self.running.remove(r)
        if self.cache.enabled:
            if r.output_ids is None:
                # nobody reads this answer's text (the analytic mode's one-shot requests): ids
                # that are distinct per prompt are enough for the cache, and ~50x cheaper
                r.output_ids = tokens.placeholder_ids(r.seed, r.output_len)
            seq = np.concatenate([r.prompt, r.output_ids[: r.generated - 1]])
            self._relock(r, seq, [*r._ckpts, len(seq)])
            self.cache.unlock(r._node)
            r._node = None
        self.kv_used -= r._alloc
        r._alloc = 0
        if r.internal:
            return
        s = self.stats
        s.prompt_tokens += r.prompt_len
        s.generation_tokens += r.generated
        s.cached_device += r.cached_device
        s.cached_host += r.cached_host
