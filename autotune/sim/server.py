"""The simulated SGLang engine as a server process: `python -m autotune.sim [SGLang flags]
--sim-gpu GPU [--sim-time-scale S] ...`.

It behaves like SGLang from the outside: it refuses to start with SGLang's own error text when the
planner says the configuration does not fit, opens its port at once with `/health` answering 503
while "loading", prints SGLang-format startup lines (rendered by the SGLang adapter so its parser
reads them like a real log), then serves SGLang's HTTP API. Timing comes from the roofline perf
model through the scheduler, in virtual time mapped to real time by the time scale: a step of t
simulated seconds takes t / S real seconds. At S = 0 nothing sleeps: responses come as fast as the
process can produce them and every reported time is virtual.

Every startup log and /server_info say that it is simulated.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time
from typing import Any

from autotune.errors import AutotuneError
from autotune.hardware.gpus import GPUSpec, get_gpu
from autotune.models.card import ModelCard
from autotune.models.registry import load_card
from autotune.planner.perf import PerfModel
from autotune.planner.rules import parse_version
from autotune.planner.sglang import DEFAULT_RESERVE_MIB, Plan, plan_sglang
from autotune.sim import api, tokens
from autotune.sim.http import Connection, Request
from autotune.sim.metrics import SimMetrics
from autotune.sim.options import SimOptions
from autotune.sim.scheduler import RequestTooLong, Scheduler, SimRequest, StepResult
from autotune.sim.startup import BANNER, failure_lines, graph_gib, stamp, startup_lines

FLUSH_OK = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
    "waiting requests, the operation will not be performed.)\n"
)
BURST_S = 0.003  # at time scale 0: engine steps run this long between I/O turns

log = logging.getLogger("autotune.sim")


class SimServer:
    """The simulated SGLang server; `vllm_server.VLLMSimServer` overrides the parts that differ
    for vLLM (routes, health, startup and stats lines, metrics, error texts)."""

    # SGLang opens its port at once and answers /health 503 while loading; vLLM binds the port
    # first but serves nothing until the engine is up.
    serve_while_loading = True
    stop_key = "matched_stop"

    def __init__(
        self,
        ns: Any,
        config: dict[str, Any],
        sim: SimOptions,
        card: ModelCard,
        gpu: GPUSpec,
        plan: Plan,
        *,
        sched_config: dict[str, Any] | None = None,
    ):
        self.ns, self.config, self.sim = ns, config, sim
        self.card, self.gpu, self.plan = card, gpu, plan
        # the scheduler and perf model read SGLang field names (sched_config: the same in them)
        sched_cfg = config if sched_config is None else sched_config
        self.perf = PerfModel(card, gpu, plan, config=sched_cfg)
        self.sched = Scheduler(plan, self.perf, config=sched_cfg, seed=sim.seed, noise=sim.noise)
        self.scale = sim.time_scale
        self.model_name = ns.served_model_name or ns.model_path
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
        self._t0 = 0.0
        self._v0 = 0.0
        self.routes = self.make_routes()

    def make_metrics(self) -> Any:
        return SimMetrics(self.sched, self.model_name, self._metric_extras)

    def make_routes(self) -> dict[str, tuple[str, Any]]:
        return {
            "/health": ("GET", self._health),
            "/health_generate": ("GET", self._health),
            "/v1/models": ("GET", self._models),
            "/model_info": ("GET", self._model_info),
            "/get_model_info": ("GET", self._model_info),
            "/server_info": ("GET", self._server_info),
            "/get_server_info": ("GET", self._server_info),
            "/metrics": ("GET", self._metrics),
            "/flush_cache": ("GET|POST", self._flush_cache),
            "/v1/chat/completions": ("POST", self._chat),
            "/v1/completions": ("POST", self._completion),
            "/generate": ("POST|PUT", self._generate),
        }

    # -- clocks ----------------------------------------------------------------------------------

    def _real(self) -> float:
        return asyncio.get_running_loop().time()

    def clock(self) -> float:
        """Seconds as reported to clients: wall time at S > 0, virtual time at S = 0."""
        if self.scale > 0:
            return self._real() - self._t0
        return self.sched.now

    def _virtual_now(self) -> float:
        if self.scale > 0:
            return self._v0 + (self._real() - self._t0) * self.scale
        return self.sched.now

    def _real_for(self, virtual: float) -> float:
        return self._t0 + (virtual - self._v0) / self.scale

    def rate(self, per_virtual_s: float) -> float:
        return per_virtual_s * self.scale if self.scale > 0 else per_virtual_s

    # -- the engine loop ---------------------------------------------------------------------------

    def _flush(self) -> None:
        dirty = self._dirty
        while dirty:
            dirty.pop().flush()

    async def _engine(self) -> None:
        assert self._wake is not None
        sched = self.sched
        loop = asyncio.get_running_loop()
        while True:
            if not sched.has_work():
                self._wake.clear()
                await self._wake.wait()
                sched.advance_to(self._virtual_now())
                continue
            res = sched.step()
            if res is None:
                nxt = sched.next_ready_time()
                if nxt is None:  # blocked with nothing running cannot happen; do not spin
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                if self.scale > 0:
                    delay = self._real_for(nxt) - self._real()
                    if delay > 0:
                        await asyncio.sleep(delay)
                sched.advance_to(nxt)
                continue
            if self.scale > 0:
                delay = self._real_for(sched.now) - self._real()
                if delay > 0:
                    await asyncio.sleep(delay)
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
        now = self.clock()
        interval = self.stream_interval
        for req, n in res.emitted:
            job = req.ctx
            if isinstance(job, api.GenJob) and n:
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
            if isinstance(job, api.GenJob):
                self._complete(job, now)
            elif isinstance(job, list):  # health probe waiters
                for conn in job:
                    conn.respond(200, b"")
        self._log_step(res)

    def _complete(self, job: api.GenJob, now: float) -> None:
        conn = job.conn
        if job.t_first is not None:
            self.metrics.ttft.observe(job.t_first - job.t_arrival)
        self.metrics.e2e.observe(now - job.t_arrival)
        self.finished[job.finish_type] = self.finished.get(job.finish_type, 0) + 1
        r = job.req
        if r.admitted_at is not None and r.arrival is not None:
            wait = r.admitted_at - r.arrival
            self.metrics.queue.observe(wait / self.scale if self.scale > 0 else wait)
        if job.inp.stream:
            conn.end_stream(job.finish_stream())
        else:
            conn.respond(200, job.response())

    def _log_step(self, res: StepResult) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        s = self.sched
        hybrid = s.hybrid
        if res.kind in ("prefill", "mixed"):
            new_seq = sum(1 for r, n in res.emitted if r.generated == n and r.decode_steps == 0)
            usage = (
                f"full token usage: {s.token_usage():.2f}, mamba usage: {s.mamba_usage():.2f}, "
                if hybrid
                else f"token usage: {s.token_usage():.2f}, "
            )
            cached = sum(r.cached for r, _ in res.emitted if r.decode_steps == 0)
            log.info(
                "Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: %d, %s#running-req: "
                "%d, #queue-req: %d, input throughput (token/s): %.2f, cuda graph: False",
                new_seq,
                res.prefill_tokens,
                cached,
                usage,
                len(s.running),
                s.num_queued(),
                self.rate(res.prefill_tokens / res.duration) if res.duration else 0.0,
            )
        elif s.stats.decode_steps % max(int(self.ns.decode_log_interval), 1) == 0:
            used = s.used_tokens()
            usage = (
                f"#full token: {used}, full token usage: {s.token_usage():.2f}, mamba num: "
                f"{len(s.running) + s.cache.ck_dev_count}, mamba usage: "
                f"{s.mamba_usage():.2f}, "
                if hybrid
                else f"#token: {used}, token usage: {s.token_usage():.2f}, "
            )
            spec = ""
            if s.spec_d:
                spec = (
                    f"accept len: {s.stats.spec_accept_length:.2f}, accept rate: "
                    f"{s.stats.spec_accept_rate:.2f}, "
                )
            graph = (
                len(s.running) <= self.plan.cuda_graph_max_bs and not self.ns.disable_cuda_graph
            )
            log.info(
                "Decode batch, #running-req: %d, %s%scuda graph: %s, gen throughput (token/s): "
                "%.2f, #queue-req: %d",
                len(s.running),
                usage,
                spec,
                graph,
                self.rate(s.stats.gen_throughput),
                s.num_queued(),
            )

    # -- HTTP dispatch --------------------------------------------------------------------------

    def dispatch(self, req: Request, conn: Connection) -> None:
        key = self.ns.api_key
        if (
            key
            and self.needs_key(req.path)
            and req.headers.get("authorization", "") != f"Bearer {key}"
        ):
            conn.respond(401, api.error_body("Unauthorized: missing or wrong API key", 401))
            return
        route = self.routes.get(req.path.rstrip("/") or "/")
        if route is None and req.path.startswith("/metrics"):
            route = self.routes["/metrics"]
        if route is None:
            conn.respond(404, api.error_body(f"Not Found: {req.path}", 404))
            return
        methods, handler = route
        if req.method not in methods.split("|"):
            conn.respond(
                405,
                api.error_body(
                    f"Method {req.method} not allowed for {req.path}; use {methods}", 405
                ),
                headers=[("allow", methods.replace("|", ", "))],
            )
            return
        try:
            handler(req, conn)
        except api.ApiError as exc:
            conn.respond(exc.status, exc.body())

    def needs_key(self, path: str) -> bool:
        """Whether --api-key guards `path` (SGLang: everything but the health checks)."""
        return path not in ("/health", "/health_generate")

    def _json(self, conn: Connection, obj: Any, status: int = 200) -> None:
        conn.respond(status, json.dumps(obj).encode())

    def _health(self, req: Request, conn: Connection) -> None:
        if not self.ready:
            conn.respond(503, b"")
            return
        if self.sched.has_work():  # any scheduler activity answers the probe
            conn.respond(200, b"")
            return
        # idle: a real 1-token generation, as SGLang's health check submits
        probe = SimRequest(
            rid=f"HEALTH_CHECK_{time.time_ns()}",
            prompt=tokens.encode("health"),
            output_len=1,
            ctx=[conn],
            internal=True,
        )
        self._submit(probe, count=False)

    def _models(self, req: Request, conn: Connection) -> None:
        self._json(
            conn,
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model_name,
                        "object": "model",
                        "created": int(self.started_wall),
                        "owned_by": "sglang",
                        "root": self.model_name,
                        "parent": None,
                        "max_model_len": self.plan.context_len,
                    }
                ],
            },
        )

    def _model_info(self, req: Request, conn: Connection) -> None:
        self._json(
            conn,
            {
                "model_path": self.ns.model_path,
                "tokenizer_path": self.ns.tokenizer_path or self.ns.model_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "has_image_understanding": self.card.is_multimodal,
                "has_audio_understanding": False,
                "model_type": "qwen3_5" if self.card.is_hybrid else "llama",
                "architectures": [self.card.architecture],
                "simulated": True,
            },
        )

    def resolved_args(self) -> dict[str, Any]:
        args = {k: v for k, v in vars(self.ns).items() if not k.startswith("sim_")}
        p = self.plan
        args.update(
            mem_fraction_static=p.mem_fraction_static,
            chunked_prefill_size=p.chunked_prefill_size,
            max_running_requests=p.max_running_requests,
            context_length=p.context_len,
            page_size=self.sched.page,
            kv_cache_dtype=p.kv_dtype,
            max_mamba_cache_size=p.mamba_slots if self.card.is_hybrid else None,
            disable_radix_cache=not p.radix_cache,
            enable_mixed_chunk=p.mixed_chunk,
            disable_overlap_schedule=not p.overlap_schedule,
            speculative_algorithm=p.speculative.get("algorithm"),
            speculative_num_steps=p.speculative.get("num_steps") or None,
            speculative_eagle_topk=p.speculative.get("eagle_topk") or None,
            speculative_num_draft_tokens=p.speculative.get("num_draft_tokens") or None,
            served_model_name=self.model_name,
        )
        new = parse_version(self.sim.engine_version) >= (0, 5, 14)  # P13 renames
        if self.card.is_hybrid:
            args["mamba_radix_cache_strategy" if new else "mamba_scheduler_strategy"] = (
                p.mamba_strategy
            )
        args["cuda_graph_max_bs_decode" if new else "cuda_graph_max_bs"] = p.cuda_graph_max_bs
        return args

    def memory_usage(self) -> dict[str, float]:
        p = self.plan
        graph = graph_gib(p)
        return {
            "weight": round(p.weights_gib, 2),
            "kvcache": round(p.kv_pool_gib + p.mamba_pool_gib + p.mamba_spec_gib, 2),
            "token_capacity": p.kv_pool_tokens,
            "graph": round(graph, 2),
            # not in SGLang's dict: what the simulated GPU holds (weights, pools, activations)
            "vram_in_use": self.vram_in_use_gib(),
        }

    def vram_in_use_gib(self) -> float:
        """Weights, pools, graphs and the activation workspace, plus the CUDA context."""
        p = self.plan
        return round(
            DEFAULT_RESERVE_MIB / 1024
            + p.weights_gib
            + p.kv_pool_gib
            + p.mamba_pool_gib
            + p.mamba_spec_gib
            + p.slack_needed_gib,
            2,
        )

    def _server_info(self, req: Request, conn: Connection) -> None:
        args = self.resolved_args()
        p = self.plan
        max_req_len = min(p.context_len - 1, p.kv_pool_tokens - 1)
        st = self.sched.stats
        state = dict(args)
        state.update(
            last_gen_throughput=self.rate(st.gen_throughput),
            memory_usage=self.memory_usage(),
            effective_max_running_requests_per_dp=p.max_running_requests,
            step_time_dict={},
        )
        if self.sched.spec_d:
            state["avg_spec_accept_length"] = (
                st.spec_accepted / st.spec_verify_ct if st.spec_verify_ct else 0.0
            )
        self._json(
            conn,
            args
            | {
                "scheduler_info": {
                    "status": "ready" if self.ready else "starting",
                    "max_total_num_tokens": p.kv_pool_tokens,
                    "max_req_input_len": max_req_len - 5,
                },
                "max_total_num_tokens": p.kv_pool_tokens,
                "max_req_input_len": max_req_len - 5,
                "internal_states": [state],
                "version": self.sim.engine_version,
                "simulated": True,
                "sim": {
                    "banner": BANNER,
                    "gpu": self.gpu.name,
                    "model_card": self.card.name,
                    "engine_version": self.sim.engine_version,
                    "time_scale": self.scale,
                    "seed": self.sim.seed,
                    "times": "wall" if self.scale > 0 else "virtual",
                    "virtual_time_s": self.sched.now,
                    "vram_in_use_gib": self.vram_in_use_gib(),
                    "startup_s": self.perf.startup_s,
                    "plan": p.model_dump(mode="json"),
                },
            },
        )

    def _metric_extras(self) -> dict[str, float]:
        return {
            "gen_throughput": self.rate(self.sched.stats.gen_throughput),
            "num_requests": self.num_requests,
            "num_aborted_requests": self.num_aborted,
        }

    def _metrics(self, req: Request, conn: Connection) -> None:
        if not self.ns.enable_metrics:
            conn.respond(
                404, api.error_body("Not Found: /metrics (start with --enable-metrics)", 404)
            )
            return
        conn.respond(
            200, self.metrics.exposition(), content_type="text/plain; version=0.0.4; charset=utf-8"
        )

    def _flush_cache(self, req: Request, conn: Connection) -> None:
        if self.sched.flush_cache():
            conn.respond(200, FLUSH_OK.encode(), content_type="text/plain; charset=utf-8")
            return
        log.warning(
            "Cache not flushed because there are pending requests. #queue-req: %d, "
            "#running-req: %d",
            self.sched.num_queued(),
            len(self.sched.running),
        )
        conn.respond(400, FLUSH_OK.encode(), content_type="text/plain; charset=utf-8")

    # -- generation -----------------------------------------------------------------------------

    def _body(self, req: Request) -> Any:
        try:
            return json.loads(req.body or b"null")
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise api.ApiError(f"request body is not valid JSON: {exc}") from None

    def _chat(self, req: Request, conn: Connection) -> None:
        self._start(api.parse_chat(self._body(req)), conn)

    def _completion(self, req: Request, conn: Connection) -> None:
        self._start(api.parse_completion(self._body(req)), conn)

    def _generate(self, req: Request, conn: Connection) -> None:
        self._start(api.parse_generate(self._body(req)), conn)

    def _start(self, inp: api.GenInput, conn: Connection) -> None:
        if not self.ready:
            raise api.ApiError("The server is not ready yet (still loading)", 503)
        n_prompt = len(inp.prompt_ids)
        message = self.context_error(n_prompt, inp.max_tokens)
        if message:
            raise api.ApiError(message)
        job = api.GenJob(
            inp,
            seed=self.sim.seed,
            model_name=self.model_name,
            clock=self.clock,
            cache_report=bool(self.ns.enable_cache_report),
            write=conn.write,
            stop_key=self.stop_key,
        )
        job.conn = conn
        try:
            self._submit(job.req)
        except RequestTooLong as exc:
            raise api.ApiError(str(exc)) from None
        if inp.stream:
            conn.start_stream()

        def abort() -> None:
            if not job.req.finished:
                self.sched.abort(job.req)
                self.num_aborted += 1

        conn.on_close = abort

    def context_error(self, n_prompt: int, max_tokens: int | None) -> str | None:
        """SGLang's error text for a request the context cannot hold (None: it fits)."""
        ctx = self.plan.context_len
        if n_prompt >= ctx:
            return (
                f"The input ({n_prompt} tokens) is longer than the model's context length "
                f"({ctx} tokens)."
            )
        if max_tokens is not None and n_prompt + max_tokens > ctx:
            return (
                f"Requested token count exceeds the model's maximum context length of {ctx} "
                f"tokens. You requested a total of {n_prompt + max_tokens} tokens: "
                f"{n_prompt} tokens from the input messages and {max_tokens} tokens for the "
                "completion. Please reduce the number of tokens in the input messages or the "
                "completion to fit within the limit."
            )
        return None

    def _submit(self, req: SimRequest, count: bool = True) -> None:
        req.arrival = max(self._virtual_now(), 0.0)
        if self.scale <= 0:
            req.arrival = self.sched.now
        self.sched.submit(req)
        if count:
            self.num_requests += 1
        assert self._wake is not None
        self._wake.set()

    # -- lifecycle --------------------------------------------------------------------------------

    async def run(self) -> int:
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
        self._t0 = loop.time()
        self._v0 = 0.0
        engine = asyncio.create_task(self._engine())
        startup = asyncio.create_task(self._startup())
        engine.add_done_callback(self._engine_done)
        await self._stop.wait()
        for t in (engine, startup):
            t.cancel()
        server.close()
        return self.exit_code

    def bind_failed(self, exc: OSError) -> None:
        log.error("%s", exc)
        log.error("Initialization failed. Please see the error messages above.")

    def _engine_done(self, task: asyncio.Task[None]) -> None:
        # SGLang's launcher dies with its scheduler; so does the simulator (never hang)
        if task.cancelled() or task.exception() is None:
            return
        import traceback

        exc = task.exception()
        assert exc is not None
        tb = "".join(traceback.format_exception(exc))
        log.error("Scheduler hit an exception: %s", tb)
        log.error("Rank 0 scheduler is dead. Please check if there are relevant logs.")
        self.exit_code = 1
        assert self._stop is not None
        self._stop.set()

    def startup_steps(self) -> list[tuple[float, str]]:
        """(fraction of the startup time, line already in the engine's format) pairs."""
        return startup_lines(
            self.plan, self.card, self.config, self.sim.engine_version, self.perf.startup_s
        )

    def emit(self, line: str) -> None:
        """Print a line rendered in the engine's format with the placeholder timestamp."""
        _raw(line)

    def announce_ready(self) -> None:
        log.info("The server is fired up and ready to roll!")

    async def _startup(self) -> None:
        steps = self.startup_steps()
        real_total = 0.0
        if self.scale > 0:
            real_total = min(self.perf.startup_s / self.scale, self.sim.max_startup_s)
        for frac, line in steps:
            if real_total:
                target = self._t0 + frac * real_total
                delay = target - self._real()
                if delay > 0:
                    await asyncio.sleep(delay)
            self.emit(line)
        if real_total:
            delay = self._t0 + real_total - self._real()
            if delay > 0:
                await asyncio.sleep(delay)
        # the engine clock starts when serving starts
        self._t0 = self._real()
        self._v0 = self.sched.now
        self.ready = True
        if self._server is not None and not self.serve_while_loading:
            await self._server.start_serving()
        self.announce_ready()


