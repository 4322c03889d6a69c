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
planner sizes, and the speculative config to the perf model's families (ngram -> NGRAM; mtp,
eagle, draft models -> EAGLE; planner.dispatch.scheduler_plan). The first line of the log carries
the vLLM adapter's SIMULATED_MARKER, so nothing mistakes it for a GPU run.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from typing import Any

from autotune.engines.vllm import SIMULATED_MARKER, format_failure, format_startup_lines
from autotune.engines.vllm.flags import at_least
from autotune.engines.vllm.logs import VLLMLaunchReport
from autotune.errors import AutotuneError, ConfigError
from autotune.hardware.gpus import GPUSpec, get_gpu
from autotune.models.card import ModelCard
from autotune.models.registry import load_card
from autotune.planner.dispatch import scheduler_plan
from autotune.planner.vllm import VLLMPlan, plan_vllm
from autotune.sim.http import Connection, Request
from autotune.sim.metrics import VLLMSimMetrics
from autotune.sim.options import SimOptions
from autotune.sim.scheduler import StepResult
from autotune.sim.server import SimServer

log = logging.getLogger("autotune.sim")

TS = "00-00 00:00:00"  # placeholder timestamp, replaced by the wall clock when printed
STATS_INTERVAL_S = 10.0  # VLLM_LOG_STATS_INTERVAL
# ModelCard quantization schemes as vLLM's engine config line names them.
QUANTIZATION = {"fp8_block": "fp8", "fp8": "fp8", "awq": "awq_marlin", "gptq": "gptq_marlin"}
QUANTIZATION.update({"int8": "compressed-tensors", "nvfp4": "modelopt_fp4"})


def stamp(line: str) -> str:
    """The line with the wall-clock time where the placeholder is."""
    return line.replace(TS, time.strftime("%m-%d %H:%M:%S"), 1)


def emit(line: str) -> None:
    sys.stderr.write(stamp(line) + "\n")
    sys.stderr.flush()


def info_line(message: str, src: str = "sim.py:1") -> str:
    """A line in vLLM's API-server format (prefix from 0.10.1 on every release we print)."""
    return f"(APIServer pid={os.getpid()}) INFO {TS} [{src}] {message}"


def launch_report(
    plan: VLLMPlan, config: dict[str, Any], card: ModelCard, version: str, startup_s: float
) -> VLLMLaunchReport:
    """The figures a real launch of `plan` logs (set only where vLLM prints them: max_num_seqs
    and gpu_memory_utilization appear in `non-default args` only when given)."""
    eager = bool(config.get("enforce_eager"))
    graph_estimate = (
        plan.graph_gib if plan.graph_in_budget and at_least(version, "0.18.0") else None
    )
    load_s = card.weights.total / plan.tp / 2.0e9
    scheme = card.quantization.scheme
    return VLLMLaunchReport(
        weights_gib=plan.weights_gib,
        kv_dtype=plan.kv_dtype,
        kv_pool_tokens=plan.kv_pool_tokens,
        max_concurrency=plan.max_concurrency,
        context_len=plan.max_model_len,
        kv_cache_gib=plan.kv_cache_gib,
        gpu_memory_utilization=plan.gpu_memory_utilization
        if config.get("gpu_memory_utilization") is not None
        else None,
        graph_estimate_gib=graph_estimate,
        graph_gib=None if eager else plan.graph_gib,
        num_gpu_blocks=plan.num_gpu_blocks,
        block_size=plan.block_size if card.is_hybrid else None,
        max_num_batched_tokens=plan.max_num_batched_tokens,
        max_num_seqs=plan.max_num_seqs if config.get("max_num_seqs") is not None else None,
        quantization=None if scheme == "none" else QUANTIZATION.get(scheme, scheme),
        enforce_eager=eager,
        enable_prefix_caching=plan.prefix_caching,
        enable_chunked_prefill=plan.mixed_chunk,
        weights_load_s=round(load_s, 6),
        graph_capture_s=0.0 if eager else max(1.0, 0.05 * len(plan.capture_sizes)),
        init_engine_s=round(max(startup_s - load_s, 1.0), 2),
        ready=True,
    )


