"""Request parsing and response formatting of the simulated engine's generation endpoints, in
SGLang's shapes (sglang-internals §4): OpenAI chat and completions (streamed: role chunk, content
deltas, a finish chunk with `finish_reason` and `matched_stop`, a `choices: []` usage chunk when
`stream_options.include_usage`, `data: [DONE]`), and the native `/generate` (cumulative `text`,
`meta_info` with a finish_reason dict).

A request is parsed into a `GenJob`, which owns the output text of its scheduler request and turns
the scheduler's token events into bytes for the connection. Under speculative decoding one chunk
carries every token a verify step accepted (P8).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autotune.planner.perf import classify_text
from autotune.sim import tokens
from autotune.sim.scheduler import SimRequest

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


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


# --- parsing ----------------------------------------------------------------------------------


def _opt_int(body: dict[str, Any], *names: str) -> int | None:
    for name in names:
        if name in body and body[name] is not None:
            v = body[name]
            if isinstance(v, bool) or not isinstance(v, int):
                raise ApiError(f"{name} must be an integer, got {v!r}")
            if v < 0:
                raise ApiError(f"{name} must be >= 0, got {v}")
            return v
    return None


def _opt_bool(body: dict[str, Any], name: str) -> bool:
    v = body.get(name, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise ApiError(f"{name} must be a boolean, got {v!r}")
    return v


def _stops(value: Any) -> list[str]:
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


def _need_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError("request body must be a JSON object")
    return body


def _stream_options(body: dict[str, Any]) -> tuple[bool, bool]:
    opts = body.get("stream_options")
    if opts is None:
        return False, False
    if not isinstance(opts, dict):
        raise ApiError(f"stream_options must be an object, got {opts!r}")
    return bool(opts.get("include_usage")), bool(opts.get("continuous_usage_stats"))


def _check_n(body: dict[str, Any]) -> None:
    n = body.get("n", 1)
    if n not in (None, 1):
        raise ApiError(f"n={n!r}: the simulated engine serves one choice per request (n=1)")


def _from_text(text: str) -> tuple[tokens.IdArray, list[str]]:
    units = tokens.split(text)
    ids = tokens.encode(text)
    return ids, units


def parse_chat(raw: Any) -> GenInput:
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
    inc, cont = _stream_options(body)
    return GenInput(
        "chat",
        ids,
        units,
        classify_text(tokens.message_text(last_user.get("content"))),
        _opt_int(body, "max_completion_tokens", "max_tokens"),
        _stops(body.get("stop")),
        _opt_bool(body, "ignore_eos"),
        _opt_bool(body, "stream"),
        inc,
        cont,
        body.get("model") if isinstance(body.get("model"), str) else None,
        body.get("rid") if isinstance(body.get("rid"), str) else None,
    )


def _prompt_value(value: Any, name: str) -> tuple[tokens.IdArray, list[str] | None, str]:
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


def parse_completion(raw: Any) -> GenInput:
    body = _need_object(raw)
    if "prompt" not in body:
        raise ApiError("prompt is required")
    _check_n(body)
    ids, units, text = _prompt_value(body["prompt"], "prompt")
    inc, cont = _stream_options(body)
    return GenInput(
        "completion",
        ids,
        units,
        classify_text(text) if text else "prose",
        _opt_int(body, "max_tokens"),
        _stops(body.get("stop")),
        _opt_bool(body, "ignore_eos"),
        _opt_bool(body, "stream"),
        inc,
        cont,
        body.get("model") if isinstance(body.get("model"), str) else None,
    )


def parse_generate(raw: Any) -> GenInput:
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
        rid=body.get("rid") if isinstance(body.get("rid"), str) else None,
    )


# --- the job ------------------------------------------------------------------------------------


class GenJob:
    """One generation request: its output, its stream framing, its timings (reported seconds)."""

    def __init__(
        self,
        inp: GenInput,
        *,
        seed: int,
        model_name: str,
        clock: Callable[[], float],
        cache_report: bool,
        write: Callable[[bytes], None],
        stop_key: str = "matched_stop",
    ):
        self.inp = inp
        # SGLang names the stop that ended a choice `matched_stop`, vLLM `stop_reason`
        self.stop_key = stop_key
        self._null_stop = null_stop = b',"' + stop_key.encode() + b'":null}]}\n\n'
        self.clock = clock
        self.write = write
        self.cache_report = cache_report
        self.rid = inp.rid or uuid.uuid4().hex
        self.model = inp.model or model_name
        self.created = int(time.time())
        req_seed = tokens.request_seed(seed, inp.prompt_ids)
        self.matched_stop: str | int | None = None
        self.finish_type = "length"
        n = inp.max_tokens
        if n is None:  # no limit given: the model stops by itself (EOS)
            n = tokens.sampled_length(req_seed)
            if not inp.ignore_eos:
                self.finish_type = "stop"
                self.matched_stop = tokens.EOS_TOKEN_ID
        self.zero = n == 0
        out_ids = tokens.generate(inp.kind, max(n, 1), req_seed, inp.prompt_ids)
        self.pieces = (
            []
            if self.zero
            else tokens.Detokenizer(inp.units if inp.kind == "extraction" else None).pieces(
                out_ids
            )
        )
        self.text_limit: int | None = None
        if inp.stop and self.pieces:
            self._apply_stops(out_ids)
        self.n_out = len(self.pieces)
        self.req = SimRequest(
            rid=self.rid,
            prompt=inp.prompt_ids,
            output_len=max(self.n_out, 1),
            kind=inp.kind,
            seed=req_seed,
            output_ids=out_ids,
            ctx=self,
        )
        self.sent_tokens = 0
        self.sent_chars = 0
        self.text_parts: list[str] = []
        self.t_arrival = clock()
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.done = False
        self.held = 0  # tokens held back by --stream-interval
        self.conn: Any = None  # the server's connection for this request
        self._role_sent = False
        if inp.stream and inp.fmt == "chat":
            self._prefix = (
                b'data: {"id":'
                + dumps(self.rid)
                + b',"object":"chat.completion.chunk","created":'
                + str(self.created).encode()
                + b',"model":'
                + dumps(self.model)
                + b',"choices":[{"index":0,"delta":{"reasoning_content":null,"role":null,'
                b'"content":'
            )
            self._suffix = b'},"logprobs":null,"finish_reason":null' + null_stop
        elif inp.stream and inp.fmt == "completion":
            self._prefix = (
                b'data: {"id":'
                + dumps(self.rid)
                + b',"object":"text_completion","created":'
                + str(self.created).encode()
                + b',"model":'
                + dumps(self.model)
                + b',"choices":[{"index":0,"text":'
            )
            self._suffix = b',"logprobs":null,"finish_reason":null' + null_stop

    def _apply_stops(self, out_ids: tokens.IdArray) -> None:
        text = "".join(self.pieces)
        best: tuple[int, str] | None = None
        for s in self.inp.stop:
            i = text.find(s)
            if i >= 0 and (best is None or i < best[0]):
                best = (i, s)
        if best is None:
            return
        idx, s = best
        end = idx + len(s)
        pos = 0
        for j, p in enumerate(self.pieces):
            pos += len(p)
            if pos >= end:
                self.pieces = self.pieces[: j + 1]
                break
        self.text_limit = idx
        self.finish_type = "stop"
        self.matched_stop = s

    # -- scheduler events -----------------------------------------------------------------------

    def _new_text(self, n: int) -> str:
        a = self.sent_tokens
        b = min(a + n, self.n_out)
        self.sent_tokens = b
        text = "".join(self.pieces[a:b]) if b > a else ""
        if self.text_limit is not None:
            room = self.text_limit - self.sent_chars
            text = text[: max(room, 0)]
        self.sent_chars += len(text)
        return text

    def on_tokens(self, n: int, now: float) -> float | None:
        """New tokens arrived; returns the gap since the previous chunk (for ITL)."""
        gap = None if self.t_last is None else now - self.t_last
        if self.t_first is None:
            self.t_first = now
        self.t_last = now
        text = self._new_text(n)
        if not self.inp.stream:
            self.text_parts.append(text)
            return gap
        fmt = self.inp.fmt
        if fmt == "generate":
            self.text_parts.append(text)
            self.write(b"data: " + dumps(self._generate_obj(final=False)) + b"\n\n")
            return gap
        if fmt == "chat" and not self._role_sent:
            self.write(self._role_chunk())
        if text or self.inp.continuous_usage:
            chunk = self._prefix + dumps(text) + self._suffix
            if self.inp.continuous_usage:
                chunk = chunk[:-3] + b',"usage":' + dumps(self.usage()) + b"}\n\n"
            self.write(chunk)
        return gap

    def _role_chunk(self) -> bytes:
        self._role_sent = True
        return (
            b'data: {"id":' + dumps(self.rid) + b',"object":"chat.completion.chunk",'
            b'"created":'
            + str(self.created).encode()
            + b',"model":'
            + dumps(self.model)
            + b',"choices":[{"index":0,"delta":{"reasoning_content":null,"role":"assistant",'
            b'"content":""},"logprobs":null,"finish_reason":null' + self._null_stop
        )

    # -- results --------------------------------------------------------------------------------

    @property
    def completion_tokens(self) -> int:
        return 0 if self.zero else min(self.req.generated, self.n_out)

    def usage(self) -> dict[str, Any]:
        prompt = self.req.prompt_len
        out = self.completion_tokens
        return {
            "prompt_tokens": prompt,
            "total_tokens": prompt + out,
            "completion_tokens": out,
            "prompt_tokens_details": {"cached_tokens": self.req.cached}
            if self.cache_report
            else None,
            "reasoning_tokens": 0,
        }

    def _finish_reason(self) -> dict[str, Any]:
        if self.finish_type == "length":
            return {"type": "length", "length": self.completion_tokens}
        return {"type": "stop", "matched": self.matched_stop}

    def meta_info(self, final: bool) -> dict[str, Any]:
        r = self.req
        meta: dict[str, Any] = {
            "id": self.rid,
            "finish_reason": self._finish_reason() if final else None,
            "prompt_tokens": r.prompt_len,
            "weight_version": "default",
            "completion_tokens": self.completion_tokens,
            "cached_tokens": r.cached,
            "cached_tokens_details": {"device": r.cached_device, "host": r.cached_host},
        }
        if r.spec_steps:
            meta["spec_verify_ct"] = r.spec_steps
            meta["spec_accept_length"] = r.spec_accepted / r.spec_steps
            meta["spec_accept_token_num"] = r.spec_accepted - r.spec_steps
        if final:
            meta["e2e_latency"] = self.clock() - self.t_arrival
        return meta

    def _generate_obj(self, final: bool) -> dict[str, Any]:
        assert self.req.output_ids is not None
        return {
            "text": "".join(self.text_parts),
            "output_ids": self.req.output_ids[: self.completion_tokens].tolist(),
            "meta_info": self.meta_info(final),
        }

    def finish_stream(self) -> bytes:
        """The bytes after the last token: finish chunk, usage chunk, [DONE]."""
        fmt = self.inp.fmt
        if fmt == "generate":
            return (
                b"data: " + dumps(self._generate_obj(final=True)) + b"\n\n" + b"data: [DONE]\n\n"
            )
        head: dict[str, Any] = {
            "id": self.rid,
            "object": "chat.completion.chunk" if fmt == "chat" else "text_completion",
            "created": self.created,
            "model": self.model,
        }
        if fmt == "chat":
            choice: dict[str, Any] = {
                "index": 0,
                "delta": {"reasoning_content": None, "role": None, "content": None},
                "logprobs": None,
                "finish_reason": self.finish_type,
                self.stop_key: self.matched_stop,
            }
        else:
            choice = {
                "index": 0,
                "text": "",
                "logprobs": None,
                "finish_reason": self.finish_type,
                self.stop_key: self.matched_stop,
            }
        out = b""
        if fmt == "chat" and not self._role_sent:
            out += self._role_chunk()
        finish = head | {"choices": [choice]}
        if self.inp.continuous_usage:
            finish["usage"] = self.usage()
        out += b"data: " + dumps(finish) + b"\n\n"
        if self.inp.include_usage:
            out += b"data: " + dumps(head | {"choices": [], "usage": self.usage()}) + b"\n\n"
        return out + b"data: [DONE]\n\n"

    def response(self) -> bytes:
        """The whole non-streamed response body."""
        fmt = self.inp.fmt
        text = "".join(self.text_parts)
        if fmt == "generate":
            return dumps(self._generate_obj(final=True))
        if fmt == "chat":
            choice: dict[str, Any] = {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": text,
                    "reasoning_content": None,
                    "tool_calls": None,
                },
                "logprobs": None,
                "finish_reason": self.finish_type,
                self.stop_key: self.matched_stop,
            }
            obj = "chat.completion"
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": self.finish_type,
                self.stop_key: self.matched_stop,
            }
            obj = "text_completion"
        return dumps(
            {
                "id": self.rid,
                "object": obj,
                "created": self.created,
                "model": self.model,
                "choices": [choice],
                "usage": self.usage(),
                "metadata": {"weight_version": "default"},
            }
        )
