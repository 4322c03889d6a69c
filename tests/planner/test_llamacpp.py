"""llama.cpp memory planner: GGUF header reading, llama.cpp's cell/stream rules, and the sizes
against what llama-server logged on CPU (tests/integration/test_llamacpp_server.py repeats the
comparison against a live server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import ConfigError, ModelLoadError
from autotune.hardware import get_gpu
from autotune.planner.llamacpp import (
    CACHE_TYPE_BYTES,
    LlamaPlan,
    kv_cell_bytes,
    plan_llamacpp,
    read_gguf,
    weights_split,
)
from autotune.planner.sglang import Plan
from autotune.testing.gguf_models import SPECS, with_changes, write_gguf, write_synthetic_vocab

H200 = get_gpu("h200-141g")

# What llama-server 0.3.36 logged on CPU (this machine, -lv 4, one launch each; MiB with two
# decimals): model, config, compute buffer, KV buffer, recurrent-state buffer, output buffer.
# The compute estimate is fitted to these rows; KV, RS and output are exact formulas.
CALIBRATION = [
    ("1b", {"parallel": 2, "ctx_size": 4096}, 66.01, 128.0, 0, 0.24),
    ("small", {"parallel": 1, "ctx_size": 4096}, 16.26, 32.0, 0, 0.12),
    ("small", {"parallel": 1, "ctx_size": 4096, "ubatch_size": 256}, 8.13, 32.0, 0, 0.12),
    ("small", {"parallel": 1, "ctx_size": 8192}, 20.26, 64.0, 0, 0.12),
    ("small", {"parallel": 1, "ctx_size": 4096, "flash_attn": "off"}, 78.01, 32.0, 0, 0.12),
    ("tiny-hybrid", {"parallel": 1, "ctx_size": 4096}, 5.9, 2.0, 0.04, 0.12),
    (
        "tiny-hybrid",
        {"parallel": 1, "ctx_size": 4096, "flash_attn": "off"},
        41.39,
        2.0,
        0.04,
        0.12,
    ),
    ("tiny-hybrid", {"parallel": 1, "ctx_size": 4096, "ubatch_size": 256}, 2.95, 2.0, 0.04, 0.12),
    ("tiny", {"parallel": 1, "ctx_size": 8192}, 9.14, 4.0, 0, 0.12),
    ("tiny", {"parallel": 1, "ctx_size": 4096, "flash_attn": "off"}, 41.13, 2.0, 0, 0.12),
    ("tiny", {"parallel": 1, "ctx_size": 4096}, 5.14, 2.0, 0, 0.12),
    ("tiny", {"parallel": 4, "ctx_size": 4096}, 2.14, 2.0, 0, 0.49),
    ("tiny", {"parallel": 8, "ctx_size": 4096, "kv_unified": True}, 5.14, 2.0, 0, 0.98),
    ("tiny", {"parallel": 2, "ctx_size": 4096, "ubatch_size": 128}, 0.78, 2.0, 0, 0.24),
    (
        "tiny",
        {"parallel": 2, "ctx_size": 4096, "ubatch_size": 1024, "batch_size": 1024},
        6.27,
        2.0,
        0,
        0.24,
    ),
    ("tiny", {"parallel": 2, "ctx_size": 4096, "flash_attn": "off"}, 21.13, 2.0, 0, 0.24),
    (
        "tiny",
        {"parallel": 2, "ctx_size": 2048, "flash_attn": "off", "ubatch_size": 256},
        5.57,
        1.0,
        0,
        0.24,
    ),
    (
        "tiny",
        {"parallel": 2, "ctx_size": 4096, "spec_type": "ngram-mod", "spec_ngram_mod_n_max": 16},
        4.29,
        2.0,
        0,
        0.24,
    ),
    (
        "tiny",
        {"parallel": 2, "ctx_size": 4096, "cache_type_k": "q8_0", "cache_type_v": "q8_0"},
        3.14,
        1.06,
        0,
        0.24,
    ),
    ("tiny-hybrid", {"parallel": 3, "ctx_size": 1536, "kv_unified": True}, 3.42, 0.75, 0.11, 0.37),
    (
        "tiny-hybrid",
        {"parallel": 4, "ctx_size": 4096, "ubatch_size": 1024, "batch_size": 1024},
        5.81,
        2.0,
        0.15,
        0.49,
    ),
    ("small", {"parallel": 2, "ctx_size": 4096}, 14.26, 32.0, 0, 0.24),
    ("small", {"parallel": 4, "ctx_size": 8192, "ubatch_size": 256}, 7.13, 64.0, 0, 0.49),
    ("small", {"parallel": 4, "ctx_size": 8192, "flash_attn": "off"}, 42.01, 64.0, 0, 0.49),
    (
        "small",
        {"parallel": 1, "ctx_size": 2048, "ubatch_size": 1024, "batch_size": 2048},
        28.52,
        16.0,
        0,
        0.12,
    ),
]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gguf")
    vocab = write_synthetic_vocab(root / "vocab.gguf", n_vocab=32000)  # the SPM vocab's size
    models = {
        name: write_gguf(SPECS[name], root / f"{name}.gguf", vocab=vocab)
        for name in ("tiny", "tiny-hybrid", "small")
    }
    # header only: the planner reads no tensor data, and the 1B file would be 2 GB
    models["1b"] = write_gguf(SPECS["1b"], root / "1b.gguf", vocab=vocab, data=False)
    return models


def test_header_reading(models: dict[str, Path]) -> None:
    m = read_gguf(models["tiny"])
    assert (m.arch, m.n_layer, m.n_embd, m.n_head, m.n_head_kv) == ("llama", 2, 64, 4, 2)
    assert (m.head_dim_k, m.n_vocab, m.n_ctx_train) == (32, 32000, 4096)
    assert m.token_embd_bytes == 32000 * 64 * 2 and m.output_bytes == 0  # tied, f16
    assert m.tensor_bytes == m.token_embd_bytes + sum(m.layer_bytes) + 64 * 4
    h = read_gguf(models["tiny-hybrid"])
    assert h.recurrent == (True, False, True, False) and h.attention_layers == 2
    # R: (d_conv-1) x (d_inner + 2 groups x d_state) f32, S: d_state x d_inner f32, per layer
    assert h.rs_slot_bytes() == (2 * 4 * 3 * (128 + 2 * 2 * 32), 2 * 4 * 32 * 128)


def test_unreadable_model(tmp_path: Path) -> None:
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a gguf")
    with pytest.raises(ModelLoadError, match="not a GGUF file"):
        read_gguf(bad)
    with pytest.raises(ModelLoadError, match="cannot read"):
        read_gguf(tmp_path / "missing.gguf")


def test_kv_bytes_per_type(models: dict[str, Path]) -> None:
    m = read_gguf(models["tiny"])
    # 2 layers x 2 kv heads x (32 + 32) x 2 bytes
    assert kv_cell_bytes(m, "f16", "f16") == 512
    assert kv_cell_bytes(m, "q8_0", "q8_0") == int(2 * 2 * 64 * CACHE_TYPE_BYTES["q8_0"])
    assert kv_cell_bytes(m, "q4_0", "f16") < kv_cell_bytes(m, "q8_0", "f16")


def test_cells_streams_and_padding(models: dict[str, Path]) -> None:
    path = models["tiny"]
    split = plan_llamacpp(path, {"parallel": 3, "ctx_size": 2000}, host_free_gib=16)
    # n_ctx pads to 2048; each of 3 streams gets pad(2048 / 3 = 682, 256) = 768 cells
    assert (split.context_len, split.kv_pool_tokens, split.kv_streams) == (768, 2304, 3)
    unified = plan_llamacpp(
        path, {"parallel": 3, "ctx_size": 2000, "kv_unified": True}, host_free_gib=16
    )
    assert (unified.context_len, unified.kv_pool_tokens, unified.kv_streams) == (2048, 2048, 1)
    auto = plan_llamacpp(path, {}, host_free_gib=16)
    # 0.3.30+: 4 slots, unified cache, context = the model's training context
    assert (auto.max_running_requests, auto.kv_pool_tokens, auto.context_len) == (4, 4096, 4096)
    assert any("unified" in a for a in auto.assumptions)
    old = plan_llamacpp(path, {}, version="0.3.16", host_free_gib=16)
    assert (old.max_running_requests, old.context_len) == (1, 4096)


def test_plan_is_an_sglang_shaped_plan(models: dict[str, Path]) -> None:
    plan = plan_llamacpp(models["tiny-hybrid"], {"parallel": 2}, host_free_gib=16)
    assert isinstance(plan, Plan) and isinstance(plan, LlamaPlan)
    assert plan.engine == "llamacpp" and plan.gpu == "cpu" and plan.mem_fraction_static == 1.0
    assert plan.mamba_slots == 2 and plan.mamba_strategy == "per_slot"
    assert plan.slack_gib > plan.slack_needed_gib and plan.fits


def test_pruning_reasons(models: dict[str, Path]) -> None:
    path = models["tiny"]
    huge = plan_llamacpp(path, {"parallel": 1, "ctx_size": 2**27}, host_free_gib=16)
    assert not huge.fits and "does not fit host RAM" in huge.reasons[0]
    assert huge.kv_pool_gib == pytest.approx(64.0)
    qv = plan_llamacpp(path, {"cache_type_v": "q8_0", "flash_attn": "off"}, host_free_gib=16)
    assert not qv.fits and "requires flash attention" in qv.reasons[0]
    assert plan_llamacpp(path, {"cache_type_v": "q8_0"}, host_free_gib=16).fits  # auto: on
    draft = plan_llamacpp(path, {"spec_type": "draft-simple"}, host_free_gib=16)
    assert "needs a draft model" in draft.reasons[0]
    with pytest.raises(ConfigError, match="unknown KV cache type 'fp8'"):
        plan_llamacpp(path, {"cache_type_k": "fp8"}, host_free_gib=16)


def test_speculation_raises_the_logits_rows(models: dict[str, Path]) -> None:
    path = models["tiny"]
    base = plan_llamacpp(path, {"parallel": 2}, host_free_gib=16)
    config = {"parallel": 2, "spec_type": "ngram-mod", "spec_ngram_mod_n_max": 16}
    spec = plan_llamacpp(path, config, host_free_gib=16)
    # rows per decode: parallel x (1 + draft tokens) = 2 x 17 logits rows of 32000 floats
    assert spec.compute_gib * 2**30 >= 4 * 32000 * 34
    assert spec.compute_gib > base.compute_gib
    assert spec.output_gib == base.output_gib  # the host logits buffer: one row per slot
    assert spec.speculative["draft_tokens"] == 16
    quant = plan_llamacpp(path, {"cache_type_k": "q8_0"}, host_free_gib=16)
    assert quant.fits  # head size 32 holds one q8_0 block
    odd = write_gguf(
        with_changes("tiny", head_dim=16),
        path.parent / "hd16.gguf",
        vocab=path.parent / "vocab.gguf",
    )
    bad = plan_llamacpp(odd, {"cache_type_k": "q8_0"}, host_free_gib=16)
    assert not bad.fits and "do not divide the model's head size 16" in bad.reasons[0]


def test_gpu_split_and_fit(models: dict[str, Path]) -> None:
    m = read_gguf(models["tiny"])
    device, host = weights_split(m, m.n_layer + 1)
    # every block and a copy of the tied output on the GPU; the input embedding stays on host
    assert device == sum(m.layer_bytes) + m.token_embd_bytes
    assert host == m.tensor_bytes - sum(m.layer_bytes)
    assert weights_split(m, 0) == (0, m.tensor_bytes)
    plan = plan_llamacpp(m, {"parallel": 8, "ctx_size": 32768}, gpu=H200)
    assert plan.fits and plan.gpu == "h200-141g" and plan.gpu_layers == 3
    # weights_gib counts every model buffer, as the log's buffer lines do (the H200 run's 1B:
    # CUDA0 1981.26 MiB + CPU_Mapped 125.00 MiB, above the 1.93 GiB file): the embedding twice
    assert plan.weights_gib == pytest.approx(
        (m.tensor_bytes + m.token_embd_bytes) / 2**30, abs=1e-5
    )
    cpu = plan_llamacpp(m, {"parallel": 8, "ctx_size": 32768}, host_free_gib=16)
    assert cpu.weights_gib == pytest.approx(m.tensor_bytes / 2**30, abs=1e-5)
    tight = plan_llamacpp(m, {"parallel": 1, "ctx_size": 2**26}, gpu=H200)  # 16 GiB of KV: fits
    assert tight.fits
    over = plan_llamacpp(m, {"parallel": 1, "ctx_size": 2**30}, gpu=H200)  # 256 GiB: does not
    assert not over.fits and "GPU h200-141g" in over.reasons[0]


@pytest.mark.parametrize(("name", "config", "compute", "kv", "rs", "output"), CALIBRATION)
def test_sizes_against_llama_server_logs(
    models: dict[str, Path],
    name: str,
    config: dict[str, object],
    compute: float,
    kv: float,
    rs: float,
    output: float,
) -> None:
    plan = plan_llamacpp(models[name], config, host_free_gib=16)
    mib = 1024
    assert plan.kv_pool_gib * mib == pytest.approx(kv, abs=0.006)  # log rounds to 0.01 MiB
    assert plan.mamba_pool_gib * mib == pytest.approx(rs, abs=0.006)
    assert plan.output_gib * mib == pytest.approx(output, abs=0.006)
    # estimate: never below the real buffer, at most 8 % above it
    assert compute <= plan.compute_gib * mib <= compute * 1.08