def failure_lines(plan: VLLMPlan, version: str) -> list[str]:
    """vLLM's own error text for the first reason the planner rejects the config, in the order
    vLLM meets them (startup memory check, profiling, KV cache sizing, graph capture); a reason
    vLLM reports as a config error gets the engine core's traceback with the planner's words."""
    reasons = list(plan.reasons)
    tp = plan.tp

    def first(*needles: str) -> str | None:
        return next((r for r in reasons if any(n in r for n in needles)), None)

    def render(kind: str, **values: Any) -> list[str]:
        return format_failure(kind, version, timestamp=TS, tp_size=tp, pid=os.getpid(), **values)

    if first("Free memory on device"):
        return render(
            "startup_free_memory",
            free_gib=plan.pre_weights_free_gib,
            total_gib=plan.total_gib,
            gpu_memory_utilization=plan.gpu_memory_utilization,
        )
    if first("No available memory for the cache blocks"):
        return render("no_cache_memory")
    if first("To serve at least one request"):
        return render(
            "kv_cache_too_small",
            max_model_len=plan.max_model_len,
            needed_gib=plan.kv_needed_gib,
            available_gib=plan.kv_cache_gib,
            estimated_max_len=plan.estimated_max_model_len or None,
        )
    if first("CUDA graphs (~"):
        free = max(plan.slack_gib, 0.0)
        in_use = plan.total_gib - free
        return render(
            "graph_capture_oom",
            tried_gib=min(plan.graph_gib, 2.0),
            total_gib=plan.total_gib,
            free_gib=free,
            in_use_gib=in_use,
            allocated_gib=max(in_use - 0.5, 0.0),
        )
    # a configuration vLLM refuses while building its config (unsupported architecture, no MTP
    # weights, chunked prefill off below max_model_len): the traceback and the core's exit
    core = "EngineCore_DP0" if at_least(version, "0.10.2") else "EngineCore_0"
    pid = os.getpid()
    return [
        f"({core} pid={pid}) ERROR {TS} [core.py:632] EngineCore failed to start.",
        f"({core} pid={pid}) Traceback (most recent call last):",
        f"({core} pid={pid}) ValueError: {'; '.join(reasons)}",
        *render("engine_dead", exit_code=1),
    ]


