"""`autotune calibrate`: what a real launch on this machine says about the planner.

A startup log is parsed with its engine's parser, the launch is planned again with the
configuration the log records (SGLang's `server_args=ServerArgs(...)`, vLLM's `non-default
args`, llama-server's `llama_context:` and `llama_kv_cache:` lines), and the differences are kept
as this (engine, GPU, model)'s calibration: the free memory before the weights and what the
weights took (SGLang and llama-server log both), the available KV memory (vLLM; llama.cpp sizes
its KV cache from the context, not from free memory, so it has none), and the KV pool, logged
against predicted. A sweep on the same target starts from them
(sweep/planning.py seeds its correction), so its first launch is already planned with the
machine's own memory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.calibration import llamacpp_log
from autotune.errors import ConfigError

ENGINES = ("sglang", "vllm", "llamacpp")
# Log lines that name the engine (each engine's own startup text).
_SIGNS = {
    "sglang": ("Load weight begin", "KV Cache is allocated", "server_args=ServerArgs("),
    "vllm": ("GPU KV cache size", "Available KV cache memory", "non-default args:"),
    "llamacpp": llamacpp_log.SIGNS,
}


@dataclass(frozen=True)
class Calibration:
    """One log's lesson for the planner (GiB; shifts are logged minus planned)."""

    engine: str
    engine_version: str
    gpu: str
    model: str
    tp: int
    predicted_kv: int
    logged_kv: int
    cell_bytes: int | None
    free_shift_gib: float | None
    weights_shift_gib: float | None
    kv_memory_shift_gib: float | None
    source: str
    source_sha256: str

    @property
    def kv_ratio(self) -> float:
        return self.logged_kv / self.predicted_kv


def detect_engine(text: str) -> str | None:
    """The engine whose startup lines the log holds, or None."""
    hits = {e: sum(s in text for s in signs) for e, signs in _SIGNS.items()}
    best = max(hits, key=lambda e: hits[e])
    return best if hits[best] else None


def logged_config(engine: str, text: str) -> dict[str, Any]:
    """The configuration the log records, in the engine's field names ({} when it has none)."""
    if engine == "sglang":
        from autotune.engines.sglang.server_args import parse_server_args

        return parse_server_args(text) or {}
    if engine == "llamacpp":
        return llamacpp_log.logged_config(text)
    from autotune.engines.vllm.logs import logged_args

    return dict(logged_args(text) or {})


@dataclass(frozen=True)
class LoggedLaunch:
    """What a startup log says about its launch: the engine, its version, the configuration in
    the engine's field names (with the CLI's overrides) and the TP size."""

    path: Path
    text: str
    sha256: str
    engine: str
    version: str | None
    config: dict[str, Any]
    tp: int


