"""The simulated engine as vLLM (`python -m autotune.sim --sim-engine vllm [vllm serve options]
--sim-gpu GPU ...`), what the vLLM adapter launches when a sweep of engine vllm is simulated.

From the outside it behaves like `vllm serve` of the chosen release:
- it plans with the vLLM planner (autotune.planner.vllm) and, when the configuration does not fit,
  refuses to start with vLLM's own error text (the adapter's `format_failure`) and exit 1;
- it binds its port first but serves nothing until the engine is up (vLLM's setup_server binds
  the socket before the engine starts; uvicorn accepts connections only after), prints vLLM's
  startup lines (the adapter's `format_startup_lines`, so `parse_startup` reads it like a real
  log), then uvicorn's "Application startup complete.";
- it serves vLLM's OpenAI API: /health (200 once up: there is no 503 loading phase because
  nothing is served before), /ping, /version, /v1/models (owned_by vllm, max_model_len), /metrics
  (always on, `vllm:` names of the release), /v1/completions and /v1/chat/completions (the same
  OpenAI SSE framing, `stop_reason` where SGLang says `matched_stop`); no /generate, no
  /server_info. --api-key guards the /v1 routes only, as vLLM's middleware does;
- every 10 simulated seconds with work it logs vLLM's "Engine 000: Avg prompt throughput ..."
  line (and "SpecDecoding metrics" under speculative decoding).

The scheduler and perf model are the SGLang simulator's: the plan maps max_num_seqs to the
running-request cap, max_num_batched_tokens to the chunk budget, block_size to the page (prefix
caching at block granularity; hybrid models cache mamba state at block boundaries, vLLM's align
mode), enable_prefix_caching to the radix cache, gpu_memory_utilization through the KV pool the
planner sizes, and the speculative config to the perf model's families (ngram, suffix ->
NGRAM; dflash, dspark -> DFLASH; mtp, eagle, draft models -> EAGLE; perf.sglang_speculation).
The first line of the log carries the vLLM adapter's SIMULATED_MARKER, so nothing mistakes it
for a GPU run. What vLLM shares with
SGLang (engine loop, dispatch, generation, lifecycle) is sim/core.py's; its startup and refusal
texts are sim/vllm_startup.py's.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from autotune.engines.vllm import SIMULATED_MARKER
from autotune.errors import AutotuneError, ConfigError
from autotune.planner.dispatch import scheduler_plan
from autotune.planner.vllm import VLLMPlan, plan_vllm
from autotune.sim.allocator import allocate_vllm, machine
from autotune.sim.core import Routes, SimCore
from autotune.sim.http import Connection, Request
from autotune.sim.launch import Launch, plan_launch, target_error
from autotune.sim.metrics import VLLMSimMetrics
from autotune.sim.options import SimOptions
from autotune.sim.records import StepResult
from autotune.sim.scheduler import Scheduler
from autotune.sim.vllm_startup import (
    emit,
    failure_lines,
    info_line,
    startup_lines,
    startup_schedule,
    weights_load_s,
)

log = logging.getLogger("autotune.sim")

STATS_INTERVAL_S = 10.0  # VLLM_LOG_STATS_INTERVAL


class VLLMSimServer(SimCore):
    """The simulated vLLM server: vLLM's routes, startup, health, metrics, stats lines and error
    texts."""

    serve_while_loading = False
    stop_key = "stop_reason"

    def __init__(
        self,
        ns: argparse.Namespace,
        config: dict[str, Any],
        sim: SimOptions,
        launch: Launch[VLLMPlan],
    ):
        plan = self.vplan = launch.plan
        ssm = config.get("mamba_ssm_cache_dtype")
        sched_config = {
            "page_size": plan.block_size,
            "max_prefill_tokens": plan.max_num_batched_tokens,
            # vLLM's align mode keeps a hybrid model's state at block boundaries
            "mamba_track_interval": plan.block_size,
            "mamba_ssm_dtype": None if ssm in (None, "auto") else ssm,
            "attention_backend": config.get("attention_backend"),
            "long_prefill_token_threshold": config.get("long_prefill_token_threshold"),
            "cuda_graph_bs_decode": list(plan.capture_sizes) or None,
        }
        sched_launch = Launch(launch.card, launch.gpu, scheduler_plan(plan))
        super().__init__(ns, config, sim, sched_launch, sched_config=sched_config)
        self._ready_lines: list[str] = []
        self.stats_log = StatsLog(self.sched, self.time.rate)

    def make_routes(self) -> Routes:
        return {
            "/health": ("GET", self.handle_health),
            "/ping": ("GET|POST", self.handle_health),
            "/version": ("GET", self.handle_version),
            "/v1/models": ("GET", self.handle_models),
            "/metrics": ("GET", self.handle_metrics),
            "/v1/chat/completions": ("POST", self.handle_chat),
            "/v1/completions": ("POST", self.handle_completion),
        }

    def make_metrics(self) -> VLLMSimMetrics:
        p = self.vplan
        cache_info = {
            "block_size": str(p.block_size),
            "cache_dtype": p.kv_dtype,
            "enable_prefix_caching": str(p.prefix_caching),
            "gpu_memory_utilization": str(p.gpu_memory_utilization),
            "num_gpu_blocks": str(p.num_gpu_blocks),
        }
        return VLLMSimMetrics(
            self.sched,
            self.model_name,
            self.sim.engine_version,
            lambda: {"finished": dict(self.finished)},
            cache_info,
        )

    def needs_key(self, path: str) -> bool:
        return path.startswith("/v1")  # vLLM's AuthenticationMiddleware guards /v1 only

    # -- endpoints ------------------------------------------------------------------------------

    def handle_health(self, req: Request, conn: Connection) -> None:
        conn.respond(200, b"")  # nothing is served before the engine is up

    def handle_version(self, req: Request, conn: Connection) -> None:
        self.json_response(conn, {"version": self.sim.engine_version, "simulated": True})

    def handle_models(self, req: Request, conn: Connection) -> None:
        created = int(self.started_wall)
        permission = {
            "id": f"modelperm-{created}",
            "object": "model_permission",
            "created": created,
            "allow_create_engine": False,
            "allow_sampling": True,
            "allow_logprobs": True,
            "allow_search_indices": False,
            "allow_view": True,
            "allow_fine_tuning": False,
            "organization": "*",
            "group": None,
            "is_blocking": False,
        }
        models = self.model_list(
            "vllm", self.ns.model_path, self.vplan.max_model_len, permission=[permission]
        )
        self.json_response(conn, models)

    # -- texts and log lines --------------------------------------------------------------------

    def context_error(self, n_prompt: int, max_tokens: int | None) -> str | None:
        """vLLM's text for a request longer than max_model_len (serving_engine's check)."""
        ctx = self.vplan.max_model_len
        total = n_prompt + (max_tokens or 0)
        if n_prompt < ctx and total <= ctx:
            return None
        return (
            f"This model's maximum context length is {ctx} tokens. However, you requested "
            f"{total} tokens ({n_prompt} in the messages, {max_tokens or 0} in the completion). "
            "Please reduce the length of the messages or completion."
        )

    def bind_failed(self, exc: OSError) -> None:
        emit(f"(APIServer pid={os.getpid()}) OSError: [Errno {exc.errno}] {exc.strerror}")

    def log_step(self, res: StepResult) -> None:
        self.stats_log.step(res)

    # -- startup ---------------------------------------------------------------------------------

    def startup_steps(self) -> list[tuple[float, str]]:
        lines = startup_lines(
            self.vplan,
            self.config,
            self.card,
            self.ns,
            self.sim.engine_version,
            self.perf.startup_s,
        )
        steps, self._ready_lines = startup_schedule(
            lines, self.perf.startup_s, weights_load_s(self.card, self.vplan.tp)
        )
        return steps

    def emit(self, line: str) -> None:
        emit(line)

    def announce_ready(self) -> None:
        for line in self._ready_lines:
            emit(line)


class StatsLog:
    """vLLM's LoggingStatLogger: every STATS_INTERVAL_S simulated seconds with steps, the
    throughputs over the window, the queue, KV usage and prefix hits (and the speculative
    acceptance of the window under speculative decoding)."""

    def __init__(self, sched: Scheduler, rate: Callable[[float], float]):
        self.sched = sched
        self.rate = rate  # a per-virtual-second figure as clients see it
        self.since = 0.0  # virtual time the window began
        self.prompt = 0
        self.gen = 0
        self.drafts = 0  # verify steps before the window
        self.accepted = 0  # accepted tokens before the window

    def step(self, res: StepResult) -> None:
        s = self.sched
        self.prompt += res.prefill_tokens
        self.gen += sum(n for _, n in res.emitted)
        if s.now - self.since < STATS_INTERVAL_S or not log.isEnabledFor(logging.INFO):
            return
        span = s.now - self.since
        st = s.stats
        hits = st.cached_device + st.cached_host
        parts = [
            f"Engine 000: Avg prompt throughput: {self.rate(self.prompt / span):.1f} tokens/s",
            f"Avg generation throughput: {self.rate(self.gen / span):.1f} tokens/s",
            f"Running: {len(s.running)} reqs",
            f"Waiting: {s.num_queued()} reqs",
            f"GPU KV cache usage: {s.token_usage() * 100:.1f}%",
        ]
        if st.prompt_tokens:
            parts.append(f"Prefix cache hit rate: {hits / st.prompt_tokens * 100:.1f}%")
        emit(info_line(", ".join(parts), "loggers.py:236"))
        self._log_speculation(span)
        self.since = s.now
        self.prompt = self.gen = 0
        self.drafts, self.accepted = st.spec_verify_ct, st.spec_accepted

    def _log_speculation(self, span: float) -> None:
        s, st = self.sched, self.sched.stats
        drafts = st.spec_verify_ct - self.drafts
        if not s.spec_d or drafts <= 0:
            return
        accepted = (st.spec_accepted - self.accepted) - drafts
        drafted = drafts * s.spec_d
        emit(
            info_line(
                "SpecDecoding metrics: "
                f"Mean acceptance length: {1 + accepted / drafts:.2f}, "
                f"Accepted throughput: {self.rate(accepted / span):.2f} tokens/s, "
                f"Drafted throughput: {self.rate(drafted / span):.2f} tokens/s, "
                f"Accepted: {accepted} tokens, Drafted: {drafted} tokens, "
                f"Avg Draft acceptance rate: {accepted / drafted * 100:.1f}%",
                "metrics.py:120",
            )
        )


def main_vllm(ns: argparse.Namespace, config: dict[str, Any], sim: SimOptions) -> int:
    """Plan, refuse or serve as vLLM `sim.engine_version` would (exit status as vLLM's)."""
    version = sim.engine_version
    emit(info_line(SIMULATED_MARKER))
    emit(
        info_line(
            f"sim: gpu={sim.gpu} engine=vllm engine_version={version} "
            f"time_scale={sim.time_scale:g} seed={sim.seed}"
        )
    )
    try:
        launch = plan_launch(plan_vllm, ns, config, sim)
    except ConfigError as exc:  # a value vLLM's own checks refuse, in argparse's words
        flag = "--" + (exc.field or "config").lstrip("-").replace("_", "-")
        print(f"vllm serve: error: argument {flag}: {exc}", file=sys.stderr)
        return 2
    except AutotuneError as exc:
        return target_error(sim, "--model", exc)
    if not launch.plan.fits:
        for line in failure_lines(launch.plan, version):
            emit(line)
        return 1
    box = machine(launch.gpu, sim.seed, sim.alloc_deviation)
    emit(info_line(box.describe()))
    launch = replace(launch, plan=allocate_vllm(launch.plan, box))
    return VLLMSimServer(ns, config, sim, launch).serve()
