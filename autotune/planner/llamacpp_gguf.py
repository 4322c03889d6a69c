"""The planner's view of a GGUF model for llama.cpp: its header and tensor table, read with the
`gguf` package (autotune.engines.llamacpp.gguf_file) and cached by mtime."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import ModelLoadError

if TYPE_CHECKING:
    from autotune.engines.llamacpp.gguf_file import TensorInfo


@dataclass(frozen=True)
class GGUFModel:
    """What the planner needs from a GGUF header (read with the `gguf` package)."""

    path: str
    name: str
    arch: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    n_vocab: int
    n_ctx_train: int
    recurrent: tuple[bool, ...]
    ssm_d_conv: int = 0
    ssm_d_inner: int = 0
    ssm_d_state: int = 0
    ssm_n_group: int = 0
    tensor_bytes: int = 0
    token_embd_bytes: int = 0
    output_bytes: int = 0  # 0 when the output shares token_embd (tied)
    layer_bytes: tuple[int, ...] = field(default_factory=tuple)

    @property
    def attention_layers(self) -> int:
        return sum(1 for r in self.recurrent if not r)

    @property
    def recurrent_layers(self) -> int:
        return sum(1 for r in self.recurrent if r)

    @property
    def hybrid(self) -> bool:
        return self.recurrent_layers > 0

    def rs_slot_bytes(self) -> tuple[int, int]:
        """(R = conv, S = state) bytes of one recurrent slot over all recurrent layers (f32)."""
        if not self.hybrid:
            return 0, 0
        conv = max(self.ssm_d_conv - 1, 0) * (
            self.ssm_d_inner + 2 * self.ssm_n_group * self.ssm_d_state
        )
        state = self.ssm_d_state * self.ssm_d_inner
        return 4 * conv * self.recurrent_layers, 4 * state * self.recurrent_layers


@functools.lru_cache(maxsize=32)
def _read_cached(path: str, mtime_ns: int, size: int) -> GGUFModel:
    from autotune.engines.llamacpp.gguf_file import read_header

    header = read_header(path)
    arch = str(header.get("general.architecture", ""))
    if not arch:
        raise ModelLoadError(f"{path}: no general.architecture key")

    def key(name: str, default: Any = None) -> Any:
        return header.get(f"{arch}.{name}", default)

    n_layer = int(key("block_count", 0))
    n_embd = int(key("embedding_length", 0))
    n_head = _first(key("attention.head_count", 0))
    if not (n_layer and n_embd and n_head):
        raise ModelLoadError(f"{path}: missing block_count / embedding_length / head_count")
    n_head_kv = _first(key("attention.head_count_kv", n_head))
    hd_k = int(key("attention.key_length", n_embd // n_head))
    hd_v = int(key("attention.value_length", hd_k))
    tokens = header.get("tokenizer.ggml.tokens")
    n_vocab = int(key("vocab_size", len(tokens) if tokens is not None else 0))
    recurrent = _recurrent_layers(arch, n_layer, key)
    total, embd, output, layers = _tensor_bytes(header.tensors, n_layer)
    return GGUFModel(
        path=path,
        name=str(header.get("general.name", Path(path).stem)),
        arch=arch,
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=_first(key("feed_forward_length", 4 * n_embd)),
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=hd_k,
        head_dim_v=hd_v,
        n_vocab=n_vocab,
        n_ctx_train=int(key("context_length", 4096)),
        recurrent=tuple(recurrent),
        ssm_d_conv=int(key("ssm.conv_kernel", 0)),
        ssm_d_inner=int(key("ssm.inner_size", 0)),
        ssm_d_state=int(key("ssm.state_size", 0)),
        ssm_n_group=int(key("ssm.group_count", 0)),
        tensor_bytes=total,
        token_embd_bytes=embd,
        output_bytes=output,
        layer_bytes=tuple(layers),
    )


def _tensor_bytes(tensors: Sequence[TensorInfo], n_layer: int) -> tuple[int, int, int, list[int]]:
    """(all tensors, token_embd, output, each block's) bytes of a GGUF tensor table."""
    embd = output = 0
    layers = [0] * n_layer
    total = 0
    for t in tensors:
        nbytes = int(t.n_bytes)
        total += nbytes
        if t.name == "token_embd.weight":
            embd = nbytes
        elif t.name == "output.weight":
            output = nbytes
        elif t.name.startswith("blk."):
            idx = int(t.name.split(".")[1])
            if idx < n_layer:
                layers[idx] += nbytes
    return total, embd, output, layers


def _first(value: Any) -> int:
    """A per-layer array key (some GGUFs store head counts per layer): its maximum."""
    if isinstance(value, list | tuple):
        return int(max(value)) if value else 0
    return int(value)


def _recurrent_layers(arch: str, n_layer: int, key: Any) -> list[bool]:
    explicit = key("attention.recurrent_layers")
    if isinstance(explicit, list | tuple) and explicit:
        return [bool(x) for x in explicit[:n_layer]]
    if arch in ("qwen35", "qwen35moe", "qwen3next"):
        interval = int(key("full_attention_interval", 4))
        return [(i + 1) % interval != 0 for i in range(n_layer)]
    return [False] * n_layer


def read_gguf(path: str | Path) -> GGUFModel:
    """The planner's view of a GGUF model (header and tensor table only; cached by mtime)."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise ModelLoadError(f"{p}: cannot read the model file ({exc})") from None
    return _read_cached(str(p.resolve()), st.st_mtime_ns, st.st_size)
