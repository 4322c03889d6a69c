"""Separate draft models for speculative decoding (DFlash block drafters, EAGLE / EAGLE-3 heads):
the facts the planners need to charge a draft's weights and KV pool to the target's budget.

A draft is looked up by the path the launch gives (SGLang's --speculative-draft-model-path,
vLLM's speculative_config.model): its Hugging Face id, or a local folder named like the id's
last part (`~/.cache/huggingface/qwen3.6-27b-dflash`). A draft not listed here stays unmodelled
and the plan says so.

Every value names where it was read. The weights are split the way both engines build the
draft: the attention and MLP projections of each layer are tensor-parallel (QKVParallelLinear,
RowParallelLinear, MergedColumnParallelLinear), the rest (the `fc` projection of the target's
hidden states, norms, DFlash2's convolution kernels and candidate selector) is replicated on
every rank (SGLang models/dflash.py: ReplicatedLinear / nn.Linear / nn.Parameter; vLLM
models/qwen3_dflash.py: ReplicatedLinear). Neither checkpoint carries embeddings or an LM head:
the draft shares the target's.

An EAGLE head (vLLM models/llama_eagle.py, llama_eagle3.py: the same shapes in every release
from 0.8.5 to 0.33.0; `fc` a bias-free nn.Linear before 0.12.0) is one Llama decoder layer
(QKVParallelLinear, RowParallelLinear, MergedColumnParallelLinear: split over the ranks) and a
replicated `fc` (ReplicatedLinear) from the target's hidden states: 2 x hidden for EAGLE (the
token embedding beside the last hidden state), 3 x hidden for EAGLE-3 (three target layers'
hidden states). EAGLE-3's first layer also takes 2 x hidden into its qkv projection
(qkv_input_size) and keeps an LM head of its own over a reduced draft vocabulary
(ParallelLMHead: split over the ranks) with its draft_id_to_target_id map (int64, replicated).
vLLM allocates the head's embedding (and EAGLE's LM head) and drops them for the target's when
the checkpoint has none or an identical copy (v1/worker/gpu/spec_decode/eagle/utils.py
load_eagle_model, _should_share; the V1 proposer's load_model), so they free again before
"Model loading took" is read; from which release, and not under pipeline parallelism:
planner.vllm_draft. From 0.30.0 the map exists only where the draft vocabulary is not the
target's (as for the listed head).
The draft weights are unquantized (the checkpoints carry no quantization_config) in the model
dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

BF16 = 2


@dataclass(frozen=True)
class DraftModel:
    """One draft checkpoint as the engines load it."""

    name: str  # Hugging Face id
    architecture: str
    layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    block_size: int  # tokens drafted and verified per step (dflash_config.block_size)
    sliding_layers: int  # layers with a sliding window (layer_types)
    total_bytes: int  # the checkpoint's weights as loaded
    source: str
    proj_bytes_per_param: float = BF16  # the layers' projections (a W4A16 pack: int4 + scales)
    qkv_input_size: int = 0  # width into the qkv projection (EAGLE-3: 2 x hidden); 0: hidden
    lm_head_vocab: int = 0  # rows of an LM head of the draft's own (vocab-parallel); 0: shared

    @property
    def sharded_bytes(self) -> int:
        """The per-layer attention and MLP projections and an own LM head, split over the TP
        ranks."""
        q = self.num_attention_heads * self.head_dim
        kv = self.num_kv_heads * self.head_dim
        attn = (self.qkv_input_size or self.hidden_size) * (q + 2 * kv) + q * self.hidden_size
        mlp = 3 * self.hidden_size * self.intermediate_size
        head = self.lm_head_vocab * self.hidden_size * BF16
        return int(self.layers * (attn + mlp) * self.proj_bytes_per_param + head)

    @property
    def replicated_bytes(self) -> int:
        """What every rank holds whole: everything but the layers' projections."""
        return self.total_bytes - self.sharded_bytes

    def weights_per_rank(self, tp: int) -> int:
        return self.sharded_bytes // max(tp, 1) + self.replicated_bytes

    def kv_heads_per_rank(self, tp: int) -> int:
        """KV heads one rank keeps (heads are replicated when TP exceeds them)."""
        return max(1, self.num_kv_heads // max(tp, 1))

    def kv_bytes_per_token_layer(self, tp: int, dtype_bytes: float) -> int:
        """K+V bytes of one token in one draft layer on one rank."""
        return int(self.kv_heads_per_rank(tp) * 2 * self.head_dim * dtype_bytes)


_LUCEBOX = (
    "https://github.com/Luce-Org/lucebox-hub/blob/8305b6c2b10b303e71383bd9777a9664370976c0/"
    "server/include/dflash27b.h"
)
_CHARMI = (
    "https://github.com/CharmiUwU/Qwen3.8-27B-DFlash2-DGX-Spark/blob/"
    "f2e1d45328df4146190201b8f49123130f6e06f2/docs/IMPLEMENTATION.md"
)
_SYVAI = (
    "https://github.com/syv-ai/qwen38-27b-rtx3090/blob/07dcd3f22872d98c659931dcdd8c8f72f8f58247/"
    "README.md"
)
_MIAAI = (
    "https://github.com/MiaAI-Lab/Qwen3.8-27B-DFlash2-EXL3-5.0bpw/blob/"
    "b934e6f3534ed9542079bbd6f1d5ef65b8a3469b/model-cards/Qwen3.8-27B-DFlash2-EXL3-5.0bpw.md"
)

# z-lab's 27B DFlash drafter, the dimensions Lucebox hard-codes for it (5 layers, 32 query and
# 8 KV heads of 128, hidden 5120, MLP 17408, block 16) and uses for both z-lab/Qwen3.5-27B-DFlash
# and z-lab/Qwen3.6-27B-DFlash (server/README.md; the 3.6 drafter with its sliding-window
# layers 0..n-2, server/scripts/run.py --draft-swa). Weights: Lucebox's server/RESULTS.md gives
# "BF16, 3.46 GB"; counted from those dimensions (5 layers' projections, fc 5*5120 -> 5120 and
# the norms) they are 3,460,426,240 bytes.
_DFLASH_27B_BYTES = 3_460_426_240

_DFLASH_36 = DraftModel(
    name="z-lab/Qwen3.6-27B-DFlash",
    architecture="DFlashDraftModel",
    layers=5,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    hidden_size=5120,
    intermediate_size=17408,
    block_size=16,
    sliding_layers=4,
    total_bytes=_DFLASH_27B_BYTES,
    source=f"{_LUCEBOX} (dimensions); server/RESULTS.md and run.py of the same commit",
)
# z-lab's DFlash2 drafter for Qwen3.8-27B: 5 layers, 8 KV heads of 128 and block 8 as SGLang's
# boot log shows them (CharmiUwU's recipe); 3.85 GB bf16 (MiaAI-Lab's card of its EXL3 quant,
# "from 3.85 GB bf16"). The attention and MLP widths are the 27B DFlash family's (Lucebox,
# above); the rest of the 3.85 GB (fc, the per-layer convolution kernels, the candidate
# selector's codebooks) is replicated.
_DFLASH2 = replace(
    _DFLASH_36,
    name="z-lab/Qwen3.8-27B-DFlash2",
    architecture="DFlash2DraftModel",
    block_size=8,
    sliding_layers=5,
    total_bytes=3_850_000_000,
    source=f"{_CHARMI} (layers, KV heads, head dim, block); {_MIAAI} (3.85 GB bf16); "
    f"{_LUCEBOX} (widths)",
)
_HIPENGINE = (
    "https://github.com/shisa-ai/hipEngine/blob/293ed8ddefef7b7079dc5e1c9857db45d13f2a36/"
    "docs/LAGUNA.md"
)
_SPARK = (
    "https://github.com/sostrowsk/dgx-spark-local-llm/blob/"
    "4b5486468ec6941d55c25f0b4f9557c7893d8b58/handouts/01-laguna-s-2.1.md"
)
# poolside's DFlash drafter for Laguna-S-2.1 (DFlashLagunaForCausalLM), as hipEngine's Laguna
# notes read its config and safetensors header: 6 sliding-attention layers (window 512), 72 query
# and 8 KV heads of 128, hidden 3072, dense FFN 12288, block 16, 2,229,962,896 bytes bf16 (fused
# qkv_proj, g_proj, o_proj and the dense MLP per layer; fc 18432 -> 3072 and the norms the rest).
# The INT4 and NVFP4 drafters the quantized targets pair with: "2.23 GB each" (a DGX Spark
# report, the HF API's file sizes), so their shapes and bytes are taken as this drafter's.
_LAGUNA_S_DFLASH = DraftModel(
    name="poolside/Laguna-S-2.1-DFlash",
    architecture="DFlashLagunaForCausalLM",
    layers=6,
    num_attention_heads=72,
    num_kv_heads=8,
    head_dim=128,
    hidden_size=3072,
    intermediate_size=12288,
    block_size=16,
    sliding_layers=6,
    total_bytes=2_229_962_896,
    source=f"{_HIPENGINE} (DFlash configuration, safetensors size)",
)
# EAGLE heads for the Llama-3 8B targets (yuhuili, the EAGLE authors' checkpoints), as their
# config.json files publish them: one LlamaForCausalLM decoder layer in float16 with the 8B
# target's widths (hidden 4096, MLP 14336, 32 query and 8 KV heads of 128); the EAGLE-3 head adds
# draft_vocab_size 32000 (its LM head and draft_id_to_target_id) and the 3 x hidden fc input
# (vLLM's default of three auxiliary hidden states when the config names no layer ids).
_EAGLE_LLAMA3 = "https://huggingface.co/yuhuili/EAGLE-LLaMA3-Instruct-8B/blob/main/config.json"
_EAGLE3_LLAMA31 = (
    "https://huggingface.co/yuhuili/EAGLE3-LLaMA3.1-Instruct-8B/blob/main/config.json"
)
_LLAMA3_8B_HIDDEN = 4096


def _eagle_head(name: str, *, eagle3: bool, source: str) -> DraftModel:
    """One EAGLE (eagle3=False) or EAGLE-3 head over a Llama-3 8B target, its bytes counted from
    the shapes (module docstring): the split projections and LM head, then the replicated fc
    (2 or 3 x hidden in), RMSNorm weights (EAGLE: post-attention only, its first layer has no
    input norm; EAGLE-3: input, hidden, post-attention and final) and the int64 vocabulary map."""
    hidden = _LLAMA3_8B_HIDDEN
    draft_vocab = 32000 if eagle3 else 0
    head = DraftModel(
        name=name,
        architecture="Eagle3LlamaForCausalLM" if eagle3 else "EagleLlamaForCausalLM",
        layers=1,
        num_attention_heads=32,
        num_kv_heads=8,
        head_dim=128,
        hidden_size=hidden,
        intermediate_size=14336,
        block_size=1,
        sliding_layers=0,
        total_bytes=0,
        source=source,
        qkv_input_size=2 * hidden if eagle3 else 0,
        lm_head_vocab=draft_vocab,
    )
    fc = (3 if eagle3 else 2) * hidden * hidden * BF16
    norms = (4 if eagle3 else 1) * hidden * BF16
    return replace(head, total_bytes=head.sharded_bytes + fc + norms + 8 * draft_vocab)


DRAFTS: dict[str, DraftModel] = {
    d.name.lower(): d
    for d in (
        _DFLASH_36,
        replace(
            _DFLASH_36,
            name="z-lab/Qwen3.5-27B-DFlash",
            sliding_layers=0,
            source=f"{_LUCEBOX} (dimensions); server/RESULTS.md: BF16, 3.46 GB",
        ),
        _DFLASH2,
        # syv-ai's int4 requantization of that drafter (GPTQ-style W4A16 qweight/qzeros/scales):
        # "once, 1.2 GB" (the fetch step in syv-ai/qwen38-27b-rtx3090's README). Its shapes are
        # DFlash2's; the projections counted at int4 with one fp16 scale and an int4 zero per
        # group of 128 (the group size is not stated), the rest of the 1.2 GB replicated.
        replace(
            _DFLASH2,
            name="syvai/Qwen3.8-27B-DFlash2-W4A16",
            total_bytes=1_200_000_000,
            proj_bytes_per_param=0.5 + 2 / 128 + 0.5 / 128,
            source=f"{_SYVAI} (1.2 GB, int4-requantized DFlash2); shapes as z-lab's DFlash2",
        ),
        _LAGUNA_S_DFLASH,
        *(
            replace(
                _LAGUNA_S_DFLASH,
                name=f"poolside/Laguna-S-2.1-DFlash-{kind}",
                total_bytes=2_230_000_000,
                source=f"{_SPARK} (2.23 GB); shapes as {_HIPENGINE}",
            )
            for kind in ("INT4", "NVFP4")
        ),
        _eagle_head("yuhuili/EAGLE-LLaMA3-Instruct-8B", eagle3=False, source=_EAGLE_LLAMA3),
        _eagle_head("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", eagle3=True, source=_EAGLE3_LLAMA31),
    )
}


def draft_model(path: object) -> DraftModel | None:
    """The draft a launch names: its Hugging Face id, or a local folder named like the id's
    last part (case-insensitive); None when the path names no listed draft."""
    if not isinstance(path, str) or not path.strip():
        return None
    text = path.strip().rstrip("/").lower()
    if text in DRAFTS:
        return DRAFTS[text]
    leaf = text.rsplit("/", 1)[-1]
    hits = [d for key, d in DRAFTS.items() if key.rsplit("/", 1)[-1] == leaf]
    return hits[0] if len(hits) == 1 else None


def launch_draft_path(cfg: dict[str, Any]) -> object:
    """The draft path a launch's configuration names: SGLang's speculative_draft_model_path or
    vLLM's speculative_config.model."""
    spec = cfg.get("speculative_config")
    return cfg.get("speculative_draft_model_path") or (
        spec.get("model") if isinstance(spec, dict) else None
    )


def noted_draft(path: object, assumptions: list[str], *, dflash: bool) -> DraftModel | None:
    """The listed draft `path` names, described in `assumptions`; a DFlash draft the list lacks
    is noted there as unmodelled (weights and KV not counted)."""
    draft = draft_model(path)
    if draft is None:
        if dflash:
            assumptions.append(
                f"DFlash draft {path!r} is not in the planner's draft list: its weights and KV "
                "cache are not counted"
            )
        return None
    assumptions.append(
        f"{draft.architecture} {draft.name}: {draft.layers} layers, {draft.num_kv_heads} KV "
        f"heads of {draft.head_dim}, {draft.total_bytes / 1e9:.2f} GB"
    )
    return draft
