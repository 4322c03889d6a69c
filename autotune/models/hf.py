"""Model cards from a local Hugging Face model folder: `config.json` + safetensors headers.

Tensors are never loaded: each shard is opened with the safetensors library, which reads only the
header (names, dtypes, shapes). Weight bytes are shape x dtype size per tensor, summed per
component (embed_tokens, lm_head, decoder layers, MTP, vision), so packed int32 weights count 4
bytes per element and scales count at their own dtype.

Qwen3.5 multimodal configs nest the text model under `text_config` (with `vision_config` beside
it); Qwen3-Next / Qwen3.5 hybrid layer types follow SGLang's rule, layer l is full attention iff
(l+1) % full_attention_interval == 0 (reference/sglang-internals.md §6). Vision tower and MTP
presence come from the tensors, not the config: community packs drop both (FIELD-NOTES F2, P6).
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from autotune.errors import ModelLoadError
from autotune.models.card import (
    LinearAttention,
    ModelCard,
    Quantization,
    VisionTower,
    WeightBytes,
)

Component = Literal["embed_tokens", "lm_head", "decoder", "mtp", "vision"]
COMPONENTS: tuple[Component, ...] = ("embed_tokens", "lm_head", "decoder", "mtp", "vision")

# Bits per element of each safetensors dtype (F4 and F6 are sub-byte; rows round up to bytes).
SAFETENSORS_DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}
FLOAT_DTYPES = frozenset({"F16", "BF16", "F32", "F64"})
FP8_DTYPES = frozenset({"F8_E4M3", "F8_E5M2"})

_VISION_PARTS = frozenset(
    {
        "visual",
        "vision_tower",
        "vision_model",
        "vision_encoder",
        "multi_modal_projector",
        "mm_projector",
    }
)
_EMBED_PARTS = frozenset({"embed_tokens", "wte", "word_embeddings", "tok_embeddings"})
_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_VISION_BLOCK_RE = re.compile(r"(?:^|\.)(?:blocks|layers)\.(\d+)\.")
# Header sizes the safetensors library accepts (it refuses larger ones as a DoS guard).
_MAX_HEADER = 100_000_000


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as its safetensors header describes it."""

    name: str
    dtype: str  # safetensors spelling: BF16, F16, I32, F8_E4M3, ...
    shape: tuple[int, ...]
    file: str  # shard file name inside the model folder

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return (self.numel * SAFETENSORS_DTYPE_BITS[self.dtype] + 7) // 8

    @property
    def component(self) -> Component:
        return component_of(self.name)

    @property
    def layer(self) -> int | None:
        """Decoder layer index for text decoder (and MTP) tensors; None for everything else."""
        if self.component not in ("decoder", "mtp"):
            return None
        m = _LAYER_RE.search(self.name)
        return int(m.group(1)) if m else None


def component_of(name: str) -> Component:
    parts = name.split(".")
    if any(p.startswith("mtp") for p in parts):
        return "mtp"
    if any(p in _VISION_PARTS or p.startswith("vision") for p in parts):
        return "vision"
    if any(p in _EMBED_PARTS for p in parts):
        return "embed_tokens"
    if "lm_head" in parts:
        return "lm_head"
    return "decoder"


