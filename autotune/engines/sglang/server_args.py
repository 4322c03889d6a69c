"""SGLang's own record of how it was launched: the `server_args=ServerArgs(...)` line every
launch logs (`logger.info(f"{server_args=}")` in srt/entrypoints/engine.py, the dataclass's
repr), read back into SGLang field names, so a real log can be planned with the configuration
it ran."""

from __future__ import annotations

import ast
from typing import Any

_MARK = "server_args=ServerArgs("


def parse_server_args(log_text: str) -> dict[str, Any] | None:
    """The fields of the last `server_args=ServerArgs(...)` line, or None when the log has
    none. Values without a literal repr (an object's repr) are left out."""
    line = next((ln for ln in reversed(log_text.splitlines()) if _MARK in ln), None)
    if line is None:
        return None
    expr = line[line.index(_MARK) + len("server_args=") :].strip()
    try:
        call = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(call, ast.Call):
        return None
    out: dict[str, Any] = {}
    for kw in call.keywords:
        if kw.arg is None:
            continue
        try:
            out[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, SyntaxError, TypeError):
            continue
    return out
