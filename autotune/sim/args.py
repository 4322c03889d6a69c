"""The simulated engine's command line: exactly SGLang's flags for the chosen engine version, plus
its own `--sim-*` flags (sim/options.py). `--sim-engine vllm` switches to vLLM's options
(sim/vllm_args.py).

SGLang's flags come from the SGLang adapter's catalog (autotune/engines/sglang/_catalog.py, read
from each PyPI wheel's own argparse parser): every long option of that version with its kind,
type, choices and destination, deprecated aliases included. So the renames across versions
(FIELD-NOTES P13) behave as on the real engine: a flag the version lacks is argparse's
"unrecognized arguments" (exit 2), and, because SGLang's parser allows abbreviations, a removed
spelling that prefixes a new one (`--cuda-graph-max-bs` on 0.5.20+) is argparse's "ambiguous
option" error, as on SGLang. Flags the simulation does not model are accepted and reported in
/server_info.

Only flags given on the command line enter the engine configuration (SGLang field names, what
the planner reads); absent ones mean "the engine decides", as in the planner.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from autotune.sim.options import CATALOG_NARGS, SIM_DEFAULT_VERSION, SimOptions, add_sim_flags

# Server-side settings with SGLang's defaults; not part of the engine configuration.
SERVER_DEFAULTS: dict[str, object] = {
    "host": "127.0.0.1",
    "port": 30000,
    "served_model_name": None,
    "tokenizer_path": None,
    "log_level": "info",
    "api_key": None,
    "enable_metrics": False,
    "enable_cache_report": False,
    "decode_log_interval": 40,
    "disable_cuda_graph": False,
    "tp_size": 1,
}
NON_CONFIG = {
    "model_path",
    "host",
    "port",
    "served_model_name",
    "tokenizer_path",
    "tokenizer_mode",
    "trust_remote_code",
    "log_level",
    "log_level_http",
    "log_requests",
    "log_requests_level",
    "api_key",
    "admin_api_key",
    "skip_server_warmup",
    "enable_metrics",
    "enable_cache_report",
    "reasoning_parser",
    "tool_call_parser",
    "decode_log_interval",
    "chat_template",
    "revision",
    "download_dir",
    "watchdog_timeout",
    "random_seed",
    "show_time_cost",
    "stream_interval",
    "tp_size",
}
_TYPES: dict[str, Callable[[str], object]] = {"int": int, "float": float}


def _add_sglang_flags(p: argparse.ArgumentParser, version: str) -> None:
    from autotune.engines.sglang.flags import flag_names, flag_spec

    for flag in sorted(flag_names(version)):
        spec = flag_spec(flag, version)
        assert spec is not None
        kw: dict[str, Any] = {"dest": spec.dest, "default": argparse.SUPPRESS}
        conv = _TYPES.get(spec.type, str)
        if spec.kind == "b":
            kw["action"] = "store_false" if flag.startswith("--no-") else "store_true"
        elif spec.kind == "n":
            kw["action"] = "store_true"
        else:
            kw["type"] = conv
            if spec.choices:
                kw["choices"] = [conv(c) for c in spec.choices]
            if spec.kind in CATALOG_NARGS:
                kw["nargs"] = CATALOG_NARGS[spec.kind]
        if spec.deprecated:
            kw["help"] = "(deprecated alias)"
        p.add_argument(flag, **kw)


def build_parser(version: str) -> argparse.ArgumentParser:
    """SGLang `version`'s parser plus the --sim-* flags (raises ConfigError on a bad version)."""
    from autotune.engines.sglang.flags import parse_version

    parse_version(version)
    p = argparse.ArgumentParser(
        prog="python -m autotune.sim",
        description=f"autotune's simulated SGLang engine (the flags of SGLang {version}).",
    )
    _add_sglang_flags(p, version)
    add_sim_flags(p)
    return p


def _peek(argv: Sequence[str]) -> tuple[str, str | None]:
    """(--sim-engine, --sim-engine-version) before the engine's own parser is built."""
    from autotune.sim import SIM_ENGINES

    pre = argparse.ArgumentParser(
        prog="python -m autotune.sim", add_help=False, allow_abbrev=False
    )
    pre.add_argument("--sim-engine", choices=SIM_ENGINES, default=SIM_ENGINES[0])
    pre.add_argument("--sim-engine-version", default=None)
    known, _ = pre.parse_known_args(list(argv))
    return str(known.sim_engine), known.sim_engine_version


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, dict[str, Any], SimOptions]:
    """Parse argv; returns (namespace with server defaults filled in, the engine config in the
    engine's field names, sim options). Bad flags exit 2 through argparse, as SGLang and vLLM
    do. `--sim-engine vllm` parses vLLM's options (sim/vllm_args.py)."""
    engine, given = _peek(argv)
    if engine == "vllm":
        from autotune.planner.dispatch import default_version
        from autotune.sim.vllm_args import parse_vllm_args

        try:
            return parse_vllm_args(argv, given or default_version("vllm"))
        except ValueError as exc:  # ConfigError from parse_version
            argparse.ArgumentParser(prog="vllm serve").error(
                f"argument --sim-engine-version: {exc}"
            )
    version = given or SIM_DEFAULT_VERSION
    try:
        parser = build_parser(version)
    except ValueError:  # ConfigError from parse_version
        err = argparse.ArgumentParser(prog="python -m autotune.sim")
        err.error(
            f"argument --sim-engine-version: unsupported SGLang version {version!r}; "
            "supported: 0.5.9 to 0.5.23"
        )
    ns = parser.parse_args(list(argv))
    if not getattr(ns, "model_path", None):
        parser.error("the following arguments are required: --model-path")
    if ns.sim_time_scale < 0:
        parser.error("argument --sim-time-scale: must be >= 0")
    if hasattr(ns, "tensor_parallel_size"):  # the dest before 0.5.14
        ns.tp_size = ns.tensor_parallel_size
        del ns.tensor_parallel_size
    config: dict[str, Any] = {}
    for key, value in vars(ns).items():
        if key.startswith("sim_") or key in NON_CONFIG or value is None:
            continue
        config[key] = value
    for key, value in SERVER_DEFAULTS.items():
        if not hasattr(ns, key):
            setattr(ns, key, value)
    for list_key, max_key in (
        ("cuda_graph_bs", "cuda_graph_max_bs"),
        ("cuda_graph_bs_decode", "cuda_graph_max_bs_decode"),
    ):
        if config.get(list_key) and max_key not in config:
            config[max_key] = max(config[list_key])
    return ns, config, SimOptions.from_namespace(ns)