@dataclass(frozen=True)
class Checkpoint:
    """A model folder's config and tensor headers, read without loading any tensor."""

    path: Path
    config: dict[str, Any]
    tensors: dict[str, TensorInfo]
    files: tuple[str, ...]
    index_weight_map: dict[str, str] | None = None  # from model.safetensors.index.json
    hf_quant_config: dict[str, Any] | None = None  # modelopt's hf_quant_config.json
    text_section: dict[str, Any] | None = field(default=None, repr=False)  # `text_config`

    @property
    def text_config(self) -> dict[str, Any]:
        """The language model's config (`text_config` in multimodal configs, else the top)."""
        return self.text_section if self.text_section is not None else self.config

    @property
    def text_config_prefix(self) -> str:
        return "" if self.text_section is None else "text_config."

    def bytes_by_component(self) -> dict[str, int]:
        out: dict[str, int] = dict.fromkeys(COMPONENTS, 0)
        for t in self.tensors.values():
            out[t.component] += t.nbytes
        return out

    def bytes_by_dtype(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for t in self.tensors.values():
            out[t.dtype] += t.nbytes
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def quantization_config(self) -> dict[str, Any] | None:
        """`quantization_config` from config.json (top level or text_config), or modelopt's
        hf_quant_config.json `quantization` block."""
        for cfg in (self.config, self.text_config):
            q = cfg.get("quantization_config")
            if isinstance(q, dict):
                return q
        if self.hf_quant_config is not None:
            q = self.hf_quant_config.get("quantization", self.hf_quant_config)
            if isinstance(q, dict):
                return {"quant_method": "modelopt", **q}
        return None


# ---------------------------------------------------------------------------------------------
# Reading


def read_checkpoint(path: Path) -> Checkpoint:
    """Read config.json and every *.safetensors header of a model folder."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ModelLoadError(f"{path}: no such model folder")
    if not path.is_dir():
        raise ModelLoadError(f"{path}: not a folder (expected a Hugging Face model folder)")
    config = _read_json(path / "config.json", what="model config")
    text = config.get("text_config")
    if text is not None and not isinstance(text, dict):
        raise ModelLoadError(
            f"{path / 'config.json'}: field 'text_config' must be an object, got "
            f"{type(text).__name__}"
        )
    files, tensors = _read_tensors(path)
    index = _read_index(path, files)
    hf_quant = None
    if (path / "hf_quant_config.json").is_file():
        hf_quant = _read_json(path / "hf_quant_config.json", what="modelopt quant config")
    return Checkpoint(
        path=path,
        config=config,
        tensors=tensors,
        files=files,
        index_weight_map=index,
        hf_quant_config=hf_quant,
        text_section=text,
    )


def _read_json(file: Path, *, what: str) -> dict[str, Any]:
    if not file.is_file():
        raise ModelLoadError(
            f"{file}: missing ({what}); a Hugging Face model folder holds config.json next to "
            f"its *.safetensors files"
        )
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ModelLoadError(
            f"{file}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{file}: cannot read: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelLoadError(f"{file}: expected a JSON object, got {type(data).__name__}")
    return data


def _read_tensors(folder: Path) -> tuple[tuple[str, ...], dict[str, TensorInfo]]:
    from safetensors import SafetensorError, safe_open

    shards = sorted(p for p in folder.glob("*.safetensors") if p.is_file())
    if not shards:
        raise ModelLoadError(
            f"{folder}: no *.safetensors files (only safetensors checkpoints can be read; "
            f"convert .bin/.pt/.gguf weights first)"
        )
    tensors: dict[str, TensorInfo] = {}
    for shard in shards:
        try:
            with safe_open(str(shard), framework="numpy") as f:
                for name in f.keys():
                    sl = f.get_slice(name)
                    info = TensorInfo(
                        name=name,
                        dtype=str(sl.get_dtype()),
                        shape=tuple(int(d) for d in sl.get_shape()),
                        file=shard.name,
                    )
                    if info.dtype not in SAFETENSORS_DTYPE_BITS:
                        raise ModelLoadError(
                            f"{shard}: tensor {name!r} has dtype {info.dtype!r}, unknown to "
                            f"autotune (known: {', '.join(SAFETENSORS_DTYPE_BITS)})"
                        )
                    if name in tensors:
                        raise ModelLoadError(
                            f"{shard}: tensor {name!r} is also in {tensors[name].file}; a "
                            f"checkpoint must store each tensor once"
                        )
                    tensors[name] = info
        except SafetensorError as exc:
            raise ModelLoadError(f"{shard}: {_diagnose_header(shard, str(exc))}") from exc
        except OSError as exc:
            raise ModelLoadError(f"{shard}: cannot read: {exc}") from exc
    return tuple(p.name for p in shards), tensors


def _diagnose_header(shard: Path, library_message: str) -> str:
    """Say precisely what is wrong with a safetensors file the library refused: check the 8-byte
    little-endian header length against the file size, then the JSON header's data offsets."""
    size = shard.stat().st_size
    with shard.open("rb") as fh:
        prefix = fh.read(8)
        if len(prefix) < 8:
            return f"file is {size} bytes, too short for the 8-byte header length prefix"
        (n,) = struct.unpack("<Q", prefix)
        if n > _MAX_HEADER:
            return (
                f"header length prefix says {n} bytes (limit {_MAX_HEADER}): not a safetensors "
                f"file, or its first bytes are damaged"
            )
        if n > size - 8:
            return (
                f"header is truncated (declares {n} bytes, file has {size - 8} bytes after the "
                f"8-byte length prefix)"
            )
        raw = fh.read(n)
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return f"header is not valid JSON ({exc}); the file is corrupt"
    if isinstance(header, dict):
        ends = [
            int(v["data_offsets"][1])
            for k, v in header.items()
            if k != "__metadata__" and isinstance(v, dict) and "data_offsets" in v
        ]
        need = 8 + n + max(ends, default=0)
        if need > size:
            return (
                f"data is truncated (the header places tensors up to byte {need}, file has "
                f"{size} bytes); the download or copy is incomplete"
            )
    return f"invalid safetensors file ({library_message})"


def _read_index(folder: Path, files: tuple[str, ...]) -> dict[str, str] | None:
    """model.safetensors.index.json: every shard it names must be present."""
    index_file = folder / "model.safetensors.index.json"
    if not index_file.is_file():
        return None
    data = _read_json(index_file, what="shard index")
    wm = data.get("weight_map")
    if not isinstance(wm, dict):
        raise ModelLoadError(f"{index_file}: field 'weight_map' is missing or not an object")
    missing = sorted(set(map(str, wm.values())) - set(files))
    if missing:
        raise ModelLoadError(
            f"{index_file}: names shard(s) not in the folder: {', '.join(missing[:5])}"
            f"{' ...' if len(missing) > 5 else ''}; the download is incomplete"
        )
    return {str(k): str(v) for k, v in wm.items()}


# ---------------------------------------------------------------------------------------------
# Config fields


class _Fields:
    """Typed access to a config dict with error messages that name the file and field."""

    def __init__(self, data: Mapping[str, Any], source: Path, prefix: str = ""):
        self.data = data
        self.source = source
        self.prefix = prefix

    def _err(self, key: str, msg: str) -> ModelLoadError:
        return ModelLoadError(f"{self.source}: field '{self.prefix}{key}' {msg}")

    def get_int(self, key: str, default: int | None = None, *, minimum: int = 1) -> int:
        v = self.data.get(key)
        if v is None:
            if default is None:
                raise self._err(key, f"is missing; expected an integer >= {minimum}")
            return default
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise self._err(key, f"must be an integer >= {minimum}, got {v!r}")
        return v

    def opt_int(self, key: str, *, minimum: int = 1) -> int | None:
        return None if self.data.get(key) is None else self.get_int(key, minimum=minimum)

    def get_bool(self, key: str, default: bool) -> bool:
        v = self.data.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self._err(key, f"must be true or false, got {v!r}")
        return v

    def get_str(self, key: str, default: str | None = None) -> str | None:
        v = self.data.get(key)
        if v is None:
            return default
        if not isinstance(v, str):
            raise self._err(key, f"must be a string, got {v!r}")
        return v


def full_attention_layers(
    text: Mapping[str, Any], source: Path, prefix: str = ""
) -> tuple[int, ...]:
    """Full-attention layer ids, as SGLang derives them (sglang-internals §6): from
    `full_attention_interval` when present, else from `layer_types`, else every layer."""
    f = _Fields(text, source, prefix)
    n = f.get_int("num_hidden_layers")
    interval = f.opt_int("full_attention_interval")
    if interval is not None:
        return tuple(i for i in range(n) if (i + 1) % interval == 0)
    types = text.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != n:
            raise f._err("layer_types", f"must be a list of {n} layer types, got {types!r}")
        # Sliding-window attention is still attention; only linear_attention is GDN state.
        return tuple(i for i, t in enumerate(types) if t != "linear_attention")
    if text.get("linear_num_value_heads") is not None:
        raise f._err(
            "full_attention_interval",
            "is missing, and so is layer_types: a hybrid (linear-attention) config needs one "
            "of them to say which layers are full attention",
        )
    return tuple(range(n))


def _linear_attention(
    text: Mapping[str, Any], source: Path, prefix: str, conv_dtype: str
) -> LinearAttention:
    f = _Fields(text, source, prefix)
    return LinearAttention(
        num_key_heads=f.get_int("linear_num_key_heads"),
        num_value_heads=f.get_int("linear_num_value_heads"),
        key_head_dim=f.get_int("linear_key_head_dim"),
        value_head_dim=f.get_int("linear_value_head_dim"),
        conv_kernel=f.get_int("linear_conv_kernel_dim"),
        ssm_dtype=f.get_str("mamba_ssm_dtype") or "float32",
        conv_dtype=conv_dtype,
    )


def _dtype(cfg: Mapping[str, Any], text: Mapping[str, Any]) -> str:
    for c in (text, cfg):
        for key in ("torch_dtype", "dtype"):
            v = c.get(key)
            if isinstance(v, str):
                return v.removeprefix("torch.")
    return "bfloat16"


# ---------------------------------------------------------------------------------------------
# Quantization

_SUPPORTED_QUANT = "awq, gptq, auto-round, fp8 (block-wise), compressed-tensors, modelopt (NVFP4)"


def quantization_from_config(q: Mapping[str, Any] | None, source: Path) -> Quantization:
    """Map a `quantization_config` onto the card's Quantization (scheme, bits, group, blocks)."""
    if q is None:
        return Quantization()
    f = _Fields(q, source, "quantization_config.")
    method = (f.get_str("quant_method") or "").lower().replace("_", "-")
    if method == "awq":
        bits = f.get_int("bits", f.get_int("w_bit", 4))
        group = _group(q.get("group_size", q.get("q_group_size")))
        return Quantization(
            scheme="awq",
            bits=bits,
            group_size=group,
            zero_point=f.get_bool("zero_point", True),
            checkpoint_format="awq",
        )
    if method in ("gptq", "auto-round"):
        packing = str(q.get("packing_format") or "")
        scheme: Literal["awq", "gptq"] = "awq" if "awq" in packing else "gptq"
        return Quantization(
            scheme=scheme,
            bits=f.get_int("bits", 4),
            group_size=_group(q.get("group_size")),
            zero_point=not f.get_bool("sym", True),
            checkpoint_format=method,
        )
    if method == "fp8":
        block = q.get("weight_block_size")
        if not block:  # per-tensor / per-channel scales
            return Quantization(
                scheme="fp8", bits=8, checkpoint_format="fp8", sglang_quantization="fp8"
            )
        return Quantization(
            scheme="fp8_block",
            bits=8,
            block_shape=_block(block, f),
            checkpoint_format="fp8",
            sglang_quantization="fp8",
        )
    if method == "compressed-tensors":
        return _compressed_tensors(q, f)
    if method == "modelopt":
        algo = str(q.get("quant_algo") or "").upper()
        if algo == "NVFP4":
            return Quantization(
                scheme="nvfp4",
                bits=4,
                group_size=_group(q.get("group_size", 16)),
                checkpoint_format="modelopt",
                sglang_quantization="modelopt_fp4",
            )
        if algo == "FP8":
            return Quantization(
                scheme="fp8",
                bits=8,
                checkpoint_format="modelopt",
                sglang_quantization="modelopt_fp8",
            )
        raise f._err("quant_algo", f"is {algo or None!r}; modelled modelopt packs: NVFP4, FP8")
    raise f._err("quant_method", f"is {method or None!r}; supported: {_SUPPORTED_QUANT}")


def _group(v: Any) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool) and v > 0:
        return v
    return None  # -1 / None: one scale per output channel


