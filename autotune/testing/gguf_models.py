"""GGUF models with random weights and a real tokenizer, for running llama-server without
downloading a model (tests on CPU, sweeps on a GPU).

The tokenizer is copied from a vocab-only GGUF that llama.cpp ships for its tokenizer tests
(`models/ggml-vocab-llama-spm.gguf`: the 32,000-token Llama SentencePiece vocab, 0.7 MB).
scripts/build-llama-server copies those files into the build cache (`<cache>/<version>/share/`);
`vocab_gguf()` finds them there, or extracts the one file from the pinned llama-cpp-python sdist
(pip download, ~75 MB) into the cache.

Architectures: `llama` (dense) and `qwen35` (Qwen3.5: Gated DeltaNet linear-attention layers
interleaved with gated full attention; llama.cpp keeps one recurrent-state slot per sequence, so
a hybrid model exercises the recurrent "RS" cache next to the KV cache). Weights are written
tensor by tensor (one tensor in memory at a time), so the ~1B model needs ~0.5 GB of RAM.
Random weights produce random text; throughput and memory behave like a real model's of the
same shape, quality does not matter to the tuner.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from autotune.errors import ConfigError

if TYPE_CHECKING:
    import gguf

VOCAB_FILE = "ggml-vocab-llama-spm.gguf"
MODELS_ENV = "AUTOTUNE_GGUF_MODELS"  # where ensure_model() writes (default: the build cache)

Arch = Literal["llama", "qwen35"]
WeightType = Literal["f16", "f32"]


@dataclass(frozen=True)
class GGUFSpec:
    """The shape of a random model. Hybrid (qwen35) fields are ignored for llama."""

    name: str
    arch: Arch = "llama"
    n_layer: int = 2
    n_embd: int = 64
    n_ff: int = 128
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 32  # quantized KV caches (q8_0, q4_0) need a multiple of 32
    n_ctx_train: int = 4096
    rope_theta: float = 10000.0
    weight_type: WeightType = "f16"
    tie_embeddings: bool = True
    # qwen35 (Gated DeltaNet) layers: every `full_attention_interval`-th layer is full attention
    full_attention_interval: int = 2
    ssm_conv_kernel: int = 4
    linear_k_heads: int = 2  # ssm.group_count
    linear_v_heads: int = 4  # ssm.time_step_rank
    linear_head_dim: int = 32  # ssm.state_size (key and value head dim)

    def recurrent_layers(self) -> list[bool]:
        if self.arch != "qwen35":
            return [False] * self.n_layer
        k = self.full_attention_interval
        return [(i + 1) % k != 0 for i in range(self.n_layer)]

    def attention_layers(self) -> int:
        return self.recurrent_layers().count(False)


SPECS: dict[str, GGUFSpec] = {
    spec.name: spec
    for spec in (
        # CI: ~2.2M parameters (the 32K-token embedding dominates), ~4.4 MB in f16
        GGUFSpec(name="tiny"),
        # ~40M parameters: a CPU sweep that takes measurable compute per token
        GGUFSpec(
            name="small", n_layer=8, n_embd=512, n_ff=1408, n_head=8, n_head_kv=4, head_dim=64
        ),
        # ~1.0B parameters, Llama-3.2-1B-like shape (GQA 32/8, head 64): the GPU sweep model
        GGUFSpec(
            name="1b",
            n_layer=16,
            n_embd=2048,
            n_ff=8192,
            n_head=32,
            n_head_kv=8,
            head_dim=64,
            n_ctx_train=131072,
            rope_theta=500000.0,
        ),
        # Qwen3.5 hybrid: 2 Gated DeltaNet + 2 gated-attention layers, ~2.4M parameters
        GGUFSpec(name="tiny-hybrid", arch="qwen35", n_layer=4),
    )
}


def spec_named(name: str) -> GGUFSpec:
    from autotune.errors import UnknownNameError

    try:
        return SPECS[name]
    except KeyError:
        raise UnknownNameError("test GGUF model", name, SPECS) from None


# ---------------------------------------------------------------------------------------------
# Tensors


@dataclass(frozen=True)
class _Tensor:
    name: str
    shape: tuple[int, ...]  # numpy order: (rows, cols) = ggml (ne1, ne0)
    kind: Literal["weight", "norm", "ones", "zeros", "neg"]
    f32: bool = False


def _layer_tensors(spec: GGUFSpec, i: int, recurrent: bool) -> Iterator[_Tensor]:
    e, hd = spec.n_embd, spec.head_dim
    b = f"blk.{i}."
    yield _Tensor(b + "attn_norm.weight", (e,), "norm", True)
    if spec.arch == "llama":
        yield _Tensor(b + "attn_q.weight", (spec.n_head * hd, e), "weight")
        yield _Tensor(b + "attn_k.weight", (spec.n_head_kv * hd, e), "weight")
        yield _Tensor(b + "attn_v.weight", (spec.n_head_kv * hd, e), "weight")
        yield _Tensor(b + "attn_output.weight", (e, spec.n_head * hd), "weight")
        yield _Tensor(b + "ffn_norm.weight", (e,), "norm", True)
    else:
        yield _Tensor(b + "post_attention_norm.weight", (e,), "norm", True)
        if not recurrent:
            # gated attention: q projects to query and gate (2 x heads x head_dim)
            yield _Tensor(b + "attn_q.weight", (2 * spec.n_head * hd, e), "weight")
            yield _Tensor(b + "attn_k.weight", (spec.n_head_kv * hd, e), "weight")
            yield _Tensor(b + "attn_v.weight", (spec.n_head_kv * hd, e), "weight")
            yield _Tensor(b + "attn_output.weight", (e, spec.n_head * hd), "weight")
            yield _Tensor(b + "attn_q_norm.weight", (hd,), "norm", True)
            yield _Tensor(b + "attn_k_norm.weight", (hd,), "norm", True)
        else:
            d = spec.linear_head_dim
            key_dim, value_dim = d * spec.linear_k_heads, d * spec.linear_v_heads
            conv_dim = 2 * key_dim + value_dim
            yield _Tensor(b + "attn_qkv.weight", (conv_dim, e), "weight")
            yield _Tensor(b + "attn_gate.weight", (value_dim, e), "weight")
            yield _Tensor(
                b + "ssm_conv1d.weight", (conv_dim, spec.ssm_conv_kernel), "weight", True
            )
            yield _Tensor(b + "ssm_dt.bias", (spec.linear_v_heads,), "zeros", True)
            yield _Tensor(b + "ssm_a", (spec.linear_v_heads,), "neg", True)
            yield _Tensor(b + "ssm_beta.weight", (spec.linear_v_heads, e), "weight")
            yield _Tensor(b + "ssm_alpha.weight", (spec.linear_v_heads, e), "weight")
            yield _Tensor(b + "ssm_norm.weight", (d,), "norm", True)
            yield _Tensor(b + "ssm_out.weight", (e, value_dim), "weight")
    yield _Tensor(b + "ffn_gate.weight", (spec.n_ff, e), "weight")
    yield _Tensor(b + "ffn_up.weight", (spec.n_ff, e), "weight")
    yield _Tensor(b + "ffn_down.weight", (e, spec.n_ff), "weight")


def _tensors(spec: GGUFSpec, n_vocab: int) -> list[_Tensor]:
    out = [_Tensor("token_embd.weight", (n_vocab, spec.n_embd), "weight")]
    for i, recurrent in enumerate(spec.recurrent_layers()):
        out += list(_layer_tensors(spec, i, recurrent))
    out.append(_Tensor("output_norm.weight", (spec.n_embd,), "norm", True))
    if not spec.tie_embeddings:
        out.append(_Tensor("output.weight", (n_vocab, spec.n_embd), "weight"))
    return out


def parameter_count(spec: GGUFSpec, n_vocab: int = 32000) -> int:
    return sum(int(np.prod(t.shape)) for t in _tensors(spec, n_vocab))


def _data(t: _Tensor, dtype: np.dtype[Any], rng: np.random.Generator) -> np.ndarray[Any, Any]:
    if t.kind == "norm" or t.kind == "ones":
        return np.ones(t.shape, dtype=dtype)
    if t.kind == "zeros":
        return np.zeros(t.shape, dtype=dtype)
    if t.kind == "neg":  # ssm_a = -exp(A_log): negative decay rates
        return (-rng.uniform(0.5, 1.5, size=t.shape)).astype(dtype)
    # N(0, 0.02) like an initialised transformer, generated in blocks to bound memory
    return (rng.standard_normal(size=t.shape, dtype=np.float32) * 0.02).astype(dtype)


# ---------------------------------------------------------------------------------------------
# Vocab


def _copy_tokenizer(writer: gguf.GGUFWriter, vocab: Path) -> int:
    """Copy every tokenizer.* key of a vocab-only GGUF into `writer`; returns the vocab size."""
    import gguf

    from autotune.engines.llamacpp.gguf_file import read_header

    header = read_header(vocab)
    for key, f in header.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = gguf.GGUFValueType(f.vtype)
        if f.item_type is not None:
            writer.add_key_value(key, f.value, vtype, sub_type=gguf.GGUFValueType(f.item_type))
        else:
            writer.add_key_value(key, f.value, vtype)
    tokens = header.get("tokenizer.ggml.tokens")
    if not tokens:
        raise ConfigError("no tokenizer.ggml.tokens in the vocab GGUF", source=str(vocab))
    return len(tokens)


def vocab_gguf(*, fetch: bool = True) -> Path:
    """The vocab-only GGUF with the Llama SPM tokenizer: from a build cache's share/ folder, else
    (fetch=True) extracted from the pinned llama-cpp-python sdist into the cache.

    Raises:
        ConfigError: not cached and fetch is False, or pip could not fetch the sdist.
    """
    from autotune.engines.llamacpp.binary import PINNED_VERSION, cache_root

    root = cache_root()
    for candidate in sorted(root.glob(f"*/share/{VOCAB_FILE}")):
        return candidate
    target = root / "vocab" / VOCAB_FILE
    if target.is_file():
        return target
    if not fetch:
        raise ConfigError(
            f"{VOCAB_FILE} not found under {root} (run scripts/build-llama-server, or allow "
            "fetching it from the llama-cpp-python sdist)"
        )
    with tempfile.TemporaryDirectory(prefix="autotune-vocab-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--no-binary",
            ":all:",
            "-d",
            tmp,
            f"llama-cpp-python=={PINNED_VERSION}",
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
        archives = sorted(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        if done.returncode != 0 or not archives:
            raise ConfigError(f"pip could not download the llama-cpp-python sdist: {done.stderr}")
        with tarfile.open(archives[0]) as tf:
            member = next(
                (
                    m
                    for m in tf.getmembers()
                    if m.name.endswith(f"vendor/llama.cpp/models/{VOCAB_FILE}")
                ),
                None,
            )
            data = tf.extractfile(member) if member is not None else None
            if data is None:
                raise ConfigError(f"the sdist has no models/{VOCAB_FILE}", source=str(archives[0]))
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(".partial")
            partial.write_bytes(data.read())
            partial.replace(target)
    return target


# ---------------------------------------------------------------------------------------------
# Writing


def write_gguf(
    spec: GGUFSpec, path: str | Path, *, vocab: str | Path, seed: int = 0, data: bool = True
) -> Path:
    """Write `spec` with random weights and `vocab`'s tokenizer to `path` (atomically).

    data=False writes the header and tensor table only: enough for autotune's planner (which
    reads headers), not for llama.cpp; it lets tests plan the 1B shape without writing 2 GB."""
    import gguf

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    writer = gguf.GGUFWriter(partial, spec.arch)
    n_vocab = _copy_tokenizer(writer, Path(vocab))
    _add_metadata(writer, spec, n_vocab)
    _write_tensors(writer, spec, _tensors(spec, n_vocab), seed=seed, data=data)
    writer.close()
    partial.replace(path)
    return path


def _add_metadata(writer: gguf.GGUFWriter, spec: GGUFSpec, n_vocab: int) -> None:
    """The model's shape keys (and qwen35's rotary sections and SSM keys) after the tokenizer."""
    import gguf

    writer.add_name(f"autotune random {spec.name}")
    writer.add_context_length(spec.n_ctx_train)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_key_length(spec.head_dim)
    writer.add_value_length(spec.head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(spec.rope_theta)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(
        gguf.LlamaFileType.MOSTLY_F16 if spec.weight_type == "f16" else gguf.LlamaFileType.ALL_F32
    )
    if spec.arch == "llama":
        writer.add_rope_dimension_count(spec.head_dim)
    else:
        _add_hybrid_metadata(writer, spec)


def _add_hybrid_metadata(writer: gguf.GGUFWriter, spec: GGUFSpec) -> None:
    """qwen35: partial rotary dimensions and the Gated DeltaNet (SSM) keys."""
    rot = max(2, spec.head_dim // 4)  # partial rotary factor 0.25, as Qwen3.5
    writer.add_rope_dimension_count(rot)
    half = rot // 2
    writer.add_rope_dimension_sections([half - half // 2, half // 2, 0, 0])
    writer.add_ssm_conv_kernel(spec.ssm_conv_kernel)
    writer.add_ssm_state_size(spec.linear_head_dim)
    writer.add_ssm_group_count(spec.linear_k_heads)
    writer.add_ssm_time_step_rank(spec.linear_v_heads)
    writer.add_ssm_inner_size(spec.linear_head_dim * spec.linear_v_heads)
    writer.add_full_attention_interval(spec.full_attention_interval)


def _write_tensors(
    writer: gguf.GGUFWriter, spec: GGUFSpec, tensors: list[_Tensor], *, seed: int, data: bool
) -> None:
    """The header, the key-value data and the tensor table; then (data=True) each tensor's
    random values, one tensor in memory at a time."""
    weight_dtype = np.dtype(np.float16 if spec.weight_type == "f16" else np.float32)
    for t in tensors:
        dtype = np.dtype(np.float32) if t.f32 else weight_dtype
        nbytes = int(np.prod(t.shape)) * dtype.itemsize
        writer.add_tensor_info(t.name, t.shape, dtype, nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for t in tensors if data else ():
        dtype = np.dtype(np.float32) if t.f32 else weight_dtype
        writer.write_tensor_data(_data(t, dtype, rng))


def models_dir() -> Path:
    env = os.environ.get(MODELS_ENV)
    if env:
        return Path(env)
    from autotune.engines.llamacpp.binary import cache_root

    return cache_root() / "models"


def ensure_model(
    name: str, folder: str | Path | None = None, *, vocab: str | Path | None = None, seed: int = 0
) -> Path:
    """The GGUF file of the named spec (SPECS), written on first use and reused after."""
    spec = spec_named(name)
    path = Path(folder or models_dir()) / f"autotune-{spec.name}-s{seed}.gguf"
    if path.is_file():
        return path
    return write_gguf(spec, path, vocab=vocab or vocab_gguf(), seed=seed)


def with_changes(name: str, **changes: Any) -> GGUFSpec:
    """A named spec with some fields changed (e.g. a longer n_ctx_train for a test)."""
    return replace(spec_named(name), **changes)


def write_synthetic_vocab(path: str | Path, n_vocab: int = 32000) -> Path:
    """A vocab-only GGUF with `n_vocab` made-up tokens, for tests that only read GGUF headers
    (the planner, this writer). Not a usable tokenizer: runs of llama-server use vocab_gguf()."""
    import gguf

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list([f"<t{i}>" for i in range(n_vocab)])
    writer.add_token_scores([0.0] * n_vocab)
    writer.add_token_types([1] * n_vocab)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return path


def main(argv: list[str] | None = None) -> None:
    """`python -m autotune.testing.gguf_models NAME...`: write (or find) the named models and
    print their paths (default folder: $AUTOTUNE_GGUF_MODELS or <llama-server cache>/models)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m autotune.testing.gguf_models")
    ap.add_argument("names", nargs="+", choices=sorted(SPECS), help="model sizes")
    ap.add_argument("--folder", type=Path, default=None, help="where to write them")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--synthetic-vocab",
        action="store_true",
        help="use made-up tokens instead of the Llama tokenizer (no download, no llama.cpp "
        "build cache): enough for `autotune plan`, not for running llama-server",
    )
    args = ap.parse_args(argv)
    vocab: Path | None = None
    if args.synthetic_vocab:
        folder = Path(args.folder or models_dir())
        vocab = write_synthetic_vocab(folder / "synthetic-vocab.gguf")
    for name in args.names:
        print(ensure_model(name, args.folder, vocab=vocab, seed=args.seed))


if __name__ == "__main__":
    main()
