"""Request parsing of the simulated engine's generation endpoints, in SGLang's shapes
(sglang-internals §4): OpenAI chat and completions, and the native `/generate`, each parsed into a
`GenInput`; and the JSON error body every endpoint answers with (`ApiError`, `error_body`).

The response side (stream framing, finish chunks, whole responses) is `job.GenJob`'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from autotune.planner.perf import classify_text
from autotune.sim import tokens

ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    413: "BadRequestError",
    500: "InternalServerError",
    503: "ServiceUnavailable",
}


class ApiError(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status
        self.message = message

    def body(self) -> bytes:
        return error_body(self.message, self.status)


def error_body(message: str, status: int) -> bytes:
    return json.dumps(
        {
            "object": "error",
            "message": message,
            "type": ERROR_TYPES.get(status, "BadRequestError"),
            "param": None,
            "code": status,
        }
    ).encode()


def dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


# --- parsing ----------------------------------------------------------------------------------


def _opt_int(body: dict[str, object], *names: str) -> int | None:
    for name in names:
        if name in body and body[name] is not None:
            v = body[name]
            if isinstance(v, bool) or not isinstance(v, int):
                raise ApiError(f"{name} must be an integer, got {v!r}")
            if v < 0:
                raise ApiError(f"{name} must be >= 0, got {v}")
            return v
    return None


def _opt_str(body: dict[str, object], name: str) -> str | None:
    """A string field, None when absent or not a string (the engines ignore it then)."""
    v = body.get(name)
    return v if isinstance(v, str) else None


def _opt_bool(body: dict[str, object], name: str) -> bool:
    v = body.get(name, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise ApiError(f"{name} must be a boolean, got {v!r}")
    return v


def _stops(value: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return [s for s in value if s]
    raise ApiError(f"stop must be a string or a list of strings, got {value!r}")


@dataclass
class GenInput:
    fmt: str  # chat / completion / generate
    prompt_ids: tokens.IdArray
    units: list[str] | None  # prompt token texts (for echoes), None for input_ids
    kind: str
    max_tokens: int | None
    stop: list[str]
    ignore_eos: bool
    stream: bool
    include_usage: bool = False
    continuous_usage: bool = False
    model: str | None = None
    rid: str | None = None


def _need_object(body: object) -> dict[str, object]:
    if not isinstance(body, dict):
        raise ApiError("request body must be a JSON object")
    return body


def _stream_options(body: dict[str, object]) -> tuple[bool, bool]:
    opts = body.get("stream_options")
    if opts is None:
        return False, False
    if not isinstance(opts, dict):
        raise ApiError(f"stream_options must be an object, got {opts!r}")
    return bool(opts.get("include_usage")), bool(opts.get("continuous_usage_stats"))


def _check_n(body: dict[str, object]) -> None:
    n = body.get("n", 1)
    if n not in (None, 1):
        raise ApiError(f"n={n!r}: the simulated engine serves one choice per request (n=1)")


def _from_text(text: str) -> tuple[tokens.IdArray, list[str]]:
    units = tokens.split(text)
    ids = tokens.encode(text)
    return ids, units


def parse_chat(raw: object) -> GenInput:
    body = _need_object(raw)
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ApiError("messages must be a non-empty list of {role, content} objects")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(f"messages[{i}] must be an object with a string 'role'")
        try:
            tokens.message_text(m.get("content"))
        except ValueError as exc:
            raise ApiError(f"messages[{i}]: {exc}") from None
    _check_n(body)
    text = tokens.chat_prompt(msgs)
    ids, units = _from_text(text)
    last_user = next((m for m in reversed(msgs) if m.get("role") == "user"), msgs[-1])
    return _openai_input(
        body,
        "chat",
        (ids, units),
        classify_text(tokens.message_text(last_user.get("content"))),
        max_names=("max_completion_tokens", "max_tokens"),
        rid=_opt_str(body, "rid"),
    )


def _openai_input(
    body: dict[str, object],
    fmt: str,
    prompt: tuple[tokens.IdArray, list[str] | None],
    kind: str,
    *,
    max_names: tuple[str, ...],
    rid: str | None = None,
) -> GenInput:
    """A chat or completions request with its prompt parsed: the fields both read alike,
    checked in this order: stream_options, the max tokens (`max_names`), stop, ignore_eos,
    stream."""
    inc, cont = _stream_options(body)
    ids, units = prompt
    return GenInput(
        fmt,
        ids,
        units,
        kind,
        _opt_int(body, *max_names),
        _stops(body.get("stop")),
        _opt_bool(body, "ignore_eos"),
        _opt_bool(body, "stream"),
        inc,
        cont,
        _opt_str(body, "model"),
        rid,
    )


def _prompt_value(value: object, name: str) -> tuple[tokens.IdArray, list[str] | None, str]:
    """A prompt given as text, token ids, or a one-element list of either."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
        value = value[0]
    if isinstance(value, str):
        ids, units = _from_text(value)
        return ids, units, value
    if (
        isinstance(value, list)
        and value
        and all(isinstance(t, int) and not isinstance(t, bool) for t in value)
    ):
        import numpy as np

        return np.asarray(value, dtype=np.int64), None, ""
    if isinstance(value, list) and len(value) > 1:
        raise ApiError(
            f"{name}: batched prompts are not supported by the simulated engine; "
            "send one request per prompt"
        )
    raise ApiError(f"{name} must be a non-empty string or a list of token ids")


def parse_completion(raw: object) -> GenInput:
    body = _need_object(raw)
    if "prompt" not in body:
        raise ApiError("prompt is required")
    _check_n(body)
    ids, units, text = _prompt_value(body["prompt"], "prompt")
    kind = classify_text(text) if text else "prose"
    return _openai_input(body, "completion", (ids, units), kind, max_names=("max_tokens",))


def parse_generate(raw: object) -> GenInput:
    body = _need_object(raw)
    if body.get("text") is not None:
        ids, units, text = _prompt_value(body["text"], "text")
    elif body.get("input_ids") is not None:
        ids, units, text = _prompt_value(body["input_ids"], "input_ids")
    else:
        raise ApiError("one of text or input_ids is required")
    sp = body.get("sampling_params") or {}
    if not isinstance(sp, dict):
        raise ApiError(f"sampling_params must be an object, got {sp!r}")
    max_new = _opt_int(sp, "max_new_tokens")
    return GenInput(
        "generate",
        ids,
        units,
        classify_text(text) if text else "prose",
        128 if max_new is None else max_new,  # SGLang's SamplingParams default
        _stops(sp.get("stop")),
        _opt_bool(sp, "ignore_eos"),
        _opt_bool(body, "stream"),
        rid=_opt_str(body, "rid"),
    )