def _block(v: Any, f: _Fields) -> tuple[int, int]:
    if (
        not isinstance(v, list | tuple)
        or len(v) != 2
        or not all(isinstance(x, int) and x > 0 for x in v)
    ):
        raise f._err("weight_block_size", f"must be two positive integers, got {v!r}")
    return int(v[0]), int(v[1])


def _compressed_tensors(q: Mapping[str, Any], f: _Fields) -> Quantization:
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise f._err("config_groups", "is missing or empty; compressed-tensors needs one group")
    weights = None
    for g in groups.values():
        if isinstance(g, dict) and isinstance(g.get("weights"), dict):
            weights = g["weights"]
            break
    if weights is None:
        raise f._err("config_groups", "has no group with a 'weights' scheme")
    w = _Fields(weights, f.source, "quantization_config.config_groups.*.weights.")
    bits = w.get_int("num_bits")
    kind = w.get_str("type", "int")
    strategy = w.get_str("strategy", "group")
    group = _group(weights.get("group_size"))
    if kind == "int" and bits == 4:
        return Quantization(
            scheme="awq",
            bits=4,
            group_size=group,
            zero_point=not w.get_bool("symmetric", True),
            checkpoint_format="compressed-tensors",
        )
    if kind == "float" and bits == 8 and strategy == "block":
        return Quantization(
            scheme="fp8_block",
            bits=8,
            block_shape=_block(weights.get("block_structure"), w),
            checkpoint_format="compressed-tensors",
        )
    if kind == "float" and bits == 4:
        return Quantization(
            scheme="nvfp4", bits=4, group_size=group or 16, checkpoint_format="compressed-tensors"
        )
    if kind == "float" and bits == 8:
        return Quantization(scheme="fp8", bits=8, checkpoint_format="compressed-tensors")
    if kind == "int" and bits == 8:
        return Quantization(
            scheme="int8", bits=8, group_size=group, checkpoint_format="compressed-tensors"
        )
    raise w._err(
        "type",
        f"{kind} {bits}-bit ({strategy}) is not modelled yet; modelled: int4 W4A16, int8, "
        "fp8 (block-wise or per-channel), nvfp4",
    )