def _raw(line: str) -> None:
    """A line already in SGLang's format (rendered by the adapter, prefix included)."""
    sys.stderr.write(stamp(line) + "\n")
    sys.stderr.flush()


def main_sglang(ns: Any, config: dict[str, Any], sim: SimOptions) -> int:
    """Plan, refuse or serve as SGLang `sim.engine_version` would (exit status as SGLang's)."""
    log.info("%s", BANNER)
    log.info(
        "sim: gpu=%s engine_version=%s time_scale=%g seed=%d",
        sim.gpu,
        sim.engine_version,
        sim.time_scale,
        sim.seed,
    )
    try:
        card = load_card(sim.model or ns.model_path)
        gpu = get_gpu(sim.gpu)
        plan = plan_sglang(
            card,
            gpu,
            config,
            version=sim.engine_version,
            tp=ns.tp_size,
            gpu_free_gib=sim.gpu_free_gib,
            host_free_gib=sim.host_free_gib,
        )
    except AutotuneError as exc:
        what = "--sim-model" if sim.model else "--model-path (or --sim-model)"
        print(f"python -m autotune.sim: error: {what}/--sim-gpu: {exc}", file=sys.stderr)
        return 2
    if not plan.fits:
        for line in failure_lines(plan, sim.engine_version, config, gpu.memory_gib):
            _raw(line)
        return 1
    server = SimServer(ns, config, sim, card, gpu, plan)
    try:
        return asyncio.run(server.run())
    except KeyboardInterrupt:
        return 0
    finally:
        sys.stderr.flush()
