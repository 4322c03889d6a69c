"""The jinja2 environment of the report templates (shipped in autotune/report/templates).

Templates never paste a raw stored value into shell text: `shq` quotes a word, `one_line`
reduces text to one comment-safe line, `cell` makes text safe inside a markdown table cell.
"""

from __future__ import annotations

import math
import re
import shlex
from functools import cache
from typing import Any

_BACKTICKS = re.compile(r"`+")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def one_line(text: Any) -> str:
    """Text for a comment or a unit's Description: control characters (newlines) removed, so
    a stored value cannot end the comment and start a command."""
    return _CONTROL_RE.sub(" ", str(text)).strip()


def shq(value: Any) -> str:
    return shlex.quote(str(value))


def num(value: Any, digits: int = 1) -> str:
    """A figure for a table: thousands separators, `digits` decimals, n/a for missing."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != 0 and abs(value) < 10 ** (-digits):
            return f"{value:.{digits}g}" if digits > 0 else f"{value:.2g}"
        return f"{value:,.{digits}f}"
    return str(value)


def signed_pct(value: Any) -> str:
    if value is None:
        return "n/a"
    return f"{float(value):+.1f} %"


def cell(value: Any) -> str:
    """Text inside a markdown table cell: one line, pipes escaped."""
    if value is None:
        return "-"
    return one_line(value).replace("|", "\\|")


def fence(text: str, lang: str = "") -> str:
    """A fenced code block whose fence is longer than any backtick run in `text`."""
    longest = max((len(m.group()) for m in _BACKTICKS.finditer(text)), default=0)
    bar = "`" * max(3, longest + 1)
    return f"{bar}{lang}\n{text.rstrip()}\n{bar}"


def inline_code(text: Any) -> str:
    """`text` as inline code, safe against backticks inside it."""
    s = one_line(text)
    longest = max((len(m.group()) for m in _BACKTICKS.finditer(s)), default=0)
    bar = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{bar}{pad}{s}{pad}{bar}"


def value_text(value: Any) -> str:
    """A configuration value as a person reads it (None is the engine's default)."""
    if value is None:
        return "(engine default)"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value)
    return str(value)


_FIGURE_NAMES = {
    "output_tok_s": "output tok/s",
    "input_tok_s": "input tok/s",
    "decode_tok_s": "decode tok/s per stream",
    "prefill_tok_s": "prefill tok/s",
    "requests_per_s": "requests/s",
    "ttft_s": "TTFT (s)",
    "error_rate": "error rate",
    "cache_hit_rate": "cache hit rate",
    "spec_accept_length": "speculative accept length",
    "tokens_per_chunk": "tokens per chunk",
}


def figure_name(name: str) -> str:
    """output_tok_s -> output tok/s; ttft_p95_s -> TTFT p95 (s)."""
    if name in _FIGURE_NAMES:
        return _FIGURE_NAMES[name]
    m = re.fullmatch(r"(ttft|itl|tpot|e2e)_(mean|min|max|p\d+)_s", name)
    if m:
        return f"{m.group(1).upper()} {m.group(2)} (s)"
    return name.replace("_tok_s", " tok/s").replace("_", " ")


def figure_value(value: Any, name: str = "") -> str:
    """Seconds with 3 decimals (2 above 10 s), rates with 1, ratios with 3."""
    if value is None:
        return "n/a"
    v = float(value)
    if name.endswith("_s") and not name.endswith(("tok_s", "per_s")):
        return num(v, 3 if abs(v) < 10 else 2)
    if name in ("error_rate", "cache_hit_rate", "cache_hit_rate_usage"):
        return num(v, 3)
    return num(v, 2 if abs(v) < 10 else 1)


def spread_text(spread: Any) -> str:
    """mean ± stdev (n values, min-max) of a collect.Spread, for a table cell."""
    if spread is None or spread.mean is None:
        return "n/a"
    f = spread.figure
    text = figure_value(spread.mean, f)
    if spread.stdev is not None:
        text += f" ± {figure_value(spread.stdev, f)}"
    n = len(spread.values)
    if n > 1:
        text += f" (n={n}, {figure_value(spread.min, f)} to {figure_value(spread.max, f)})"
    else:
        text += " (n=1)"
    return text


def when(value: Any) -> str:
    """A timestamp as YYYY-MM-DD HH:MM UTC."""
    from datetime import UTC, datetime

    if not isinstance(value, datetime):
        return "n/a" if value is None else str(value)
    moment: datetime = value.astimezone(UTC) if value.tzinfo is not None else value
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def change_text(field: str, pair: Any) -> str:
    """`field=new` when the baseline left it to the engine, else `field old → new`."""
    old, new = pair
    if old is None:
        return f"{field}={value_text(new)}"
    return f"{field} {value_text(old)} → {value_text(new)}"


# What each engines.base.FailureClass means for the person reading the report.
FAILURE_TEXT = {
    "kv_cache_oom": "the KV cache did not fit (mem_fraction_static too low or pools too big)",
    "mamba_cache_oom": "the mamba state cache did not fit",
    "cuda_oom": "CUDA out of memory (load, warm-up or under load)",
    "graph_capture_failed": "CUDA graph capture failed (usually memory)",
    "host_memory": "the HiCache host pool did not fit in host RAM",
    "bad_arguments": "the engine rejected its command line",
    "crash": "the engine exited before it was ready",
    "never_ready": "the engine was not ready before the deadline",
    "crash_after_ready": "the engine died while serving",
    "port_in_use": "the port was taken (not the configuration's fault; re-run)",
    "spawn_failed": "the engine program could not be started (launcher missing or not executable)",
    "auth_rejected": "the server refused the benchmark's requests (HTTP 401/403: API key)",
    "benchmark_error": "the engine served errors or malformed streams",
    "worker_lost": "the worker running the trial died (not the configuration's fault)",
    "engine_mismatch": (
        "the engine installed on the worker, or the one that started, is another release "
        "than the spec's (not the configuration's fault; nothing was measured)"
    ),
    "planner_rejected": "rejected before launch by the rules or the VRAM planner (cost no time)",
}


def failure_text(cls: str) -> str:
    return FAILURE_TEXT.get(cls, cls.replace("_", " "))


@cache
def environment() -> Any:
    import jinja2

    from autotune.sources import cite

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("autotune.report", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        shq=shq,
        num=num,
        signed_pct=signed_pct,
        cell=cell,
        fence=fence,
        code=inline_code,
        one_line=one_line,
        value=value_text,
        figname=figure_name,
        fig=figure_value,
        spread=spread_text,
        when=when,
        failure_text=failure_text,
    )
    env.globals["change_text"] = change_text
    env.globals["cite"] = cite  # note number -> public source (autotune.sources)
    return env