# ---------------------------------------------------------------------------------------------
# The card


def mtp_layers_present(ckpt: Checkpoint) -> int:
    """MTP layers whose weights the checkpoint holds (0 when no tensor names MTP)."""
    mtp = [t for t in ckpt.tensors.values() if t.component == "mtp"]
    if not mtp:
        return 0
    ids = {t.layer for t in mtp if t.layer is not None}
    if ids:
        return len(ids)
    declared = ckpt.text_config.get("mtp_num_hidden_layers")
    return declared if isinstance(declared, int) and declared > 0 else 1


def _vision(ckpt: Checkpoint) -> VisionTower | None:
    vt = [t for t in ckpt.tensors.values() if t.component == "vision"]
    if not vt:
        return None
    vc = ckpt.config.get("vision_config")
    vc = vc if isinstance(vc, dict) else {}
    layers = vc.get("depth", vc.get("num_hidden_layers"))
    if not isinstance(layers, int):
        ids = {int(m.group(1)) for t in vt if (m := _VISION_BLOCK_RE.search(t.name))}
        layers = len(ids)
    hidden = vc.get("hidden_size", vc.get("embed_dim"))
    if not isinstance(hidden, int):
        # No vision_config: norm weights and biases are the tower's width, the commonest 1-D size.
        widths = Counter(t.shape[0] for t in vt if len(t.shape) == 1)
        hidden = widths.most_common(1)[0][0] if widths else 0
    return VisionTower(layers=layers, hidden_size=hidden)


