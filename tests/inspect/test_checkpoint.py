"""Checkpoint inspector: healthy vs broken packs (FIELD-NOTES P6, P10) and `autotune inspect`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app, main
from autotune.errors import ConfigError, ModelLoadError
from autotune.inspect import EXIT_CODES, InspectionReport, inspect_checkpoint, layer_groups
from tests.inspect.packs import Dims, truncate, write_llama_pack, write_qwen35_pack

GDN_QUANTIZED = [
    "linear_attn.in_proj_qkv",
    "linear_attn.in_proj_z",
    "linear_attn.out_proj",
    "mlp.down_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
]
BA = ["linear_attn.in_proj_a", "linear_attn.in_proj_b"]


def codes(report: InspectionReport, severity: str | None = None) -> set[str]:
    return {f.code for f in report.findings if severity in (None, f.severity)}


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("packs")
    return {
        "healthy": write_qwen35_pack(root / "healthy").path,
        # P10: ignore spelled model.language_model.layers.N while tensors are model.layers.N,
        # and in_proj_a/b stored packed.
        "p10": write_qwen35_pack(
            root / "p10", packed_ba=True, ignore_prefix="model.language_model."
        ).path,
        "mtp_missing": write_qwen35_pack(root / "mtp_missing", mtp_declared=1).path,
    }


def test_healthy_pack_is_ok(packs: dict[str, Path]) -> None:
    report = inspect_checkpoint(packs["healthy"])
    assert report.verdict == "ok" and report.exit_code == 0
    assert not codes(report, "error") and not codes(report, "warning")
    assert report.num_layers == 4 and len(report.layers) == 4
    for layer in report.layers[:3]:
        assert layer.kind == "linear_attention"
        assert layer.quantized == GDN_QUANTIZED
        assert layer.unquantized == BA
        # input/post norms + conv1d, A_log, dt_bias, norm
        assert layer.other_tensors == 6
    full = report.layers[3]
    assert full.kind == "full_attention"
    assert full.quantized == [
        "mlp.down_proj",
        "mlp.gate_proj",
        "mlp.up_proj",
        "self_attn.k_proj",
        "self_attn.o_proj",
        "self_attn.q_proj",
        "self_attn.v_proj",
    ]
    assert full.unquantized == []
    q = report.quantization
    assert (q.method, q.bits, q.group_size, q.exclude_field) == (
        "compressed-tensors",
        4,
        32,
        "ignore",
    )
    assert len(q.exclude) == 7
    assert report.mtp.declared_layers == 0 and report.mtp.present_layers == 0
    assert report.bytes_by_dtype["I32"] > 0 and set(report.bytes_by_dtype) == {
        "I32",
        "F16",
        "F32",
        "I64",
    }
    assert sum(report.bytes_by_component.values()) == sum(report.bytes_by_dtype.values())
    assert [r for r, _ in layer_groups(report)] == ["0-2", "3"]


def test_p10_pack_is_broken(packs: dict[str, Path]) -> None:
    report = inspect_checkpoint(packs["p10"])
    assert report.verdict == "broken" and report.exit_code == 11
    assert codes(report, "error") == {"excluded-but-quantized", "marlin-size-n"}
    assert codes(report, "warning") == {"exclude-unmatched"}

    (unmatched,) = report.by_code("exclude-unmatched")
    assert unmatched.count == 6
    assert unmatched.tensors[0] == "model.language_model.layers.0.linear_attn.in_proj_a"
    assert "'model.language_model.layers.N' where the tensors are 'model.layers.N'" in (
        unmatched.message
    )
    assert unmatched.fix is not None and "model.language_model. -> model." in unmatched.fix

    (packed,) = report.by_code("excluded-but-quantized")
    assert packed.count == 6
    assert packed.tensors[:2] == [
        "model.layers.0.linear_attn.in_proj_a.weight_packed",
        "model.layers.0.linear_attn.in_proj_b.weight_packed",
    ]
    assert packed.fix is not None and packed.fix.startswith("dequantize these 6 modules to bf16")

    (marlin,) = report.by_code("marlin-size-n")
    assert marlin.count == 6
    # SGLang fuses in_proj_a (48) + in_proj_b (48) into in_proj_ba, 96 wide: 96 % 64 != 0.
    assert "in_proj_ba[in_proj_a+in_proj_b] size_n 96, size_k 128 in layers 0-2" in (
        marlin.message
    )
    for layer in report.layers[:3]:
        assert set(BA) <= set(layer.quantized) and layer.unquantized == []


def test_misspelled_ignore_with_bf16_projections(tmp_path: Path) -> None:
    # Same wrong prefix, but in_proj_a/b really are bf16: the engine, following ignore, would
    # build them quantized and find no packed weights.
    pack = write_qwen35_pack(tmp_path / "p", ignore_prefix="model.language_model.", shards=1)
    report = inspect_checkpoint(pack.path)
    assert report.verdict == "broken"
    (f,) = report.by_code("unquantized-not-excluded")
    assert f.count == 6 and "misspelled exclusion entry" in f.message
    assert "excluded-but-quantized" not in codes(report)
    assert "marlin-size-n" not in codes(report)


def test_mtp_declared_but_missing(packs: dict[str, Path]) -> None:
    report = inspect_checkpoint(packs["mtp_missing"])
    assert report.verdict == "warnings" and report.exit_code == 10
    (f,) = report.by_code("mtp-missing")
    assert f.severity == "warning" and "NEXTN/EAGLE" in f.message and "vllm#35548" in f.message
    assert report.mtp.declared_layers == 1 and report.mtp.present_layers == 0


def test_mtp_and_vision_present(tmp_path: Path) -> None:
    pack = write_qwen35_pack(tmp_path / "mm", multimodal=True, mtp_present=True, mtp_declared=1)
    report = inspect_checkpoint(pack.path)
    assert report.verdict == "ok"
    assert report.mtp.present_layers == 1 and report.mtp.tensors == 13
    assert report.mtp.bytes == sum(
        a.nbytes for n, a in pack.tensors.items() if n.startswith("mtp.")
    )
    assert report.vision_tensors == sum(1 for n in pack.tensors if n.startswith("model.visual."))
    assert "mtp-present" in codes(report, "info")
    # Layers are found under model.language_model.layers.N too.
    assert report.layers[0].quantized == GDN_QUANTIZED


def test_text_only_pack_of_multimodal_model(tmp_path: Path) -> None:
    pack = write_qwen35_pack(tmp_path / "t", multimodal=True, vision_tensors=False)
    report = inspect_checkpoint(pack.path)
    assert "vision-absent" in codes(report, "info")
    # ignore's "re:.*visual.*" matches nothing now.
    (f,) = report.by_code("exclude-unmatched")
    assert f.tensors == ["re:.*visual.*"]


def test_group_size_must_divide_k(tmp_path: Path) -> None:
    pack = write_qwen35_pack(tmp_path / "g", group=48, shards=1)
    report = inspect_checkpoint(pack.path)
    (f,) = report.by_code("group-size-k")
    # K = 128 (hidden) and 768 (out_proj) are not multiples of 48; down_proj K = 256 neither.
    assert "group size 48" in f.message and report.verdict == "broken"


def test_tp_splits_widths(packs: dict[str, Path]) -> None:
    report = inspect_checkpoint(packs["healthy"], tp=2)
    assert report.tp == 2
    # o_proj is row-parallel: K = 4 heads x 32 = 128 -> 64 per rank, below Marlin's 128.
    (f,) = report.by_code("marlin-size-k")
    assert "self_attn.o_proj size_n 128, size_k 64 in layers 3" in f.message
    assert "per rank at TP 2" in f.message
    assert "marlin-size-n" not in codes(report)  # fused qkv_proj is 384 -> 192 per rank
    with pytest.raises(ConfigError, match="--tp"):
        inspect_checkpoint(packs["healthy"], tp=0)


@pytest.mark.parametrize("quant", ["awq", "gptq"])
def test_awq_and_gptq_layouts(tmp_path: Path, quant: str) -> None:
    # intermediate 96: down_proj has K = 96, which Marlin refuses (K % 128); the fused
    # gate_up_proj is 192 wide (fine). Both layouts must yield the same N and K.
    pack = write_llama_pack(tmp_path / quant, quant=quant, intermediate=96, group=32)
    report = inspect_checkpoint(pack.path)
    assert report.quantization.method == quant
    assert report.layers[0].quantized == [
        "mlp.down_proj",
        "mlp.gate_proj",
        "mlp.up_proj",
        "self_attn.k_proj",
        "self_attn.o_proj",
        "self_attn.q_proj",
        "self_attn.v_proj",
    ]
    (f,) = report.by_code("marlin-size-k")
    assert "mlp.down_proj size_n 128, size_k 96 in layers 0-1" in f.message
    assert "marlin-size-n" not in codes(report)


def test_fused_shards_with_mixed_quantization(tmp_path: Path) -> None:
    pack = write_qwen35_pack(tmp_path / "f", shards=1)
    # Re-save with layer 0's in_proj_b packed while in_proj_a stays 16-bit.
    import numpy as np
    from safetensors.numpy import save_file

    t = dict(pack.tensors)
    del t["model.layers.0.linear_attn.in_proj_b.weight"]
    t["model.layers.0.linear_attn.in_proj_b.weight_packed"] = np.zeros((48, 16), np.int32)
    t["model.layers.0.linear_attn.in_proj_b.weight_scale"] = np.zeros((48, 4), np.float16)
    save_file(t, str(pack.path / "model.safetensors"))
    report = inspect_checkpoint(pack.path)
    (f,) = report.by_code("fused-mixed-quantization")
    assert "in_proj_ba" in f.message and f.count == 2
    assert "excluded-but-quantized" in codes(report)  # in_proj_b is in ignore
    assert [r for r, _ in layer_groups(report)] == ["0", "1-2", "3"]


def test_quantized_tensors_without_config(tmp_path: Path) -> None:
    pack = write_qwen35_pack(tmp_path / "q", shards=1)
    cfg = json.loads((pack.path / "config.json").read_text())
    del cfg["quantization_config"]
    (pack.path / "config.json").write_text(json.dumps(cfg))
    report = inspect_checkpoint(pack.path)
    assert "quantized-without-config" in codes(report, "error")
    # config.json alone implies a bf16 decoder: about 3.3x what the packed tensors hold
    (mismatch,) = report.by_code("config-size-mismatch")
    assert mismatch.severity == "warning" and mismatch.message.startswith("decoder: ")
    assert "hold 0.9 MiB" in mismatch.message and "(-69%)" in mismatch.message


def test_loaded_per_rank_by_engine(tmp_path: Path) -> None:
    """Checkpoint truth per rank: embeddings, LM head and decoder split over TP, the vision tower
    whole (SGLang; vLLM splits only Llama 4's), MTP only with speculative decoding."""
    pack = write_qwen35_pack(
        tmp_path / "m", multimodal=True, mtp_declared=1, mtp_present=True, shards=1
    )
    one = inspect_checkpoint(pack.path)
    two = inspect_checkpoint(pack.path, tp=2)
    comp = one.bytes_by_component
    for engine in ("sglang", "vllm"):
        a, b = one.loaded_per_rank[engine], two.loaded_per_rank[engine]
        assert a["decoder"] == comp["decoder"] and b["decoder"] == comp["decoder"] // 2
        assert b["embed_tokens"] == comp["embed_tokens"] // 2
        assert a["vision"] == b["vision"] == comp["vision"]
        assert b["mtp (speculative only)"] == comp["mtp"] // 2
    assert "config-size-mismatch" not in codes(one)
    out = CliRunner().invoke(app, ["inspect", str(pack.path), "--tp", "2"]).stdout
    assert "sglang loads" in out and "vllm loads" in out and "mtp (speculative only)" in out


def test_missing_layers(tmp_path: Path) -> None:
    pack = write_qwen35_pack(tmp_path / "l", dims=Dims(layers=4), quantize=False, shards=1)
    cfg = json.loads((pack.path / "config.json").read_text())
    cfg["num_hidden_layers"] = 8
    cfg["layer_types"] = ["linear_attention"] * 3 + ["full_attention"]
    cfg["layer_types"] *= 2
    (pack.path / "config.json").write_text(json.dumps(cfg))
    report = inspect_checkpoint(pack.path)
    (f,) = report.by_code("layers-missing")
    assert "layers 4-7 have no tensors" in f.message and f.count == 4


def test_layer_types_disagree_with_interval(tmp_path: Path) -> None:
    pack = write_qwen35_pack(tmp_path / "d", quantize=False, shards=1)
    cfg = json.loads((pack.path / "config.json").read_text())
    cfg["layer_types"] = ["full_attention"] + ["linear_attention"] * 3
    (pack.path / "config.json").write_text(json.dumps(cfg))
    report = inspect_checkpoint(pack.path)
    (f,) = report.by_code("layer-types-disagree")
    assert "layers 0, 3" in f.message and report.verdict == "warnings"


def test_user_errors_raise_model_load_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="no such model folder"):
        inspect_checkpoint(tmp_path / "missing")
    pack = write_llama_pack(tmp_path / "t")
    truncate(pack.shards[0], 50)
    with pytest.raises(ModelLoadError, match=r"model\.safetensors: header is truncated"):
        inspect_checkpoint(pack.path)


