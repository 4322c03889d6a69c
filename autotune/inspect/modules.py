"""The checkpoint's modules: tensors grouped by the module that owns them (name minus the
parameter suffix), each with how it is stored (packed int, fp8, fp4, int8 or float) and its
dense widths."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from autotune.models.hf import FLOAT_DTYPES, FP8_DTYPES, Checkpoint, TensorInfo

# Row-parallel projections split K across TP ranks; every other linear layer splits N.
ROW_PARALLEL = frozenset(
    {"o_proj", "out_proj", "down_proj", "dense", "proj", "fc2", "linear_fc2", "down"}
)
# Checkpoint shards SGLang loads into one fused layer (they must share one quantization).
FUSED: dict[frozenset[str], str] = {
    frozenset({"q_proj", "k_proj", "v_proj"}): "qkv_proj",
    frozenset({"gate_proj", "up_proj"}): "gate_up_proj",
    frozenset({"in_proj_a", "in_proj_b"}): "in_proj_ba",
    frozenset({"in_proj_qkv", "in_proj_z"}): "in_proj_qkvz",
}
# MoE routers are never quantized by the engines, whatever the config lists.
NEVER_QUANTIZED = frozenset({"gate", "shared_expert_gate", "router"})
LAYER_PREFIX_RE = re.compile(r"^(.*?)(?:^|\.)layers\.(\d+)\.(.+)$")


@dataclass
class Module:
    """The tensors one module owns (by parameter name) and how its weight is stored."""

    name: str
    params: dict[str, TensorInfo] = field(default_factory=dict)
    quant: str | None = None  # "int" (packed int4/int8), "fp8", "fp4", "int8" or None
    n: int | None = None  # output width (rows of the dense weight)
    k: int | None = None  # input width
    main: str = ""  # the tensor holding the weight

    @property
    def leaf(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    @property
    def component(self) -> str:
        return next(iter(self.params.values())).component

    @property
    def layer(self) -> int | None:
        """Decoder layer index (None for embeddings, lm_head, MTP and vision modules)."""
        t = next(iter(self.params.values()))
        return t.layer if t.component == "decoder" else None

    @property
    def is_linear(self) -> bool:
        return self.quant is not None or self.n is not None

    @property
    def row_parallel(self) -> bool:
        return self.leaf in ROW_PARALLEL


def group_modules(ckpt: Checkpoint, bits: int) -> dict[str, Module]:
    """Every tensor under the module that owns it, each module's storage and widths read from
    its weight (`bits`: the packed integer width, for int32 packs)."""
    mods: dict[str, Module] = {}
    for t in ckpt.tensors.values():
        owner, _, param = t.name.rpartition(".")
        mods.setdefault(owner, Module(owner)).params[param] = t
    pack = max(1, 32 // bits)
    for m in mods.values():
        p = m.params
        if "weight_packed" in p:  # compressed-tensors: [N, K / pack] int32, or [N, K/2] uint8
            w = p["weight_packed"]
            m.quant = "int" if w.dtype in ("I32", "U32") else "fp4"
            per = pack if m.quant == "int" else 2
            if len(w.shape) == 2:
                m.n, m.k = w.shape[0], w.shape[1] * per
            m.main = w.name
        elif "qweight" in p:  # AWQ [K, N / pack] or GPTQ [K / pack, N]; scales are [K/g, N]
            w = p["qweight"]
            m.quant, m.main = "int", w.name
            s = p.get("scales")
            if len(w.shape) == 2:
                gptq = s is not None and len(s.shape) == 2 and s.shape[1] == w.shape[1]
                m.k, m.n = (
                    (w.shape[0] * pack, w.shape[1]) if gptq else (w.shape[0], w.shape[1] * pack)
                )
        elif "weight" in p and len(p["weight"].shape) == 2:
            w = p["weight"]
            m.main = w.name
            m.n, m.k = w.shape
            if w.dtype in FP8_DTYPES:
                m.quant = "fp8"
            elif w.dtype == "U8" and "weight_scale" in p:  # modelopt NVFP4: two values a byte
                m.quant, m.k = "fp4", w.shape[1] * 2
            elif w.dtype == "I8" and "weight_scale" in p:
                m.quant = "int8"
            elif w.dtype not in FLOAT_DTYPES:
                m.n = m.k = None  # an integer table, not a projection
    return mods
