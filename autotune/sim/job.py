"""One generation request of the simulated engine from parse to last byte: `GenJob` owns the output
text of its scheduler request and turns the scheduler's token events into bytes for the
connection, in SGLang's shapes (sglang-internals §4): OpenAI chat and completions (streamed: role
chunk, content deltas, a finish chunk with `finish_reason` and `matched_stop` (vLLM:
`stop_reason`), a `choices: []` usage chunk when `stream_options.include_usage`, `data: [DONE]`),
and the native `/generate` (cumulative `text`, `meta_info` with a finish_reason dict). Under
speculative decoding one chunk carries every token a verify step accepted (P8).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from autotune.sim import tokens
from autotune.sim.api import GenInput, dumps
from autotune.sim.http import Connection
from autotune.sim.records import SimRequest


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
        conn: Connection,
        stop_key: str = "matched_stop",
    ):
        self.inp = inp
        # SGLang names the stop that ended a choice `matched_stop`, vLLM `stop_reason`
        self.stop_key = stop_key
        self._null_stop = b',"' + stop_key.encode() + b'":null}]}\n\n'
        self.clock = clock
        self.conn = conn  # the connection the request came on
        self.write = conn.write
        self.cache_report = cache_report
        self.rid = inp.rid or uuid.uuid4().hex
        self.model = inp.model or model_name
        self.created = int(time.time())
        req_seed = tokens.request_seed(seed, inp.prompt_ids)
        out_ids = self._plan_output(req_seed)
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
        self.held = 0  # tokens held back by --stream-interval
        self._role_sent = False
        self._prefix, self._suffix = self._stream_framing()

    # -- setup ------------------------------------------------------------------------------------

    def _plan_output(self, req_seed: int) -> tokens.IdArray:
        """Decide the answer: its ids, text pieces, length and why it ends (max_tokens, EOS or a
        stop string); returns the output ids."""
        inp = self.inp
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
        echo = inp.units if inp.kind == "extraction" else None
        self.pieces = [] if self.zero else tokens.Detokenizer(echo).pieces(out_ids)
        self.text_limit: int | None = None
        if inp.stop and self.pieces:
            self._apply_stops()
        self.n_out = len(self.pieces)
        return out_ids

    def _apply_stops(self) -> None:
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

    def _chunk_head(self, obj: bytes) -> bytes:
        """A stream chunk up to its choice's first field: `data: {"id":..,"object":obj,
        "created":..,"model":..,"choices":[{"index":0,`."""
        return (
            b'data: {"id":'
            + dumps(self.rid)
            + b',"object":"'
            + obj
            + b'","created":'
            + str(self.created).encode()
            + b',"model":'
            + dumps(self.model)
            + b',"choices":[{"index":0,'
        )

    def _stream_framing(self) -> tuple[bytes, bytes]:
        """The bytes around a content delta's JSON text in an OpenAI stream chunk."""
        if not self.inp.stream or self.inp.fmt == "generate":
            return b"", b""
        if self.inp.fmt == "chat":
            head = b'"delta":{"reasoning_content":null,"role":null,"content":'
            return (
                self._chunk_head(b"chat.completion.chunk") + head,
                b'},"logprobs":null,"finish_reason":null' + self._null_stop,
            )
        return (
            self._chunk_head(b"text_completion") + b'"text":',
            b',"logprobs":null,"finish_reason":null' + self._null_stop,
        )

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
            self._chunk_head(b"chat.completion.chunk")
            + b'"delta":{"reasoning_content":null,"role":"assistant","content":""},'
            b'"logprobs":null,"finish_reason":null' + self._null_stop
        )

    # -- results --------------------------------------------------------------------------------

    @property
    def completion_tokens(self) -> int:
        return 0 if self.zero else min(self.req.generated, self.n_out)

    def usage(self) -> dict[str, object]:
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

    def _finish_reason(self) -> dict[str, object]:
        if self.finish_type == "length":
            return {"type": "length", "length": self.completion_tokens}
        return {"type": "stop", "matched": self.matched_stop}

    def meta_info(self, final: bool) -> dict[str, object]:
        r = self.req
        meta: dict[str, object] = {
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

    def _generate_obj(self, final: bool) -> dict[str, object]:
        assert self.req.output_ids is not None
        return {
            "text": "".join(self.text_parts),
            "output_ids": self.req.output_ids[: self.completion_tokens].tolist(),
            "meta_info": self.meta_info(final),
        }

    def _choice(self, **content: object) -> dict[str, object]:
        """The one choice of a response or finish chunk, around its content fields."""
        return {
            "index": 0,
            **content,
            "logprobs": None,
            "finish_reason": self.finish_type,
            self.stop_key: self.matched_stop,
        }

    def finish_stream(self) -> bytes:
        """The bytes after the last token: finish chunk, usage chunk, [DONE]."""
        fmt = self.inp.fmt
        if fmt == "generate":
            return (
                b"data: " + dumps(self._generate_obj(final=True)) + b"\n\n" + b"data: [DONE]\n\n"
            )
        head: dict[str, object] = {
            "id": self.rid,
            "object": "chat.completion.chunk" if fmt == "chat" else "text_completion",
            "created": self.created,
            "model": self.model,
        }
        if fmt == "chat":
            choice = self._choice(delta={"reasoning_content": None, "role": None, "content": None})
        else:
            choice = self._choice(text="")
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
            message = {
                "role": "assistant",
                "content": text,
                "reasoning_content": None,
                "tool_calls": None,
            }
            choice, obj = self._choice(message=message), "chat.completion"
        else:
            choice, obj = self._choice(text=text), "text_completion"
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