def read_launch(
    path: Path,
    *,
    engine: str | None = None,
    version: str | None = None,
    tp: int | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> LoggedLaunch:
    """Read a startup log's engine, version and configuration.

    Raises:
        ConfigError: the log is unreadable or names no engine.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the log ({exc})", field="LOG") from exc
    text = raw.decode("utf-8", errors="replace")
    eng = engine or detect_engine(text)
    if eng not in ENGINES:
        raise ConfigError(
            f"{path}: no SGLang, vLLM or llama-server startup lines found; pass --engine "
            "sglang|vllm|llamacpp",
            field="--engine",
        )
    config = logged_config(eng, text)
    config.update(overrides or {})
    ranks = tp or int(config.get("tp_size") or config.get("tensor_parallel_size") or 1)
    return LoggedLaunch(
        path=path,
        text=text,
        sha256=hashlib.sha256(raw).hexdigest(),
        engine=eng,
        version=version or logged_version(eng, text),
        config=config,
        tp=ranks,
    )


def calibrate_log(
    path: Path,
    *,
    model: str,
    gpu: str,
    engine: str | None = None,
    version: str | None = None,
    tp: int | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Calibration:
    """Plan the launch `path` logs and compare.

    Raises:
        ConfigError: the log is unreadable, names no engine, lacks the lines to compare (a KV
            pool), or its engine version is neither logged nor given.
    """
    from autotune.planner.dispatch import CPU_TARGET, plan_for, resolve_target_gpu

    launch = read_launch(path, engine=engine, version=version, tp=tp, overrides=overrides)
    eng = launch.engine
    report = _parse(eng, launch.text)
    if not report.kv_pool_tokens:
        raise ConfigError(
            f"{path}: the log has no KV pool size (SGLang `KV Cache is allocated. #tokens` or "
            "`max_total_num_tokens=`, vLLM `GPU KV cache size`, llama-server `llama_kv_cache: "
            "size =`): calibrate needs a launch that allocated its cache",
            field="LOG",
        )
    ver = launch.version
    if ver is None:
        why = (
            "llama-server logs its build number, not the llama-cpp-python release the planner "
            "follows"
            if eng == "llamacpp"
            else f"the {eng} version is not in the log"
        )
        raise ConfigError(f"{path}: {why}; pass --engine-version", field="--engine-version")
    spec = resolve_target_gpu(eng, gpu, field="--gpu")
    cfg = planner_config(eng, launch.config)
    plan = plan_for(eng, model, spec, cfg, version=ver, tp=launch.tp)
    logged = report.model_dump()
    if eng == "llamacpp" and spec is not None:
        # the device's free memory before the weights (the plan's pre_weights_free_gib is the
        # memory its buffers must fit in); a CPU run logs none
        logged["free_before_weights_gib"] = llamacpp_log.free_before_weights_gib(launch.text)
    return launch_calibration(
        plan.model_dump(),
        logged,
        engine=eng,
        version=ver,
        gpu=CPU_TARGET if spec is None else spec.name,
        model=model,
        tp=launch.tp,
        source=str(path),
        digest=launch.sha256,
    )


def launch_calibration(
    plan: Mapping[str, Any],
    report: Mapping[str, Any],
    *,
    engine: str,
    version: str,
    gpu: str,
    model: str,
    tp: int,
    source: str,
    digest: str,
) -> Calibration:
    """One launch's calibration from the planner's plan and the parsed startup report (dicts,
    as a sweep stores them)."""
    free, weights, kv_memory = memory_shifts(plan, report)
    return Calibration(
        engine=engine,
        engine_version=version,
        gpu=gpu,
        model=model,
        tp=tp,
        predicted_kv=int(plan.get("kv_pool_tokens") or 0),
        logged_kv=int(report.get("kv_pool_tokens") or 0),
        cell_bytes=plan.get("kv_cell_bytes"),
        free_shift_gib=free,
        weights_shift_gib=weights,
        kv_memory_shift_gib=kv_memory,
        source=source,
        source_sha256=digest,
    )


def memory_shifts(
    plan: Mapping[str, Any], report: Mapping[str, Any]
) -> tuple[float | None, float | None, float | None]:
    """Logged minus planned, GiB: free memory before the weights and the weights (SGLang's
    `Load weight begin/end`), the available KV memory (vLLM); None where either side lacks it."""
    return (
        _shift(report.get("free_before_weights_gib"), plan.get("pre_weights_free_gib")),
        _shift(report.get("weights_gib"), plan.get("weights_gib")),
        _shift(report.get("kv_cache_gib"), plan.get("kv_cache_gib")),
    )


def _parse(engine: str, text: str) -> Any:
    if engine == "sglang":
        from autotune.engines.sglang import parse_startup

        return parse_startup(text)
    if engine == "llamacpp":
        from autotune.engines.llamacpp.logs import parse_startup as parse_llamacpp

        return parse_llamacpp(text)
    from autotune.engines.vllm import parse_startup as parse_vllm

    return parse_vllm(text)


def logged_version(engine: str, text: str) -> str | None:
    """vLLM names its version at startup; SGLang's launch lines do not, and llama-server's
    `build N (commit)` is not the llama-cpp-python release its flags and planner are keyed on."""
    if engine != "vllm":
        return None
    import re

    m = re.search(r"(?:vLLM API server version|LLM engine \(v)\s*([0-9][\w.+-]*?)\)?[\s,]", text)
    return m.group(1) if m else None


# What the planner does not take from a logged configuration: where the model and the server
# live (the card and GPU are given), not how memory is spent.
_NOT_PLANNED = frozenset({"model_path", "tokenizer_path", "model_tag", "model", "host", "port"})


def planner_config(engine: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """A logged configuration as the planner takes it (no paths, host or port; no unset
    fields)."""
    return {k: v for k, v in config.items() if k not in _NOT_PLANNED and v is not None}


def _shift(logged: Any, planned: Any) -> float | None:
    return None if logged is None or planned is None else round(float(logged) - float(planned), 4)