# --- CLI


def test_cli_json_and_exit_codes(packs: dict[str, Path]) -> None:
    runner = CliRunner()
    for name, verdict in (("healthy", "ok"), ("mtp_missing", "warnings"), ("p10", "broken")):
        result = runner.invoke(app, ["inspect", str(packs[name]), "--json"])
        assert result.exit_code == EXIT_CODES[verdict], result.output
        data = json.loads(result.stdout)
        assert data["verdict"] == verdict and data["exit_code"] == EXIT_CODES[verdict]
        assert (
            InspectionReport.model_validate(
                {k: v for k, v in data.items() if k != "exit_code"}
            ).verdict
            == verdict
        )


def test_cli_text_summary(packs: dict[str, Path]) -> None:
    result = CliRunner().invoke(app, ["inspect", str(packs["p10"])])
    assert result.exit_code == 11
    out = result.stdout
    assert "0-2" in out and "linear_attention" in out
    assert "ERROR   marlin-size-n" in out and "WARNING exclude-unmatched" in out
    assert "fix: dequantize these 6 modules" in out
    assert out.rstrip().endswith("verdict: broken (exit 11)")


def test_cli_missing_folder_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere"
    monkeypatch.setattr(sys, "argv", ["autotune", "inspect", str(missing)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    assert f"{missing}: no such model folder" in capsys.readouterr().err


def test_index_that_does_not_match_shards(tmp_path: Path) -> None:
    pack = write_qwen35_pack(tmp_path / "i")
    index_file = pack.path / "model.safetensors.index.json"
    index = json.loads(index_file.read_text())
    wm = index["weight_map"]
    wm["model.layers.9.mlp.up_proj.weight"] = "model-00001-of-00002.safetensors"
    del wm["lm_head.weight"]
    index_file.write_text(json.dumps(index))
    report = inspect_checkpoint(pack.path)
    (bad,) = report.by_code("index-mismatch")
    assert bad.tensors == ["model.layers.9.mlp.up_proj.weight"] and bad.severity == "error"
    (missing,) = report.by_code("index-incomplete")
    assert missing.tensors == ["lm_head.weight"] and missing.severity == "warning"
