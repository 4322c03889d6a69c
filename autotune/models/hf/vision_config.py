"""Vision towers from a config.json's `vision_config`: the tower, its parameters and those in
linear layers (an engine that shards the tower splits only those), per family."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.models.card import VisionTower


def _first(data: Mapping[str, Any], *keys: str) -> object:
    return next((data[k] for k in keys if data.get(k) is not None), None)


def vision_from_config(
    config: Mapping[str, Any], text_hidden: int
) -> tuple[VisionTower | None, int, int]:
    """The vision tower, its parameters and those of them in linear layers (attention 4h^2 +
    MLP 2h*inter per block; Mllama's `num_global_layers` are blocks too; Kimi K2.5 names the
    fields `vt_*`; Llama 4, Kimi-VL's MoonViT and Qwen3-VL add their own parts,
    `_llama4_vision_parts`, `_moonvit_parts`, `_qwen3_vl_parts`)."""
    vc = config.get("vision_config")
    if not isinstance(vc, dict):
        return None, 0, 0
    layers = _first(vc, "depth", "num_hidden_layers", "vt_num_hidden_layers")
    hidden = _first(vc, "hidden_size", "embed_dim", "vt_hidden_size")
    if not isinstance(layers, int) or not isinstance(hidden, int):
        return None, 0, 0
    extra = vc.get("num_global_layers")
    layers += extra if isinstance(extra, int) else 0
    stated = _first(vc, "intermediate_size", "vt_intermediate_size")
    inter = stated if isinstance(stated, int) else 4 * hidden
    image, patch, per_image = (
        vc.get("image_size"),
        vc.get("patch_size"),
        config.get("mm_tokens_per_image"),
    )
    tower = VisionTower(
        layers=layers,
        hidden_size=hidden,
        model_type=str(vc.get("model_type") or ""),
        intermediate_size=stated if isinstance(stated, int) else 0,
        image_size=image if isinstance(image, int) else 0,
        patch_size=patch if isinstance(patch, int) else 0,
        tokens_per_image=per_image if isinstance(per_image, int) else 0,
    )
    if vc.get("model_type") == "gemma4_vision":
        linear, other = _gemma4_vision_params(vc, layers, hidden, inter, text_hidden)
        return tower, linear + other, linear
    linear = layers * (4 * hidden**2 + 2 * hidden * inter)
    other = 0
    if "projector_input_dim" in vc:
        more_linear, other = _llama4_vision_parts(vc, layers, hidden, inter, text_hidden)
        linear += more_linear
    elif vc.get("model_type") == "moonvit":
        other = _moonvit_parts(vc, layers, hidden, inter, text_hidden)
    elif vc.get("model_type") == "qwen3_vl":
        more_linear, other = _qwen3_vl_parts(vc, layers, hidden, inter, text_hidden)
        linear += more_linear
    return tower, linear + other, linear


def _qwen3_vl_parts(
    vc: Mapping[str, Any], layers: int, hidden: int, inter: int, text_hidden: int
) -> tuple[int, int]:
    """Qwen3-VL's parts beyond the blocks' linear weights, as vLLM's qwen3_vl.py builds them
    (0.11.0, Qwen3_VisionTransformer): (linear: the patch merger and one more per
    `deepstack_visual_indexes` entry, each a biased merge^2*h -> merge^2*h ColumnParallelLinear and
    a biased -> out_hidden_size RowParallelLinear; the rest: their LayerNorms (h wide for the
    merger, merge^2*h for the deepstack ones, use_postshuffle_norm), the blocks' biases and two
    LayerNorms, the biased Conv3d patch embedding and the (num_position_embeddings, h) table)."""
    merged = hidden * int(vc.get("spatial_merge_size") or 2) ** 2
    out = int(vc.get("out_hidden_size") or text_hidden)
    deepstack = len(vc.get("deepstack_visual_indexes") or [])
    mergers = 1 + deepstack
    linear = mergers * (merged * merged + merged * out)
    other = mergers * (merged + out) + 2 * hidden + deepstack * 2 * merged
    other += layers * (3 * hidden + hidden + inter + hidden + 4 * hidden)
    kernel = int(vc.get("temporal_patch_size") or 2) * int(vc.get("patch_size") or 16) ** 2
    other += int(vc.get("in_channels") or 3) * kernel * hidden + hidden
    other += int(vc.get("num_position_embeddings") or 2304) * hidden
    return linear, other


def _moonvit_parts(
    vc: Mapping[str, Any], layers: int, hidden: int, inter: int, text_hidden: int
) -> int:
    """Kimi-VL's MoonViT parts beyond the blocks' linear weights, as vLLM's moonvit.py and
    kimi_vl.py build them (0.19.0): the blocks' biases (wqkv, wo, fc0, fc1) and two LayerNorms,
    the final LayerNorm, the patch embedding (a conv of patch_size^2 x 3 channels with a bias)
    and its learnable (init_pos_emb_height, init_pos_emb_width, hidden) position table, and the
    projector (a LayerNorm, then merge_kernel_size-merged patches through two biased linears,
    the second into the text width). vLLM builds the projector as ReplicatedLinear and splits only
    the blocks' linears, so these are counted with the whole-on-every-rank part."""
    patch = int(vc.get("patch_size") or 14)
    kernel = vc.get("merge_kernel_size") or [2, 2]
    merged = hidden * int(kernel[0]) * int(kernel[1])
    pos = int(vc.get("init_pos_emb_height") or 64) * int(vc.get("init_pos_emb_width") or 64)
    other = layers * (3 * hidden + hidden + inter + hidden + 4 * hidden) + 2 * hidden
    other += 3 * patch**2 * hidden + hidden + pos * hidden
    other += 2 * hidden + merged * merged + merged + merged * text_hidden + text_hidden
    return other


