"""The fake tokenizer: stable ids, and generated text that re-tokenizes to the same ids (which is
what lets an agent's next turn hit the radix cache through the previous answer)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from autotune.sim import tokens


def test_ids_are_stable_and_units_match_the_client_estimate() -> None:
    from autotune.bench.prompts import estimate_tokens

    text = "Hello, world!\n\ndef f(x): return x+1"
    ids = tokens.encode(text)
    assert ids[0] == zlib.crc32(b"Hello")
    assert len(ids) == tokens.count(text) == estimate_tokens(text)


@pytest.mark.parametrize("kind", ["prose", "code", "extraction"])
def test_generated_text_retokenizes_to_the_same_ids(kind: str) -> None:
    prompt_text = "Please quote the following passage: " + " ".join(f"w{i}" for i in range(200))
    units = tokens.split(prompt_text)
    prompt = tokens.encode(prompt_text)
    out = tokens.generate(kind, 500, seed=7, prompt_ids=prompt)
    assert len(out) == 500
    text = "".join(tokens.Detokenizer(units).pieces(out))
    assert np.array_equal(tokens.encode(text), out)
    # deterministic in the seed
    assert np.array_equal(out, tokens.generate(kind, 500, seed=7, prompt_ids=prompt))
    if kind == "extraction":  # echoes the prompt (what makes n-gram drafts accepted, C4)
        assert set(out.tolist()) <= set(prompt.tolist())


def test_next_turn_extends_the_previous_prompt_and_answer() -> None:
    msgs = [{"role": "user", "content": "Tell me about caches."}]
    p1 = tokens.encode(tokens.chat_prompt(msgs))
    answer_ids = tokens.generate("prose", 40, seed=1)
    answer = "".join(tokens.Detokenizer().pieces(answer_ids))
    msgs2 = [*msgs, {"role": "assistant", "content": answer}, {"role": "user", "content": "More"}]
    p2 = tokens.encode(tokens.chat_prompt(msgs2))
    n = len(p1) + len(answer_ids)
    assert np.array_equal(p2[:n], np.concatenate([p1, answer_ids]))
    assert tokens.message_text([{"type": "text", "text": "a"}, {"type": "image_url"}]) == "a"
    with pytest.raises(ValueError):
        tokens.message_text(42)
