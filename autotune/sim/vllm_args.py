"""The simulated engine's command line as vLLM (`--sim-engine vllm`): exactly the long options of
`vllm serve` for the chosen release, plus the simulator's own `--sim-*` flags.

vLLM's options come from the vLLM adapter's catalog (autotune/engines/vllm/_catalog.py, read
from each PyPI wheel's argument code): kind, destination, choices, deprecated aliases. Like
vLLM's FlexibleArgumentParser it accepts `--max_num_seqs` for `--max-num-seqs` and argparse's
abbreviations; a flag the release lacks is argparse's "unrecognized arguments" (exit 2) under
vLLM's program name. The model is `vllm serve`'s positional MODEL or `--model MODEL` (what the
adapter emits for a launcher other than `vllm serve`, such as this simulator).

Values are read the way vLLM's parser types them where the adapter knows the type (FIELDS), a
JSON object for `--speculative-config`/`--compilation-config`-style values, else an int, a
float or the text as given. Only options given on the command line enter the configuration
(vLLM field names, what the vLLM planner reads); absent ones mean "the engine decides".
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Sequence
from typing import Any

from autotune.sim.options import CATALOG_NARGS, SimOptions, add_sim_flags

PROG = "vllm serve"
# Server-side settings (not the engine configuration the planner reads), with vLLM's defaults.
SERVER_DEFAULTS: dict[str, object] = {
    "host": None,
    "port": 8000,
    "served_model_name": None,
    "tokenizer": None,
    "api_key": None,
    "uvicorn_log_level": "info",
    "enable_prompt_tokens_details": False,
    "stream_interval": 1,
    "tensor_parallel_size": 1,
}
NON_CONFIG = {
    "model",
    "model_tag",
    "host",
    "port",
    "served_model_name",
    "tokenizer",
    "api_key",
    "uvicorn_log_level",
    "disable_uvicorn_access_log",
    "enable_prompt_tokens_details",
    "stream_interval",
    "reasoning_parser",
    "tool_call_parser",
    "enable_auto_tool_choice",
    "chat_template",
    "trust_remote_code",
    "download_dir",
    "seed",
    "disable_log_stats",
    "disable_log_requests",
    "enable_log_requests",
}
_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")
_UNDERSCORE_FLAG = re.compile(r"^--[A-Za-z0-9_-]+")


def _value(text: str) -> object:
    """A value as vLLM's parser would type it when the catalogue gives no type."""
    t = text.strip()
    if t.startswith(("{", "[")):
        try:
            return json.loads(t)
        except json.JSONDecodeError:
            return text
    if _INT.match(t):
        return int(t)
    if _FLOAT.match(t):
        return float(t)
    if t in ("True", "true"):
        return True
    if t in ("False", "false"):
        return False
    return text


def _typed(dest: str, value: object) -> object:
    from autotune.engines.vllm.flags import FIELDS

    field = FIELDS.get(dest)
    if isinstance(value, list):
        return [_typed(dest, v) for v in value]
    if not isinstance(value, str):
        return value
    kind = field.type if field is not None else None
    if kind == "str":
        return value
    if kind == "json":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value  # the planner reports it
    return _value(value)


def build_parser(version: str) -> argparse.ArgumentParser:
    """`vllm serve`'s parser for `version` plus the --sim-* flags (raises ConfigError on a bad
    version)."""
    from autotune.engines.vllm.flags import flag_names, flag_spec, parse_version

    version = parse_version(version)
    p = argparse.ArgumentParser(
        prog=PROG,
        description=f"autotune's simulated vLLM engine (the options of vLLM {version}).",
    )
    p.add_argument("model_tag", nargs="?", default=argparse.SUPPRESS)
    for flag in sorted(flag_names(version)):
        spec = flag_spec(flag, version)
        assert spec is not None
        kw: dict[str, Any] = {"dest": spec.dest, "default": argparse.SUPPRESS}
        if spec.kind in ("b", "n"):
            negative = flag.startswith(("--no-", "--disable-"))
            # `--no-x` / `--disable-x` twins of boolean x store False into x
            off = negative and spec.dest != flag[2:].replace("-", "_")
            kw["action"] = "store_false" if off else "store_true"
        else:
            if spec.choices:
                kw["choices"] = list(spec.choices)
            if spec.kind in CATALOG_NARGS:
                kw["nargs"] = CATALOG_NARGS[spec.kind]
        if spec.deprecated:
            kw["help"] = "(deprecated)"
        p.add_argument(flag, **kw)
    add_sim_flags(p, engine="vllm", default_version=version)
    return p