_DEFAULT_MAX_POS: int = ModelCard.model_fields["max_position_embeddings"].default


def card_from_dir(path: Path) -> ModelCard:
    """Build a ModelCard from a local Hugging Face model folder (config.json + safetensors
    headers). Raises ModelLoadError naming the file and field when something is wrong."""
    ckpt = read_checkpoint(Path(path))
    cfg_file = ckpt.path / "config.json"
    text = ckpt.text_config
    prefix = ckpt.text_config_prefix
    f = _Fields(text, cfg_file, prefix)

    num_layers = f.get_int("num_hidden_layers")
    hidden = f.get_int("hidden_size")
    heads = f.get_int("num_attention_heads")
    head_dim = f.get_int("head_dim", hidden // heads)
    dtype = _dtype(ckpt.config, text)
    full = full_attention_layers(text, cfg_file, prefix)
    hybrid = len(full) < num_layers
    linear = _linear_attention(text, cfg_file, prefix, dtype) if hybrid else None
    archs = ckpt.config.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        architecture = archs[0]
    else:
        architecture = str(ckpt.config.get("model_type") or text.get("model_type") or "unknown")
    tie = _Fields(ckpt.config, cfg_file).get_bool(
        "tie_word_embeddings", f.get_bool("tie_word_embeddings", False)
    )

    by = ckpt.bytes_by_component()
    try:
        return ModelCard(
            name=ckpt.path.resolve().name,
            source=str(ckpt.path.resolve()),
            architecture=architecture,
            dtype=dtype,
            num_layers=num_layers,
            hidden_size=hidden,
            intermediate_size=f.get_int("intermediate_size"),
            vocab_size=f.get_int("vocab_size"),
            num_attention_heads=heads,
            num_kv_heads=f.get_int("num_key_value_heads", heads),
            head_dim=head_dim,
            # Qwen3-Next/3.5 gate attention output (SGLang's default for these configs is on).
            attn_output_gate=f.get_bool("attn_output_gate", hybrid),
            full_attention_layers=full,
            linear_attention=linear,
            max_position_embeddings=f.get_int(
                "max_position_embeddings",
                ModelCard.model_fields["max_position_embeddings"].default,
            ),
            tie_word_embeddings=tie,
            mtp_layers=mtp_layers_present(ckpt),
            vision=_vision(ckpt),
            quantization=quantization_from_config(ckpt.quantization_config(), cfg_file),
            # Tied embeddings share one tensor: lm_head then adds no bytes of its own.
            weights=WeightBytes(
                embed_tokens=by["embed_tokens"],
                lm_head=by["lm_head"],
                decoder=by["decoder"],
                mtp=by["mtp"],
                vision=by["vision"],
            ),
            notes=f"read from {ckpt.path} ({len(ckpt.tensors)} tensors in "
            f"{len(ckpt.files)} safetensors file(s))",
        )
    except ValidationError as exc:
        raise ModelLoadError(f"{cfg_file}: inconsistent config: {exc}") from exc
