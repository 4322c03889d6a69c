"""The core every simulated server shares, whichever engine it impersonates (SGLang in server.py,
vLLM in vllm_server.py): the scheduler and perf model in virtual time, the engine loop that steps
them and streams tokens to connections, HTTP dispatch (API key, routes, methods), the OpenAI
generation endpoints, and the process lifecycle (bind, signals, startup lines, shutdown).

An engine subclasses `SimCore` and supplies its data and hooks: its routes and the handlers only
it has, its metrics, its startup lines and how it prints them, its step log lines, its texts for a
request too long for the context or a port already taken, and which paths the API key guards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

from autotune.planner.perf import PerfModel
from autotune.planner.sglang import Plan
from autotune.sim.api import ApiError, GenInput, error_body, parse_chat, parse_completion
from autotune.sim.clock import SimClock
from autotune.sim.http import Connection, Request
from autotune.sim.job import GenJob
from autotune.sim.launch import Launch
from autotune.sim.metrics import ServerMetrics
from autotune.sim.options import SimOptions
from autotune.sim.records import RequestTooLong, SimRequest, StepResult
from autotune.sim.scheduler import Scheduler

BURST_S = 0.003  # at time scale 0: engine steps run this long between I/O turns
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

log = logging.getLogger("autotune.sim")

Handler = Callable[[Request, Connection], None]
Routes = dict[str, tuple[str, Handler]]  # path -> ("GET|POST", handler)


class SimCore(ABC):
    """A simulated engine server: what SGLang's and vLLM's have in common, with hooks for the
    rest (the abstract methods)."""

    # SGLang opens its port at once and answers /health 503 while loading; vLLM binds the port
    # first but serves nothing until the engine is up.
    serve_while_loading: ClassVar[bool] = True
    # what the engine calls the stop that ended a choice in OpenAI responses
    stop_key: ClassVar[str] = "matched_stop"

    def __init__(
        self,
        ns: argparse.Namespace,
        config: dict[str, Any],
        sim: SimOptions,
        launch: Launch[Plan],
        *,
        sched_config: dict[str, Any] | None = None,
    ):
        self.ns, self.config, self.sim = ns, config, sim
        self.card, self.gpu, self.plan = launch.card, launch.gpu, launch.plan
        # the scheduler and perf model read SGLang field names (sched_config: the same in them)
        sched_cfg = config if sched_config is None else sched_config
        self.perf = PerfModel(self.card, self.gpu, self.plan, config=sched_cfg)
        self.sched = Scheduler(
            self.plan,
            self.perf,
            config=sched_cfg,
            seed=sim.seed,
            noise=sim.noise,
            slowdown=sim.slowdown,
        )
        self.time = SimClock(self.sched, sim.time_scale)
        self.model_name: str = ns.served_model_name or ns.model_path
        self.stream_interval = max(int(getattr(ns, "stream_interval", 1) or 1), 1)
        self.ready = False
        self.exit_code = 0
        self.num_requests = 0
        self.num_aborted = 0
        self.finished: dict[str, int] = {}  # finish reason -> requests
        self.started_wall = time.time()
        self.metrics = self.make_metrics()
        self._dirty: set[Connection] = set()
        self._wake: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        self.routes = self.make_routes()

    # -- the engine's hooks -----------------------------------------------------------------------

    @abstractmethod
    def make_metrics(self) -> ServerMetrics:
        """The registry behind /metrics (the latency histograms the core observes into)."""

    @abstractmethod
    def make_routes(self) -> Routes:
        """The engine's HTTP API: path -> (allowed methods joined by |, handler)."""

    @abstractmethod
    def needs_key(self, path: str) -> bool:
        """Whether --api-key guards `path`."""

    @abstractmethod
    def context_error(self, n_prompt: int, max_tokens: int | None) -> str | None:
        """The engine's error text for a request the context cannot hold (None: it fits)."""

    @abstractmethod
    def log_step(self, res: StepResult) -> None:
        """Log what the engine logs after a forward step (batch lines, periodic stats)."""

    @abstractmethod
    def startup_steps(self) -> list[tuple[float, str]]:
        """(fraction of the startup time, line already in the engine's format) pairs."""

    @abstractmethod
    def emit(self, line: str) -> None:
        """Print a line rendered in the engine's format with the placeholder timestamp."""

    @abstractmethod
    def announce_ready(self) -> None:
        """Print what the engine prints once it serves."""

    @abstractmethod
    def bind_failed(self, exc: OSError) -> None:
        """Print the engine's error for a port it cannot bind."""

    # -- the engine loop ---------------------------------------------------------------------------

    def _flush(self) -> None:
        dirty = self._dirty
        while dirty:
            dirty.pop().flush()

    async def _idle(self) -> None:
        """Wait for a submission."""
        assert self._wake is not None
        self._wake.clear()
        await self._wake.wait()

    async def _engine(self) -> None:
        sched, clock = self.sched, self.time
        loop = asyncio.get_running_loop()
        while True:
            if not sched.has_work():
                await self._idle()
                sched.advance_to(clock.virtual_now())
                continue
            res = sched.step()
            if res is None:
                nxt = sched.next_ready_time()
                if nxt is None:  # blocked with nothing running cannot happen; do not spin
                    await self._idle()
                    continue
                if clock.scale > 0:
                    await clock.sleep_until(clock.real_for(nxt))
                sched.advance_to(nxt)
                continue
            if clock.scale > 0:
                await clock.sleep_until(clock.real_for(sched.now))
                self._deliver(res)
            else:
                # no clock to follow: run a short burst of steps, then let I/O happen
                self._deliver(res)
                end = loop.time() + BURST_S
                while loop.time() < end and (res := sched.step()) is not None:
                    self._deliver(res)
            self._flush()
            await asyncio.sleep(0)

    def _deliver(self, res: StepResult) -> None:
        now = self.time.reported()
        interval = self.stream_interval
        for req, n in res.emitted:
            job = req.ctx
            if isinstance(job, GenJob) and n:
                if interval > 1 and job.t_first is not None:
                    # --stream-interval: tokens go out in groups (the first one at once)
                    job.held += n
                    if job.held < interval and not req.finished:
                        continue
                    n, job.held = job.held, 0
                gap = job.on_tokens(n, now)
                if gap is not None:
                    self.metrics.itl.observe(gap / n)
        for req in res.finished:
            job = req.ctx
            if isinstance(job, GenJob):
                self._complete(job, now)
            elif isinstance(job, list):  # health probe waiters
                for conn in job:
                    conn.respond(200, b"")
        self.log_step(res)

    def _complete(self, job: GenJob, now: float) -> None:
        conn = job.conn
        if job.t_first is not None:
            self.metrics.ttft.observe(job.t_first - job.t_arrival)
        self.metrics.e2e.observe(now - job.t_arrival)
        self.finished[job.finish_type] = self.finished.get(job.finish_type, 0) + 1
        r = job.req
        if r.admitted_at is not None and r.arrival is not None:
            wait = r.admitted_at - r.arrival
            scale = self.time.scale
            self.metrics.queue.observe(wait / scale if scale > 0 else wait)
        if job.inp.stream:
            conn.end_stream(job.finish_stream())
        else:
            conn.respond(200, job.response())

    # -- HTTP dispatch --------------------------------------------------------------------------

    def dispatch(self, req: Request, conn: Connection) -> None:
        key = self.ns.api_key
        if (
            key
            and self.needs_key(req.path)
            and req.headers.get("authorization", "") != f"Bearer {key}"
        ):
            conn.respond(401, error_body("Unauthorized: missing or wrong API key", 401))
            return
        route = self.routes.get(req.path.rstrip("/") or "/")
        if route is None and req.path.startswith("/metrics"):
            route = self.routes["/metrics"]
        if route is None:
            conn.respond(404, error_body(f"Not Found: {req.path}", 404))
            return
        methods, handler = route
        if req.method not in methods.split("|"):
            conn.respond(
                405,
                error_body(f"Method {req.method} not allowed for {req.path}; use {methods}", 405),
                headers=[("allow", methods.replace("|", ", "))],
            )
            return
        try:
            handler(req, conn)
        except ApiError as exc:
            conn.respond(exc.status, exc.body())

    def json_response(self, conn: Connection, obj: object, status: int = 200) -> None:
        conn.respond(status, json.dumps(obj).encode())

    def model_list(
        self, owned_by: str, root: str, max_model_len: int, **extra: object
    ) -> dict[str, object]:
        """/v1/models' answer: the one model served (`extra`: fields an engine adds)."""
        entry = {
            "id": self.model_name,
            "object": "model",
            "created": int(self.started_wall),
            "owned_by": owned_by,
            "root": root,
            "parent": None,
            "max_model_len": max_model_len,
            **extra,
        }
        return {"object": "list", "data": [entry]}

    def handle_metrics(self, req: Request, conn: Connection) -> None:
        if not self.ns.enable_metrics:  # SGLang's default; vLLM always serves them
            conn.respond(404, error_body("Not Found: /metrics (start with --enable-metrics)", 404))
            return
        conn.respond(200, self.metrics.exposition(), content_type=METRICS_CONTENT_TYPE)

    # -- generation -----------------------------------------------------------------------------

    def read_body(self, req: Request) -> object:
        try:
            body: object = json.loads(req.body or b"null")
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ApiError(f"request body is not valid JSON: {exc}") from None
        return body

    def handle_chat(self, req: Request, conn: Connection) -> None:
        self.start_generation(parse_chat(self.read_body(req)), conn)

    def handle_completion(self, req: Request, conn: Connection) -> None:
        body = self.read_body(req)
        if isinstance(body, dict) and body.get("logprobs") not in (None, False, 0):
            self.answer_with_logprobs(body, conn)
            return
        self.start_generation(parse_completion(body), conn)

    def answer_with_logprobs(self, body: dict[str, Any], conn: Connection) -> None:
        """OpenAI /v1/completions with `logprobs: k` (vLLM's shape)."""
        from autotune.sim.quality import completion_body

        inp = parse_completion(body)
        k = body.get("logprobs")
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 20:
            raise ApiError("logprobs must be an integer from 1 to 20")
        model, n, created = inp.model or self.model_name, inp.max_tokens or 16, int(time.time())
        self.answer_greedily(
            conn, lambda noise: completion_body(model, inp.prompt_ids, n, k, noise, created)
        )

    def answer_greedily(self, conn: Connection, build: Callable[[float], dict[str, Any]]) -> None:
        """A greedy answer with top-k log-probabilities (sim/quality.py), drifting with this
        launch's lossiness, at once and outside the scheduler: the quality guard's probe, not
        load. `build` renders it in the route's format from the logit noise."""
        from autotune.sim.quality import lossiness

        if not self.ready:
            raise ApiError("The server is not ready yet (still loading)", 503)
        conn.respond(200, json.dumps(build(lossiness(self.config))).encode())

    def start_generation(self, inp: GenInput, conn: Connection) -> None:
        if not self.ready:
            raise ApiError("The server is not ready yet (still loading)", 503)
        message = self.context_error(len(inp.prompt_ids), inp.max_tokens)
        if message:
            raise ApiError(message)
        job = GenJob(
            inp,
            seed=self.sim.seed,
            model_name=self.model_name,
            clock=self.time.reported,
            cache_report=bool(self.ns.enable_cache_report),
            conn=conn,
            stop_key=self.stop_key,
        )
        try:
            self.submit(job.req)
        except RequestTooLong as exc:
            raise ApiError(str(exc)) from None
        if inp.stream:
            conn.start_stream()

        def abort() -> None:
            if not job.req.finished:
                self.sched.abort(job.req)
                self.num_aborted += 1

        conn.on_close = abort

    def submit(self, req: SimRequest, count: bool = True) -> None:
        """Hand a request to the scheduler now (count: it counts as a client request)."""
        req.arrival = max(self.time.virtual_now(), 0.0)
        if self.time.scale <= 0:
            req.arrival = self.sched.now
        self.sched.submit(req)
        if count:
            self.num_requests += 1
        assert self._wake is not None
        self._wake.set()

    # -- lifecycle --------------------------------------------------------------------------------

    def serve(self) -> int:
        """Run the server in this process until it stops; its exit status (0 on ^C)."""
        try:
            return asyncio.run(self.run())
        except KeyboardInterrupt:
            return 0
        finally:
            sys.stderr.flush()

    async def run(self) -> int:
        """Serve until SIGTERM or SIGINT (or the engine loop dies); the exit status."""
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        try:
            server = await loop.create_server(
                lambda: Connection(self.dispatch, self._dirty),
                self.ns.host,
                int(self.ns.port),
                reuse_address=True,
                start_serving=self.serve_while_loading,
            )
        except OSError as exc:
            self.bind_failed(exc)
            return 1
        self._server = server
        self.time.start()
        engine = asyncio.create_task(self._engine())
        startup = asyncio.create_task(self._startup())
        engine.add_done_callback(self._engine_done)
        await self._stop.wait()
        for t in (engine, startup):
            t.cancel()
        server.close()
        return self.exit_code

    def _engine_done(self, task: asyncio.Task[None]) -> None:
        # SGLang's launcher dies with its scheduler; so does the simulator (never hang), as
        # either engine, with SGLang's words
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        assert exc is not None
        tb = "".join(traceback.format_exception(exc))
        log.error("Scheduler hit an exception: %s", tb)
        log.error("Rank 0 scheduler is dead. Please check if there are relevant logs.")
        self.exit_code = 1
        assert self._stop is not None
        self._stop.set()

    async def _startup(self) -> None:
        """Print the startup lines spread over the (scaled, capped) startup time, then serve."""
        clock = self.time
        steps = self.startup_steps()
        real_total = 0.0
        if clock.scale > 0:
            real_total = min(self.perf.startup_s / clock.scale, self.sim.max_startup_s)
        for frac, line in steps:
            if real_total:
                await clock.sleep_until(clock.t0 + frac * real_total)
            self.emit(line)
        if real_total:
            await clock.sleep_until(clock.t0 + real_total)
        clock.start(self.sched.now)  # the engine clock starts when serving starts
        self.ready = True
        if self._server is not None and not self.serve_while_loading:
            await self._server.start_serving()
        self.announce_ready()
