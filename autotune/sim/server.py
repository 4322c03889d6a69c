"""The simulated SGLang engine as a server process: `python -m autotune.sim [SGLang flags]
--sim-gpu GPU [--sim-time-scale S] ...`.

It behaves like SGLang from the outside: it refuses to start with SGLang's own error text when the
planner says the configuration does not fit, opens its port at once with `/health` answering 503
while "loading", prints SGLang-format startup lines (rendered by the SGLang adapter so its parser
reads them like a real log), then serves SGLang's HTTP API. Timing comes from the roofline perf
model through the scheduler, in virtual time mapped to real time by the time scale: a step of t
simulated seconds takes t / S real seconds. At S = 0 nothing sleeps: responses come as fast as the
process can produce them and every reported time is virtual.

What SGLang shares with vLLM (engine loop, dispatch, generation, lifecycle) is sim/core.py's;
this module holds SGLang's routes, health check, info endpoints, batch log lines and texts.
Every startup log and /server_info say that it is simulated.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import replace
from typing import Any

from autotune.errors import AutotuneError
from autotune.planner.rules import parse_version
from autotune.planner.sglang import DEFAULT_RESERVE_MIB, Plan, plan_sglang
from autotune.sim import tokens
from autotune.sim.allocator import allocate_sglang, machine
from autotune.sim.api import ApiError, parse_generate
from autotune.sim.core import Routes, SimCore
from autotune.sim.http import Connection, Request
from autotune.sim.launch import plan_launch, target_error, write_line
from autotune.sim.metrics import SimMetrics
from autotune.sim.options import SimOptions
from autotune.sim.records import SimRequest, StepResult
from autotune.sim.startup import BANNER, failure_lines, graph_gib, stamp, startup_lines

FLUSH_OK = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
    "waiting requests, the operation will not be performed.)\n"
)

log = logging.getLogger("autotune.sim")


class SGLangSimServer(SimCore):
    """The simulated SGLang server: SGLang's routes, health, info, metrics and log lines."""

    serve_while_loading = True
    stop_key = "matched_stop"

    def make_metrics(self) -> SimMetrics:
        return SimMetrics(self.sched, self.model_name, self.metric_extras)

    def make_routes(self) -> Routes:
        return {
            "/health": ("GET", self.handle_health),
            "/health_generate": ("GET", self.handle_health),
            "/v1/models": ("GET", self.handle_models),
            "/model_info": ("GET", self.handle_model_info),
            "/get_model_info": ("GET", self.handle_model_info),
            "/server_info": ("GET", self.handle_server_info),
            "/get_server_info": ("GET", self.handle_server_info),
            "/metrics": ("GET", self.handle_metrics),
            "/flush_cache": ("GET|POST", self.handle_flush_cache),
            "/v1/chat/completions": ("POST", self.handle_chat),
            "/v1/completions": ("POST", self.handle_completion),
            "/generate": ("POST|PUT", self.handle_generate),
        }

    def needs_key(self, path: str) -> bool:
        """SGLang's --api-key guards everything but the health checks."""
        return path not in ("/health", "/health_generate")

    # -- endpoints ------------------------------------------------------------------------------

    def handle_health(self, req: Request, conn: Connection) -> None:
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
        self.submit(probe, count=False)

    def handle_models(self, req: Request, conn: Connection) -> None:
        self.json_response(conn, self.model_list("sglang", self.model_name, self.plan.context_len))

    def handle_model_info(self, req: Request, conn: Connection) -> None:
        self.json_response(
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

    def handle_server_info(self, req: Request, conn: Connection) -> None:
        args = self.resolved_args()
        p = self.plan
        max_req_len = min(p.context_len - 1, p.kv_pool_tokens - 1)
        self.json_response(
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
                "internal_states": [self.internal_state(args)],
                "version": self.sim.engine_version,
                "simulated": True,
                "sim": self.sim_info(),
            },
        )

    def handle_flush_cache(self, req: Request, conn: Connection) -> None:
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

    def handle_generate(self, req: Request, conn: Connection) -> None:
        body = self.read_body(req)
        if isinstance(body, dict) and body.get("return_logprob"):
            self.generate_with_logprobs(body, conn)
            return
        self.start_generation(parse_generate(body), conn)

    def generate_with_logprobs(self, body: dict[str, Any], conn: Connection) -> None:
        """SGLang's /generate with return_logprob and top_logprobs_num."""
        from autotune.sim.quality import generate_body

        inp = parse_generate(body)
        k = body.get("top_logprobs_num") or 0
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise ApiError("top_logprobs_num must be a non-negative integer")
        n = inp.max_tokens or 128
        self.answer_greedily(conn, lambda noise: generate_body(inp.prompt_ids, n, k, noise))

    # -- /server_info's parts -------------------------------------------------------------------

    def resolved_args(self) -> dict[str, object]:
        """The server arguments as SGLang resolves them (the planner's figures filled in)."""
        args: dict[str, object] = {
            k: v for k, v in vars(self.ns).items() if not k.startswith("sim_")
        }
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

    def internal_state(self, args: dict[str, object]) -> dict[str, object]:
        """The scheduler's state as /server_info's `internal_states` reports it."""
        st = self.sched.stats
        state = dict(args)
        state.update(
            last_gen_throughput=self.time.rate(st.gen_throughput),
            memory_usage=self.memory_usage(),
            effective_max_running_requests_per_dp=self.plan.max_running_requests,
            step_time_dict={},
        )
        if self.sched.spec_d:
            state["avg_spec_accept_length"] = (
                st.spec_accepted / st.spec_verify_ct if st.spec_verify_ct else 0.0
            )
        return state

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

    def sim_info(self) -> dict[str, object]:
        """/server_info's `sim` block: what is simulated, and how."""
        scale = self.time.scale
        return {
            "banner": BANNER,
            "gpu": self.gpu.name,
            "model_card": self.card.name,
            "engine_version": self.sim.engine_version,
            "time_scale": scale,
            "seed": self.sim.seed,
            "times": "wall" if scale > 0 else "virtual",
            "virtual_time_s": self.sched.now,
            "vram_in_use_gib": self.vram_in_use_gib(),
            "startup_s": self.perf.startup_s,
            "plan": self.plan.model_dump(mode="json"),
        }

    def metric_extras(self) -> dict[str, float]:
        return {
            "gen_throughput": self.time.rate(self.sched.stats.gen_throughput),
            "num_requests": self.num_requests,
            "num_aborted_requests": self.num_aborted,
        }

    # -- texts and log lines --------------------------------------------------------------------

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

    def log_step(self, res: StepResult) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        if res.kind in ("prefill", "mixed"):
            self._log_prefill(res)
        elif self.sched.stats.decode_steps % max(int(self.ns.decode_log_interval), 1) == 0:
            self._log_decode()

    def _log_prefill(self, res: StepResult) -> None:
        s = self.sched
        new_seq = sum(1 for r, n in res.emitted if r.generated == n and r.decode_steps == 0)
        usage = (
            f"full token usage: {s.token_usage():.2f}, mamba usage: {s.mamba_usage():.2f}, "
            if s.hybrid
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
            self.time.rate(res.prefill_tokens / res.duration) if res.duration else 0.0,
        )

    def _log_decode(self) -> None:
        s = self.sched
        used = s.used_tokens()
        usage = (
            f"#full token: {used}, full token usage: {s.token_usage():.2f}, mamba num: "
            f"{len(s.running) + s.cache.ck_dev_count}, mamba usage: "
            f"{s.mamba_usage():.2f}, "
            if s.hybrid
            else f"#token: {used}, token usage: {s.token_usage():.2f}, "
        )
        spec = ""
        if s.spec_d:
            spec = (
                f"accept len: {s.stats.spec_accept_length:.2f}, accept rate: "
                f"{s.stats.spec_accept_rate:.2f}, "
            )
        graph = len(s.running) <= self.plan.cuda_graph_max_bs and not self.ns.disable_cuda_graph
        log.info(
            "Decode batch, #running-req: %d, %s%scuda graph: %s, gen throughput (token/s): "
            "%.2f, #queue-req: %d",
            len(s.running),
            usage,
            spec,
            graph,
            self.time.rate(s.stats.gen_throughput),
            s.num_queued(),
        )

    def bind_failed(self, exc: OSError) -> None:
        log.error("%s", exc)
        log.error("Initialization failed. Please see the error messages above.")

    # -- startup ----------------------------------------------------------------------------------

    def startup_steps(self) -> list[tuple[float, str]]:
        return startup_lines(
            self.plan, self.card, self.config, self.sim.engine_version, self.perf.startup_s
        )

    def emit(self, line: str) -> None:
        write_line(stamp(line))

    def announce_ready(self) -> None:
        log.info("The server is fired up and ready to roll!")


def main_sglang(ns: argparse.Namespace, config: dict[str, Any], sim: SimOptions) -> int:
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
        launch = plan_launch(plan_sglang, ns, config, sim)
    except AutotuneError as exc:
        return target_error(sim, "--model-path", exc)
    plan: Plan = launch.plan
    if plan.fits:  # as this machine allocates it, which can have less than planned
        box = machine(launch.gpu, sim.seed, sim.alloc_deviation)
        log.info("%s", box.describe())
        plan = allocate_sglang(
            plan,
            box,
            launch.card,
            launch.gpu,
            config,
            version=sim.engine_version,
            tp=ns.tp_size,
            gpu_free_gib=sim.gpu_free_gib,
            host_free_gib=sim.host_free_gib,
        )
    if not plan.fits:
        for line in failure_lines(plan, sim.engine_version, config, launch.gpu.memory_gib):
            write_line(stamp(line))
        return 1
    return SGLangSimServer(ns, config, sim, replace(launch, plan=plan)).serve()
