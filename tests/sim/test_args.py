"""The simulator's command line follows SGLang's flags per version (FIELD-NOTES P13)."""

from __future__ import annotations

import pytest

from autotune.sim.args import parse_args

BASE = ["--model-path", "qwen3.8-27b-awq-int4", "--sim-gpu", "rtx-4080-super-32g"]


def fails(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_config_holds_only_given_flags_in_field_names() -> None:
    ns, cfg, sim = parse_args(
        [
            *BASE,
            "--mem-fraction-static",
            "0.92",
            "--page-size",
            "1",
            "--kv-cache-dtype",
            "fp8_e4m3",
            "--enable-hierarchical-cache",
            "--port",
            "1234",
            "--enable-metrics",
            "--sim-time-scale",
            "50",
        ]
    )
    assert cfg == {
        "mem_fraction_static": 0.92,
        "page_size": 1,
        "kv_cache_dtype": "fp8_e4m3",
        "enable_hierarchical_cache": True,
    }
    assert ns.port == 1234 and ns.enable_metrics and ns.host == "127.0.0.1"
    assert ns.decode_log_interval == 40 and ns.tp_size == 1
    assert sim.time_scale == 50 and sim.engine_version == "0.5.17"


def test_renamed_flags_follow_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    _, cfg, _ = parse_args(
        [
            *BASE,
            "--sim-engine-version",
            "0.5.12",
            "--mamba-scheduler-strategy",
            "no_buffer",
            "--cuda-graph-max-bs",
            "8",
            "--tp-size",
            "2",
        ]
    )
    assert cfg["mamba_scheduler_strategy"] == "no_buffer" and cfg["cuda_graph_max_bs"] == 8
    ns, cfg, _ = parse_args(
        [
            *BASE,
            "--sim-engine-version",
            "0.5.23",
            "--mamba-radix-cache-strategy",
            "extra_buffer",
            "--cuda-graph-bs-decode",
            "1",
            "2",
            "4",
            "--enable-hicache",
        ]
    )
    assert cfg["mamba_radix_cache_strategy"] == "extra_buffer"
    assert cfg["cuda_graph_max_bs_decode"] == 4 and cfg["enable_hierarchical_cache"] is True
    # 0.5.17 still takes the deprecated spelling, into the new field
    _, cfg, _ = parse_args([*BASE, "--mamba-scheduler-strategy", "no_buffer"])
    assert cfg == {"mamba_radix_cache_strategy": "no_buffer"}
    assert "unrecognized arguments: --mamba-radix-cache-strategy" in fails(
        [*BASE, "--sim-engine-version", "0.5.12", "--mamba-radix-cache-strategy", "no_buffer"],
        capsys,
    )
    assert "unrecognized arguments: --mamba-scheduler-strategy" in fails(
        [*BASE, "--sim-engine-version", "0.5.23", "--mamba-scheduler-strategy", "no_buffer"],
        capsys,
    )
    assert "ambiguous option: --cuda-graph-max-bs could match" in fails(
        [*BASE, "--sim-engine-version", "0.5.23", "--cuda-graph-max-bs", "8"], capsys
    )


def test_bad_values_and_missing_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert "invalid choice: 'int3'" in fails([*BASE, "--kv-cache-dtype", "int3"], capsys)
    assert "invalid int value" in fails([*BASE, "--page-size", "big"], capsys)
    assert "--model-path" in fails(["--sim-gpu", "h200-141g"], capsys)
    assert "--sim-gpu" in fails(["--model-path", "tiny-dense"], capsys)
    assert "unsupported SGLang version '0.4.0'" in fails(
        [*BASE, "--sim-engine-version", "0.4.0"], capsys
    )
    assert "--sim-time-scale" in fails([*BASE, "--sim-time-scale", "-1"], capsys)
    # 0.5.9 still lists its speculative algorithms as argparse choices
    assert "invalid choice: 'DFLASH'" in fails(
        [*BASE, "--sim-engine-version", "0.5.9", "--speculative-algorithm", "DFLASH"], capsys
    )
