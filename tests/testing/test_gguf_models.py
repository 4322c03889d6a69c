"""Random-weight GGUF models: shapes, keys and the tokenizer copy, read back with `gguf`."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest

from autotune.errors import UnknownNameError
from autotune.testing.gguf_models import (
    SPECS,
    ensure_model,
    parameter_count,
    spec_named,
    with_changes,
    write_gguf,
    write_synthetic_vocab,
)


@pytest.fixture(scope="module")
def vocab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_vocab(tmp_path_factory.mktemp("vocab") / "v.gguf", n_vocab=1000)


def _fields(reader: gguf.GGUFReader) -> dict[str, object]:
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}


def test_tiny_llama_shapes_and_keys(tmp_path: Path, vocab: Path) -> None:
    path = write_gguf(SPECS["tiny"], tmp_path / "tiny.gguf", vocab=vocab, seed=1)
    reader = gguf.GGUFReader(path)
    kv = _fields(reader)
    assert kv["general.architecture"] == "llama"
    assert kv["llama.block_count"] == 2 and kv["llama.embedding_length"] == 64
    assert kv["llama.attention.head_count_kv"] == 2 and kv["llama.vocab_size"] == 1000
    assert len(kv["tokenizer.ggml.tokens"]) == 1000  # type: ignore[arg-type]
    assert kv["tokenizer.ggml.eos_token_id"] == 2
    tensors = {t.name: t for t in reader.tensors}
    assert "output.weight" not in tensors  # tied to token_embd
    assert tensors["token_embd.weight"].shape.tolist() == [64, 1000]  # ggml order (ne0, ne1)
    assert tensors["blk.1.attn_k.weight"].shape.tolist() == [64, 64]  # 2 kv heads x 32
    assert tensors["blk.0.ffn_down.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    assert tensors["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    total = sum(int(t.n_elements) for t in reader.tensors)
    assert total == parameter_count(SPECS["tiny"], n_vocab=1000)
    w = tensors["blk.0.ffn_up.weight"].data.astype("float32")
    assert 0.01 < float(w.std()) < 0.03  # N(0, 0.02) weights, not zeros
    assert not (tmp_path / "tiny.gguf.partial").exists()


def test_hybrid_has_recurrent_and_attention_layers(tmp_path: Path, vocab: Path) -> None:
    spec = SPECS["tiny-hybrid"]
    assert spec.recurrent_layers() == [True, False, True, False]
    path = write_gguf(spec, tmp_path / "h.gguf", vocab=vocab)
    reader = gguf.GGUFReader(path)
    kv = _fields(reader)
    assert kv["general.architecture"] == "qwen35"
    assert kv["qwen35.full_attention_interval"] == 2
    assert kv["qwen35.ssm.inner_size"] == 128 and kv["qwen35.ssm.group_count"] == 2
    # partial rotary 0.25 of head 32 = 8 dims, split into MRoPE sections of 4 pairs
    assert list(kv["qwen35.rope.dimension_sections"]) == [2, 2, 0, 0]  # type: ignore[call-overload]
    names = {t.name for t in reader.tensors}
    assert "blk.0.ssm_conv1d.weight" in names and "blk.0.attn_q.weight" not in names
    assert "blk.1.attn_q.weight" in names and "blk.1.ssm_a" not in names
    q = next(t for t in reader.tensors if t.name == "blk.1.attn_q.weight")
    assert q.shape.tolist() == [64, 2 * 4 * 32]  # query + gate


def test_sizes_and_lookup() -> None:
    assert parameter_count(SPECS["tiny"]) < 3_000_000
    assert 0.95e9 < parameter_count(SPECS["1b"]) < 1.1e9
    assert with_changes("tiny", n_layer=3).n_layer == 3
    with pytest.raises(UnknownNameError, match="did you mean 'tiny'"):
        spec_named("tiny2")


def test_ensure_model_reuses_the_file(tmp_path: Path, vocab: Path) -> None:
    first = ensure_model("tiny", tmp_path, vocab=vocab)
    stamp = first.stat().st_mtime_ns
    assert ensure_model("tiny", tmp_path, vocab=vocab) == first
    assert first.stat().st_mtime_ns == stamp


def test_main_with_synthetic_vocab(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m autotune.testing.gguf_models tiny --synthetic-vocab` needs no download."""
    from autotune.testing.gguf_models import main

    main(["tiny", "--folder", str(tmp_path), "--synthetic-vocab"])
    path = Path(capsys.readouterr().out.strip())
    assert path == tmp_path / "autotune-tiny-s0.gguf" and path.is_file()
    reader = gguf.GGUFReader(path)
    assert _fields(reader)["general.architecture"] == "llama"
