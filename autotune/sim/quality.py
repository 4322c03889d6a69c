"""Greedy answers with top-k log-probabilities from the simulated engine (SIMULATED): what the
output-quality guard (autotune.quality) reads from a real engine's /v1/completions `logprobs`.

A stand-in language model: at each position, sixteen candidate words with logits drawn from a
generator seeded by the prompt, the position and the answer so far (so an answer that diverged
keeps diverging, as on a real engine). Like a real model it is sure of most next tokens (one
candidate far ahead) and torn between a few at the others, where a small change can flip it. A lossy configuration adds noise to those logits, drawn
from the same seed and scaled by how lossy it is, so the same configuration always answers the
same and the drift grows with the lossiness. The scales are MODELLED, not measured: an 8-bit
float KV cache or a 16-bit mamba state moves the logits a little, a 4-bit KV cache a lot;
speculative decoding verifies greedily and is lossless.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from autotune.sim import tokens

_VOCAB = (
    "the of and to in is was for it with as on be at by from or have an they which one you were "
    "all there would their we been has when who will more no if out so said what up its about "
    "into than them can only other new some could time these two may then do first any now "
    "value items count index total result data key name size node item list path text line"
).split()
CANDIDATES = 16
LOGIT_SCALE = 1.0
CONFIDENT = 0.95  # share of positions where one candidate is far ahead ...
CONFIDENT_LEAD = 5.0  # ... by this many nats

# Logit noise (standard deviations) a lossy setting adds, by config field and value.
_CACHE_NOISE = {
    "q8_0": 0.002,
    "q5_0": 0.06,
    "q5_1": 0.06,
    "q4_0": 0.25,
    "q4_1": 0.2,
    "iq4_nl": 0.2,
}
_NOISE: dict[str, dict[str, float]] = {
    "kv_cache_dtype": {"fp8": 0.005, "fp8_e4m3": 0.005, "fp8_e5m2": 0.015, "fp8_inc": 0.005},
    "mamba_ssm_dtype": {"bfloat16": 0.004, "float16": 0.002},
    "mamba_ssm_cache_dtype": {"bfloat16": 0.004, "float16": 0.002},
    "cache_type_k": _CACHE_NOISE,
    "cache_type_v": _CACHE_NOISE,
}


def lossiness(config: Mapping[str, Any]) -> float:
    """The logit noise of a configuration (0.0: answers exactly like the reference)."""
    return float(sum(_NOISE.get(k, {}).get(str(v), 0.0) for k, v in config.items()))


def answer(
    prompt_ids: tokens.IdArray, n: int, k: int, noise: float
) -> tuple[list[str], list[float], list[dict[str, float]]]:
    """(the greedy pieces, their log-probabilities, the top-k log-probabilities per position)."""
    seed = zlib.crc32(np.ascontiguousarray(prompt_ids, dtype=np.int64).tobytes())
    ctx = 0
    out: list[str] = []
    chosen: list[float] = []
    tops: list[dict[str, float]] = []
    k = max(1, min(k, CANDIDATES))
    for i in range(n):
        rng = np.random.default_rng([seed, i, ctx])
        words = rng.choice(len(_VOCAB), size=CANDIDATES, replace=False)
        logits = rng.normal(0.0, LOGIT_SCALE, CANDIDATES)
        if rng.random() < CONFIDENT:
            logits[int(rng.integers(CANDIDATES))] += CONFIDENT_LEAD
        logits = logits + noise * rng.normal(0.0, 1.0, CANDIDATES)
        logp = logits - np.logaddexp.reduce(logits)
        order = np.argsort(-logp)
        best = int(order[0])
        text = tokens.piece(_VOCAB[int(words[best])])
        out.append(text)
        chosen.append(float(logp[best]))
        tops.append({tokens.piece(_VOCAB[int(words[j])]): float(logp[j]) for j in order[:k]})
        ctx = zlib.crc32(text.encode(), ctx)
    return out, chosen, tops


def completion_body(
    model: str, prompt_ids: tokens.IdArray, n: int, k: int, noise: float, created: int
) -> dict[str, Any]:
    """An OpenAI /v1/completions response with `logprobs` (the legacy completions shape
    SGLang and vLLM return)."""
    pieces, chosen, tops = answer(prompt_ids, n, k, noise)
    offsets, pos = [], 0
    for p in pieces:
        offsets.append(pos)
        pos += len(p)
    return {
        "id": f"cmpl-sim-{zlib.crc32(str(prompt_ids[:8].tolist()).encode()):08x}",
        "object": "text_completion",
        "created": created,
        "model": model,
        "simulated": True,
        "choices": [
            {
                "index": 0,
                "text": "".join(pieces),
                "logprobs": {
                    "tokens": pieces,
                    "token_logprobs": chosen,
                    "top_logprobs": tops,
                    "text_offset": offsets,
                },
                "finish_reason": "length",
            }
        ],
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": n,
            "total_tokens": len(prompt_ids) + n,
        },
    }


def generate_body(prompt_ids: tokens.IdArray, n: int, k: int, noise: float) -> dict[str, Any]:
    """SGLang's native /generate response with return_logprob (meta_info's
    output_token_logprobs / output_top_logprobs as [logprob, token id, text])."""
    pieces, chosen, tops = answer(prompt_ids, n, k, noise)
    return {
        "text": "".join(pieces),
        "simulated": True,
        "meta_info": {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": n,
            "finish_reason": {"type": "length", "length": n},
            "output_token_logprobs": [
                [lp, tokens.token_id(p.strip() or p), p]
                for p, lp in zip(pieces, chosen, strict=True)
            ],
            "output_top_logprobs": [
                [[lp, tokens.token_id(t.strip() or t), t] for t, lp in top.items()] for top in tops
            ],
        },
    }
