"""Fetch the probe set's greedy answers with top-k log-probabilities from a serving engine.

Each engine through the API that gives token ids with the log-probabilities (two tokens with
the same text then stay apart):
- SGLang: native `/generate` with `return_logprob` and `top_logprobs_num`
  (meta_info.output_token_logprobs / output_top_logprobs: [logprob, id, text]);
- vLLM: `/v1/completions` with `logprobs: k` and `return_tokens_as_token_ids` (keys
  "token_id:N"); `--max-logprobs` (default 20) bounds k;
- llama-server: native `/completion` with `n_probs` and `cache_prompt: false` (a reused prefix
  moves the log-probabilities by about 1e-6): completion_probabilities[i].{id, logprob,
  top_logprobs}.
Greedy: temperature 0, repetition penalty 1 (vLLM otherwise takes the model's generation
config), a fixed number of tokens (`ignore_eos`), so every configuration answers alike.
The simulated engines answer the same requests (autotune/sim/quality.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from autotune.errors import AutotuneError
from autotune.quality.compare import Answer
from autotune.quality.probes import Probe


class ProbeError(AutotuneError):
    """The engine did not answer a quality probe as asked."""


def parse_completion_logprobs(body: Mapping[str, Any]) -> Answer:
    """An Answer from an OpenAI /v1/completions response with `logprobs`.

    Raises:
        ProbeError: no choice, or no per-token log-probabilities in it.
    """
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ProbeError(f"no choices in the response: {str(body)[:200]}")
    lp = choices[0].get("logprobs") if isinstance(choices[0], Mapping) else None
    if not isinstance(lp, Mapping) or not isinstance(lp.get("tokens"), list):
        raise ProbeError("the response has no logprobs.tokens: the engine ignored `logprobs`")
    tokens = tuple(str(t) for t in lp["tokens"])
    tops_raw = lp.get("top_logprobs") or []
    tops = tuple(
        {str(t): float(v) for t, v in (top or {}).items() if v is not None}
        if isinstance(top, Mapping)
        else {}
        for top in tops_raw
    )
    return Answer(tokens=tokens, top=tops)


def _request(
    api: str, prompt: str, *, model: str, max_tokens: int, top_k: int
) -> tuple[str, dict[str, Any]]:
    """(path, JSON body) of one greedy probe request for `api` (sglang, vllm, llamacpp)."""
    if api == "sglang":
        return "/generate", {
            "text": prompt,
            "sampling_params": {
                "max_new_tokens": max_tokens,
                "temperature": 0,
                "ignore_eos": True,
                "repetition_penalty": 1.0,
            },
            "return_logprob": True,
            "top_logprobs_num": top_k,
            "return_text_in_logprobs": True,
        }
    if api == "llamacpp":
        return "/completion", {
            "prompt": prompt,
            "n_predict": max_tokens,
            "temperature": 0,
            "n_probs": top_k,
            "cache_prompt": False,
            "return_tokens": True,
            "ignore_eos": True,
        }
    return "/v1/completions", {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "logprobs": top_k,
        "ignore_eos": True,
        "repetition_penalty": 1.0,
        "return_tokens_as_token_ids": True,
        "n": 1,
    }


def parse_answer(api: str, body: Mapping[str, Any]) -> Answer:
    """An Answer from `api`'s response (tokens keyed by id where the engine gives ids).

    Raises:
        ProbeError: the response holds no per-token log-probabilities.
    """
    if api == "sglang":
        meta = body.get("meta_info") if isinstance(body, Mapping) else None
        chosen = (meta or {}).get("output_token_logprobs")
        tops = (meta or {}).get("output_top_logprobs") or []
        if not isinstance(chosen, list):
            raise ProbeError(
                "no meta_info.output_token_logprobs: the engine ignored return_logprob"
            )
        return Answer(
            tuple(str(c[1]) for c in chosen),
            tuple(
                {str(e[1]): float(e[0]) for e in (top or []) if e[0] is not None} for top in tops
            ),
        )
    if api == "llamacpp":
        probs = body.get("completion_probabilities") if isinstance(body, Mapping) else None
        if not isinstance(probs, list):
            raise ProbeError("no completion_probabilities: the engine ignored n_probs")
        return Answer(
            tuple(str(p.get("id", p.get("token"))) for p in probs),
            tuple(
                {
                    str(t.get("id", t.get("token"))): float(t["logprob"])
                    for t in p.get("top_logprobs") or []
                }
                for p in probs
            ),
        )
    return parse_completion_logprobs(body)


def fetch_answers(
    base_url: str,
    probes: Sequence[Probe],
    *,
    model: str,
    api: str = "vllm",
    max_tokens: int = 32,
    top_k: int = 5,
    api_key: str | None = None,
    timeout_s: float = 120.0,
    transport: httpx.BaseTransport | None = None,
) -> dict[str, Answer]:
    """probe id -> the engine's greedy answer; `api`: the engine (sglang, vllm, llamacpp).

    Raises:
        ProbeError: an HTTP error or a response without log-probabilities (the message names
            the probe and the status).
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    out: dict[str, Answer] = {}
    with httpx.Client(
        base_url=base_url, timeout=timeout_s, headers=headers, transport=transport
    ) as client:
        for p in probes:
            path, payload = _request(
                api, p.prompt, model=model, max_tokens=max_tokens, top_k=top_k
            )
            try:
                r = client.post(path, json=payload)
            except httpx.HTTPError as exc:
                raise ProbeError(f"probe {p.id}: {exc}") from exc
            if r.status_code != 200:
                raise ProbeError(f"probe {p.id}: HTTP {r.status_code}: {r.text[:200]}")
            try:
                out[p.id] = parse_answer(api, r.json())
            except ProbeError as exc:
                raise ProbeError(f"probe {p.id}: {exc}") from None
    return out