def _dashes(argv: Sequence[str]) -> list[str]:
    """FlexibleArgumentParser: `--max_num_seqs=8` is `--max-num-seqs=8` (not `--sim-*`)."""
    out = []
    for arg in argv:
        m = _UNDERSCORE_FLAG.match(arg)
        if m and not arg.startswith("--sim"):
            arg = m.group(0).replace("_", "-") + arg[m.end() :]
        out.append(arg)
    return out


def parse_vllm_args(
    argv: Sequence[str], version: str
) -> tuple[argparse.Namespace, dict[str, Any], SimOptions]:
    """Parse argv as vLLM `version` would; returns (namespace with the attributes the server
    reads, the engine config in vLLM field names, sim options). Bad flags exit 2."""
    parser = build_parser(version)
    ns = parser.parse_args(_dashes(argv))
    model = getattr(ns, "model_tag", None) or getattr(ns, "model", None)
    if not model:
        parser.error("the following arguments are required: model_tag (or --model)")
    if ns.sim_time_scale < 0:
        parser.error("argument --sim-time-scale: must be >= 0")
    config: dict[str, Any] = {}
    for key, value in vars(ns).items():
        if key.startswith("sim_") or key in NON_CONFIG or value is None:
            continue
        config[key] = _typed(key, value)
    # before 0.11.1 one --cuda-graph-sizes N means "capture up to N" (the adapter writes
    # max_cudagraph_capture_size so)
    sizes = config.pop("cuda_graph_sizes", None)
    if isinstance(sizes, list) and len(sizes) == 1 and isinstance(sizes[0], int):
        config.setdefault("max_cudagraph_capture_size", sizes[0])
    elif isinstance(sizes, list) and sizes:
        config.setdefault("cudagraph_capture_sizes", sizes)
    estimate = os.environ.get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS")
    if estimate is not None:
        config["memory_profiler_estimate_cudagraphs"] = estimate.strip() not in ("", "0")
    for key, value in SERVER_DEFAULTS.items():
        if not hasattr(ns, key):
            setattr(ns, key, value)
    tp = ns.tensor_parallel_size
    ns.tp_size = int(tp) if isinstance(tp, int | str) and str(tp).isdigit() else 1
    served = ns.served_model_name
    ns.model_path = str(model)
    ns.served_model_name = served[0] if isinstance(served, list) and served else served
    keys = ns.api_key
    ns.api_key = keys[0] if isinstance(keys, list) and keys else keys
    ns.host = ns.host or "127.0.0.1"  # vLLM binds all interfaces; the simulator stays local
    try:
        ns.port = int(ns.port)
    except ValueError:
        parser.error(f"argument --port: invalid int value: {ns.port!r}")
    ns.log_level = str(ns.uvicorn_log_level)
    ns.enable_metrics = True  # vLLM serves /metrics unless told otherwise
    ns.enable_cache_report = bool(ns.enable_prompt_tokens_details)
    ns.disable_cuda_graph = bool(config.get("enforce_eager"))
    ns.tokenizer_path = ns.tokenizer
    ns.stream_interval = _value(str(ns.stream_interval))
    return ns, config, SimOptions.from_namespace(ns, engine="vllm")
