"""The quality guard's parts: the probe set, the drift measures, the client against the
simulated engine's answers (httpx MockTransport), and the simulated answers' lossiness."""

from __future__ import annotations

import json
import math

import httpx
import pytest

from autotune.quality.client import ProbeError, fetch_answers, parse_completion_logprobs
from autotune.quality.compare import Answer, drift, top_k_kl
from autotune.quality.probes import probe_set
from autotune.sim import tokens
from autotune.sim.quality import completion_body, lossiness


def test_probe_set_is_seeded_and_mixed() -> None:
    a, b = probe_set(8), probe_set(8)
    assert a == b and len({p.prompt for p in a}) == 8
    assert {p.kind for p in a} == {"code", "prose", "extraction", "long"}
    assert probe_set(8, seed=1)[0].prompt != a[0].prompt
    longest = max(a, key=lambda p: len(p.prompt))
    assert longest.kind == "long"


def test_kl_and_agreement() -> None:
    top = {"a": math.log(0.7), "b": math.log(0.2), "c": math.log(0.1)}
    assert top_k_kl(top, top) == pytest.approx(0.0, abs=1e-12)
    moved = {"a": math.log(0.4), "b": math.log(0.5), "c": math.log(0.1)}
    assert top_k_kl(top, moved) > 0.05
    ref = Answer(("x", "y", "z", "w"), (top, top, top, top))
    same = drift({"p": ref}, {"p": ref})
    assert same.token_agreement == 1.0 and same.first_divergence is None and same.mean_kl == 0
    cand = Answer(("x", "y", "q", "w"), (top, moved, top, top))
    d = drift({"p": ref}, {"p": cand})
    assert d.first_divergence == 2 and d.token_agreement == 0.5 and d.worst_probe == "p"
    assert d.mean_kl is not None and d.mean_kl > 0
    with pytest.raises(ValueError, match="no probe"):
        drift({"p": ref}, {"other": ref})


def _sim_transport(config: dict[str, object]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        ids = tokens.encode(body["prompt"])
        obj = completion_body("m", ids, body["max_tokens"], body["logprobs"], lossiness(config), 0)
        return httpx.Response(200, json=obj)

    return httpx.MockTransport(handler)


def _answers(config: dict[str, object]) -> dict[str, Answer]:
    return fetch_answers(
        "http://sim", probe_set(8), model="m", max_tokens=32, transport=_sim_transport(config)
    )


def test_simulated_drift_grows_with_lossiness() -> None:
    """SIMULATED answers: the defaults reproduce themselves exactly; an fp8 KV cache drifts a
    little, a 4-bit llama.cpp cache a lot; speculation is lossless."""
    ref = _answers({})
    assert drift(ref, _answers({})).token_agreement == 1.0
    assert drift(ref, _answers({"speculative_algorithm": "NGRAM"})).token_agreement == 1.0
    fp8 = drift(ref, _answers({"kv_cache_dtype": "fp8_e4m3"}))
    q8 = drift(ref, _answers({"cache_type_k": "q8_0", "cache_type_v": "q8_0"}))
    q4 = drift(ref, _answers({"cache_type_k": "q4_0", "cache_type_v": "q4_0"}))
    assert q4.token_agreement < fp8.token_agreement <= 1.0
    assert q4.token_agreement < q8.token_agreement
    assert q4.mean_kl is not None and fp8.mean_kl is not None and q4.mean_kl > fp8.mean_kl


def test_client_errors_name_the_probe() -> None:
    def no_logprobs(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"text": "x"}]})

    with pytest.raises(ProbeError, match="q0-code.*ignored `logprobs`"):
        fetch_answers(
            "http://e", probe_set(2), model="m", transport=httpx.MockTransport(no_logprobs)
        )

    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"error": "logprobs too large"})

    with pytest.raises(ProbeError, match="HTTP 400"):
        fetch_answers("http://e", probe_set(1), model="m", transport=httpx.MockTransport(refuse))
    ans = parse_completion_logprobs(
        {"choices": [{"logprobs": {"tokens": ["a"], "top_logprobs": [{"a": -0.1, "b": None}]}}]}
    )
    assert ans.tokens == ("a",) and ans.top == ({"a": -0.1},)


def test_probes_fit_the_workload() -> None:
    """The long probe stays inside the workload's longest request, so a configuration that
    serves the workload can answer it (a 2,048-token probe overflowed a 2,048-token slot)."""
    from types import SimpleNamespace

    from autotune.bench.prompts import estimate_tokens
    from autotune.quality.guard import probe_for
    from autotune.sweep.spec_models import QualitySpec

    spec = SimpleNamespace(quality=QualitySpec(), search=SimpleNamespace(seed=0))
    probe = probe_for(spec, "llamacpp", {"cache_type_k": "q8_0"}, None, finalist=False,
                      longest_request=640)  # fmt: skip
    assert probe is not None
    assert max(estimate_tokens(p["prompt"]) for p in probe.probes) <= (640 - 32) * 0.75
    assert probe_for(spec, "llamacpp", {}, {"q": {}}, finalist=False) is None  # lossless: off