class VLLMSimServer(SimServer):
    """SimServer with vLLM's routes, startup, health, metrics, stats lines and error texts."""

    serve_while_loading = False
    stop_key = "stop_reason"

    def __init__(
        self,
        ns: Any,
        config: dict[str, Any],
        sim: SimOptions,
        card: ModelCard,
        gpu: GPUSpec,
        plan: VLLMPlan,
    ):
        self.vplan = plan
        ssm = config.get("mamba_ssm_cache_dtype")
        sched_config = {
            "page_size": plan.block_size,
            "max_prefill_tokens": plan.max_num_batched_tokens,
            # vLLM's align mode keeps a hybrid model's state at block boundaries
            "mamba_track_interval": plan.block_size,
            "mamba_ssm_dtype": None if ssm in (None, "auto") else ssm,
        }
        super().__init__(
            ns, config, sim, card, gpu, scheduler_plan(plan), sched_config=sched_config
        )
        self._ready_lines: list[str] = []
        self._stats_at = 0.0
        self._win_prompt = 0
        self._win_gen = 0
        self._win_drafts = 0
        self._win_accepted = 0

    # -- pieces that differ from SGLang --------------------------------------------------------

    def make_routes(self) -> dict[str, tuple[str, Any]]:
        return {
            "/health": ("GET", self._health),
            "/ping": ("GET|POST", self._health),
            "/version": ("GET", self._version),
            "/v1/models": ("GET", self._models),
            "/metrics": ("GET", self._metrics),
            "/v1/chat/completions": ("POST", self._chat),
            "/v1/completions": ("POST", self._completion),
        }

    def make_metrics(self) -> Any:
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

    def _health(self, req: Request, conn: Connection) -> None:
        conn.respond(200, b"")  # nothing is served before the engine is up

    def _version(self, req: Request, conn: Connection) -> None:
        self._json(conn, {"version": self.sim.engine_version, "simulated": True})

    def _models(self, req: Request, conn: Connection) -> None:
        created = int(self.started_wall)
        self._json(
            conn,
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model_name,
                        "object": "model",
                        "created": created,
                        "owned_by": "vllm",
                        "root": self.ns.model_path,
                        "parent": None,
                        "max_model_len": self.vplan.max_model_len,
                        "permission": [
                            {
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
                        ],
                    }
                ],
            },
        )

    def _metrics(self, req: Request, conn: Connection) -> None:
        conn.respond(
            200, self.metrics.exposition(), content_type="text/plain; version=0.0.4; charset=utf-8"
        )

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

    # -- startup ---------------------------------------------------------------------------------

    def _lines(self) -> list[str]:
        report = launch_report(
            self.vplan, self.config, self.card, self.sim.engine_version, self.perf.startup_s
        )
        return format_startup_lines(
            self.sim.engine_version,
            report,
            model=self.ns.model_path,
            host=self.ns.host,
            port=int(self.ns.port),
            tp_size=self.vplan.tp,
            total_gib=self.vplan.total_gib,
            timestamp=TS,
            pid=os.getpid(),
            elapsed_s=report.weights_load_s or 1.0,
        )

    def startup_steps(self) -> list[tuple[float, str]]:
        lines = self._lines()
        cut = next((i + 1 for i, line in enumerate(lines) if "Starting vLLM" in line), len(lines))
        total = max(self.perf.startup_s, 1e-9)
        load_end = min(0.2 + self.card.weights.total / self.vplan.tp / 2.0e9 / total, 0.8)
        out: list[tuple[float, str]] = []
        for line in lines[:cut]:
            if "Model loading took" in line:
                frac = load_end
            elif "Available KV cache memory" in line or "KV cache size" in line:
                frac = load_end + 0.05
            elif "Graph capturing finished" in line or "init engine" in line:
                frac = 0.98
            elif "Starting vLLM" in line:
                frac = 0.99
            else:
                frac = 0.1
            out.append((frac, line))
        best = 0.0
        self._ready_lines = lines[cut:]
        return [(best := max(best, f), line) for f, line in out]

    def emit(self, line: str) -> None:
        emit(line)

    def announce_ready(self) -> None:
        for line in self._ready_lines:
            emit(line)

    # -- periodic stats (vLLM's LoggingStatLogger) ----------------------------------------------

    def _log_step(self, res: StepResult) -> None:
        s = self.sched
        self._win_prompt += res.prefill_tokens
        self._win_gen += sum(n for _, n in res.emitted)
        if s.now - self._stats_at < STATS_INTERVAL_S or not log.isEnabledFor(logging.INFO):
            return
        span = s.now - self._stats_at
        st = s.stats
        hits = st.cached_device + st.cached_host
        parts = [
            f"Engine 000: Avg prompt throughput: {self.rate(self._win_prompt / span):.1f} "
            f"tokens/s",
            f"Avg generation throughput: {self.rate(self._win_gen / span):.1f} tokens/s",
            f"Running: {len(s.running)} reqs",
            f"Waiting: {s.num_queued()} reqs",
            f"GPU KV cache usage: {s.token_usage() * 100:.1f}%",
        ]
        if st.prompt_tokens:
            parts.append(f"Prefix cache hit rate: {hits / st.prompt_tokens * 100:.1f}%")
        emit(info_line(", ".join(parts), "loggers.py:236"))
        drafts = st.spec_verify_ct - self._win_drafts
        if s.spec_d and drafts > 0:
            accepted = (st.spec_accepted - self._win_accepted) - drafts
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
        self._stats_at = s.now
        self._win_prompt = self._win_gen = 0
        self._win_drafts, self._win_accepted = st.spec_verify_ct, st.spec_accepted


def main_vllm(ns: Any, config: dict[str, Any], sim: SimOptions) -> int:
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
        card = load_card(sim.model or ns.model_path)
        gpu = get_gpu(sim.gpu)
        plan = plan_vllm(
            card,
            gpu,
            config,
            version=version,
            tp=ns.tp_size,
            gpu_free_gib=sim.gpu_free_gib,
            host_free_gib=sim.host_free_gib,
        )
    except ConfigError as exc:  # a value vLLM's own checks refuse, in argparse's words
        flag = "--" + (exc.field or "config").lstrip("-").replace("_", "-")
        print(f"vllm serve: error: argument {flag}: {exc}", file=sys.stderr)
        return 2
    except AutotuneError as exc:
        what = "--sim-model" if sim.model else "--model (or --sim-model)"
        print(f"python -m autotune.sim: error: {what}/--sim-gpu: {exc}", file=sys.stderr)
        return 2
    if not plan.fits:
        for line in failure_lines(plan, version):
            emit(line)
        return 1
    server = VLLMSimServer(ns, config, sim, card, gpu, plan)
    try:
        return asyncio.run(server.run())
    except KeyboardInterrupt:
        return 0
    finally:
        sys.stderr.flush()
