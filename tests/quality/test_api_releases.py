"""The probe requests' fields against the engines' own releases (the PyPI wheels, read as text):
what the quality client sends and reads must exist in the API of the release it talks to."""

from __future__ import annotations

import re
import zipfile

import pytest

from tests.wheels import engine_wheel_or_skip


def _sources(engine: str, version: str, folder: str) -> str:
    with zipfile.ZipFile(engine_wheel_or_skip(engine, version)) as z:
        return "\n".join(
            z.read(n).decode(errors="replace")
            for n in z.namelist()
            if n.startswith(folder) and n.endswith(".py")
        )


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_sglang_generate_logprob_fields(version: str) -> None:
    """SGLang /generate: return_logprob, top_logprobs_num and return_text_in_logprobs in the
    request; meta_info.output_token_logprobs and output_top_logprobs in the answer."""
    managers = _sources("sglang", version, "sglang/srt/managers/")
    for field in ("return_logprob", "top_logprobs_num", "return_text_in_logprobs"):
        assert re.search(rf"\b{field}\s*:", managers), field
    srt = _sources("sglang", version, "sglang/srt/")
    assert '"output_token_logprobs"' in srt and '"output_top_logprobs"' in srt


@pytest.mark.parametrize("version", ["0.19.0", "0.32.0"])
def test_vllm_completions_logprob_fields(version: str) -> None:
    """vLLM /v1/completions: logprobs (an int), return_tokens_as_token_ids, ignore_eos and
    repetition_penalty in the request; --max-logprobs bounds k."""
    openai = _sources("vllm", version, "vllm/entrypoints/openai/")
    for field in ("logprobs", "return_tokens_as_token_ids", "ignore_eos", "repetition_penalty"):
        assert re.search(rf"\b{field}\s*:", openai), field
    config = _sources("vllm", version, "vllm/config/")
    assert re.search(r"max_logprobs\s*:\s*int\s*=\s*(20|Field\(default=20)", config)