def _gemma4_vision_params(
    vc: Mapping[str, Any], layers: int, hidden: int, inter: int, text_hidden: int
) -> tuple[int, int]:
    """Gemma 4's tower (transformers' Gemma4VisionModel, which vLLM builds): gated MLP blocks
    (gate, up, down), a patch projection and a (2, position_embedding_size, hidden) position
    table, and `embed_vision`'s projection into the text width: (linear, the rest)."""
    heads = vc.get("num_attention_heads")
    head_dim = vc.get("head_dim")
    width = heads * head_dim if isinstance(heads, int) and isinstance(head_dim, int) else hidden
    # Gemma4VisionConfig's defaults: patch_size 16, position_embedding_size 10240
    patch = int(vc.get("patch_size") or 16)
    positions = int(vc.get("position_embedding_size") or 10240)
    block = 4 * hidden * width + 3 * hidden * inter
    linear = layers * block + 3 * patch**2 * hidden + hidden * text_hidden
    return linear, 2 * positions * hidden


def _llama4_vision_parts(
    vc: Mapping[str, Any], layers: int, hidden: int, inter: int, text_hidden: int
) -> tuple[int, int]:
    """Llama 4's vision parts beyond the blocks' weights, as transformers' Llama4VisionModel
    and vLLM's mllama4.py build them: (linear: the unfold patch embedding, the pixel-shuffle
    adapter's two layers and the projector to the text width; the rest: class and positional
    embeddings, LayerNorms and the blocks' biases)."""
    image, patch = int(vc["image_size"]), int(vc["patch_size"])
    proj_in, proj_out = int(vc["projector_input_dim"]), int(vc["projector_output_dim"])
    linear = int(vc.get("num_channels", 3)) * patch**2 * hidden
    linear += inter * proj_in + proj_in * proj_out  # vision_adapter.mlp fc1, fc2 (no bias)
    linear += int(vc["vision_output_dim"]) * text_hidden  # multi_modal_projector.linear_1
    other = ((image // patch) ** 2 + 2) * hidden  # positional embedding + class embedding
    other += 4 * hidden + layers * 4 * hidden  # pre/post LayerNorms; two per block
    other += layers * (4 * hidden + inter + hidden)  # biases: q, k, v, o; fc1; fc2
    return linear, other
