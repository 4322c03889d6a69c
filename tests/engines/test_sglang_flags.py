"""Golden argv per SGLang version and the version-table rules (FIELD-NOTES K1, K3, K4, P4, P13)."""

from __future__ import annotations

import pytest

from autotune.engines import get_adapter
from autotune.engines.sglang import (
    FIELDS,
    SUPPORTED_VERSIONS,
    SGLangAdapter,
    build_command,
    canonical_field,
    field_flag,
    flag_names,
    flag_spec,
    parse_version,
)
from autotune.engines.sglang.flags import _catalog
from autotune.errors import ConfigError, UnknownNameError, UnsupportedFlagError

BASE = ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--host", "127.0.0.1"]
BASE += ["--port", "30000"]

# FIELD-NOTES K1 (RTX 4080 SUPER 32G, AWQ-INT4, SGLang 0.5.17)
K1 = {
    "context_length": 131072,
    "max_running_requests": 2,
    "mem_fraction_static": 0.92,
    "kv_cache_dtype": "fp8_e4m3",
    "page_size": 1,
    "max_mamba_cache_size": 6,
    "enable_hierarchical_cache": True,
    "hicache_size": 12,
    "hicache_write_policy": "write_through",
    "reasoning_parser": "qwen3",
    "tool_call_parser": "qwen3_coder",
}
K1_FLAGS = (
    "--context-length 131072 --max-running-requests 2 --mem-fraction-static 0.92 "
    "--kv-cache-dtype fp8_e4m3 --page-size 1 --max-mamba-cache-size 6 "
    "--enable-hierarchical-cache --hicache-size 12 --hicache-write-policy write_through "
    "--reasoning-parser qwen3 --tool-call-parser qwen3_coder"
)

# FIELD-NOTES K3-style (NEXTN, explicit decode graph sizes, HiCache direct io)
K3 = {
    "tp_size": 2,
    "quantization": "gptq",
    "mamba_ssm_dtype": "bfloat16",
    "kv_cache_dtype": "auto",
    "attention_backend": "triton",
    "context_length": 196608,
    "mem_fraction_static": 0.91,
    "max_running_requests": 4,
    "max_mamba_cache_size": 20,
    "speculative_algorithm": "NEXTN",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
    "cuda_graph_bs_decode": [1, 2, 4],
    "chunked_prefill_size": 2048,
    "page_size": 64,
    "schedule_policy": "lpm",
    "enable_hierarchical_cache": True,
    "hicache_ratio": 2,
    "hicache_io_backend": "direct",
    "hicache_write_policy": "write_through",
}

# FIELD-NOTES K4-style (DFLASH, lazy extra buffer, decode graph cap, page_first_direct)
K4 = {
    "tp_size": 2,
    "kv_cache_dtype": "fp8_e4m3",
    "speculative_algorithm": "DFLASH",
    "speculative_num_draft_tokens": 8,
    "context_length": 200000,
    "max_total_tokens": 185000,
    "max_running_requests": 4,
    "cuda_graph_max_bs_decode": 4,
    "mem_fraction_static": 0.88,
    "mamba_ssm_dtype": "bfloat16",
    "mamba_radix_cache_strategy": "extra_buffer_lazy",
    "enable_hierarchical_cache": True,
    "hicache_ratio": 2,
    "hicache_size": 15,
    "hicache_io_backend": "direct",
    "hicache_mem_layout": "page_first_direct",
    "hicache_write_policy": "write_through",
    "page_size": 64,
}


def argv(config: dict[str, object], version: str) -> list[str]:
    return build_command(config, model="/m", version=version).argv


def test_k1_on_0_5_17_golden() -> None:
    assert argv(K1, "0.5.17") == [
        *BASE,
        *"--context-length 131072 --mem-fraction-static 0.92 --max-running-requests 2".split(),
        *"--page-size 1 --kv-cache-dtype fp8_e4m3 --max-mamba-cache-size 6".split(),
        *"--enable-hierarchical-cache --hicache-size 12 --hicache-write-policy write_through".split(),
        *"--reasoning-parser qwen3 --tool-call-parser qwen3_coder --enable-metrics".split(),
    ]
    # the same flags as the hand-tuned command line, plus the metrics the tuner scrapes
    got = argv(K1, "0.5.17")[len(BASE) :]
    pairs = " ".join(got).replace(" --", "\n--").splitlines()
    assert sorted(pairs) == sorted(
        [*K1_FLAGS.replace(" --", "\n--").splitlines(), "--enable-metrics"]
    )


def test_k3_on_0_5_12_uses_old_cuda_graph_spelling() -> None:
    assert argv(K3, "0.5.12") == [
        *BASE,
        *"--context-length 196608 --mem-fraction-static 0.91 --max-running-requests 4".split(),
        *"--chunked-prefill-size 2048 --page-size 64 --kv-cache-dtype auto".split(),
        *"--quantization gptq --tp-size 2 --schedule-policy lpm --attention-backend triton".split(),
        *"--max-mamba-cache-size 20 --mamba-ssm-dtype bfloat16".split(),
        *"--enable-hierarchical-cache --hicache-ratio 2 --hicache-write-policy write_through".split(),
        *"--hicache-io-backend direct --speculative-algorithm NEXTN".split(),
        *"--speculative-num-steps 3 --speculative-eagle-topk 1".split(),
        *"--speculative-num-draft-tokens 4 --cuda-graph-bs 1 2 4 --enable-metrics".split(),
    ]


def test_k3_on_0_5_16_uses_decode_spelling() -> None:
    got = argv(K3, "0.5.16")
    i = got.index("--cuda-graph-bs-decode")
    assert got[i : i + 4] == ["--cuda-graph-bs-decode", "1", "2", "4"]
    assert "--cuda-graph-bs" not in got


@pytest.mark.parametrize("version", ["0.5.20", "0.5.23"])
def test_k4_golden_on_new_versions(version: str) -> None:
    assert argv(K4, version) == [
        *BASE,
        *"--context-length 200000 --mem-fraction-static 0.88 --max-total-tokens 185000".split(),
        *"--max-running-requests 4 --page-size 64 --kv-cache-dtype fp8_e4m3 --tp-size 2".split(),
        *"--mamba-ssm-dtype bfloat16 --mamba-radix-cache-strategy extra_buffer_lazy".split(),
        *"--enable-hierarchical-cache --hicache-ratio 2 --hicache-size 15".split(),
        *"--hicache-write-policy write_through --hicache-io-backend direct".split(),
        *"--hicache-mem-layout page_first_direct --speculative-algorithm DFLASH".split(),
        *"--speculative-num-draft-tokens 8 --cuda-graph-max-bs-decode 4 --enable-metrics".split(),
    ]


def test_0_5_9_golden_old_spellings() -> None:
    config = {
        "mem_fraction_static": 0.85,
        "mamba_radix_cache_strategy": "no_buffer",
        "cuda_graph_max_bs_decode": 8,
        "speculative_algorithm": "EAGLE",
        "disable_cuda_graph": False,
        "chunked_prefill_size": None,
    }
    assert argv(config, "0.5.9") == [
        *BASE,
        *"--mem-fraction-static 0.85 --mamba-scheduler-strategy no_buffer".split(),
        *"--speculative-algorithm EAGLE --cuda-graph-max-bs 8 --enable-metrics".split(),
    ]


def test_renamed_fields_follow_the_version_p13() -> None:
    # both spellings are config names; the flag follows the engine version
    for name in ("mamba_radix_cache_strategy", "mamba_scheduler_strategy"):
        assert field_flag(name, "0.5.9") == "--mamba-scheduler-strategy"
        assert field_flag(name, "0.5.13") == "--mamba-scheduler-strategy"
        assert field_flag(name, "0.5.14") == "--mamba-radix-cache-strategy"
        assert field_flag(name, "0.5.23") == "--mamba-radix-cache-strategy"
    for name in ("cuda_graph_max_bs", "cuda_graph_max_bs_decode"):
        assert field_flag(name, "0.5.12") == "--cuda-graph-max-bs"
        assert field_flag(name, "0.5.16") == "--cuda-graph-max-bs-decode"
        assert field_flag(name, "0.5.23") == "--cuda-graph-max-bs-decode"
    assert argv({"cuda_graph_max_bs": 16}, "0.5.23")[-3:] == [
        "--cuda-graph-max-bs-decode",
        "16",
        "--enable-metrics",
    ]


def test_old_cuda_graph_flag_is_gone_from_0_5_20() -> None:
    # 0.5.20+ parse `--cuda-graph-max-bs` as an ambiguous prefix: it must never be emitted
    assert "--cuda-graph-max-bs" in flag_names("0.5.9")
    assert {"--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"} <= flag_names("0.5.16")
    assert "--cuda-graph-max-bs" not in flag_names("0.5.20")
    assert "--cuda-graph-max-bs" not in flag_names("0.5.23")
    assert "--mamba-scheduler-strategy" not in flag_names("0.5.23")
    spec = flag_spec("--cuda-graph-max-bs", "0.5.17")
    assert spec is not None and spec.deprecated and spec.dest == "cuda_graph_max_bs_decode"
    for version in SUPPORTED_VERSIONS:
        flags = argv({"cuda_graph_max_bs_decode": 4}, version)[len(BASE) :]
        old = parse_version(version)[2] <= 13
        assert flags[0] == ("--cuda-graph-max-bs" if old else "--cuda-graph-max-bs-decode")


def test_dflash_rejected_on_0_5_9_with_valid_values() -> None:
    with pytest.raises(ConfigError) as err:
        argv({"speculative_algorithm": "DFLASH"}, "0.5.9")
    msg = str(err.value)
    assert "speculative_algorithm" in msg and "0.5.9" in msg
    assert "EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM" in msg


def test_speculative_builtins_by_version() -> None:
    assert "--speculative-algorithm" in argv({"speculative_algorithm": "DFLASH"}, "0.5.12")
    with pytest.raises(ConfigError, match="DSPARK"):
        argv({"speculative_algorithm": "DSPARK"}, "0.5.15")
    argv({"speculative_algorithm": "DSPARK"}, "0.5.16")
    with pytest.raises(ConfigError, match="UNO"):
        argv({"speculative_algorithm": "UNO"}, "0.5.19")
    argv({"speculative_algorithm": "UNO"}, "0.5.20")
    with pytest.raises(ConfigError, match="valid: DFLASH"):
        argv({"speculative_algorithm": "MEDUSA"}, "0.5.23")


def test_extra_buffer_lazy_rejected_on_old_versions() -> None:
    for version in ("0.5.9", "0.5.12"):
        with pytest.raises(ConfigError) as err:
            argv({"mamba_radix_cache_strategy": "extra_buffer_lazy"}, version)
        assert "auto, no_buffer, extra_buffer" in str(err.value)
    assert "extra_buffer_lazy" in argv({"mamba_scheduler_strategy": "extra_buffer_lazy"}, "0.5.13")


def test_kv_cache_dtype_choices_by_version() -> None:
    argv({"kv_cache_dtype": "fp4_e2m1"}, "0.5.20")
    with pytest.raises(ConfigError, match="fp4_mx_block16"):
        argv({"kv_cache_dtype": "fp4_e2m1"}, "0.5.21")
    with pytest.raises(ConfigError, match="valid: auto, fp8_e5m2, fp8_e4m3, bf16"):
        argv({"kv_cache_dtype": "nvfp4"}, "0.5.9")


def test_unknown_field_suggests_close_names() -> None:
    with pytest.raises(UnknownNameError) as err:
        argv({"mem_fraction_statc": 0.9}, "0.5.23")
    assert "did you mean 'mem_fraction_static'" in str(err.value)
    with pytest.raises(UnknownNameError):
        canonical_field("max_num_seqs")  # a vLLM name


def test_field_missing_in_version_names_versions_that_have_it() -> None:
    with pytest.raises(UnsupportedFlagError) as err:
        argv({"hicache_host_memory_mode": "buffer_only"}, "0.5.17")
    msg = str(err.value)
    assert "hicache_host_memory_mode" in msg and "0.5.17" in msg and "0.5.19-0.5.23" in msg
    with pytest.raises(UnsupportedFlagError, match="0.5.23"):
        argv({"enable_hicache": True}, "0.5.22")


def test_uncurated_catalog_fields_follow_the_mechanical_rule() -> None:
    got = argv({"swa_full_tokens_ratio": 0.5, "enable_torch_compile": True}, "0.5.9")
    assert got[len(BASE) :] == [
        "--enable-metrics",
        "--enable-torch-compile",
        "--swa-full-tokens-ratio",
        "0.5",
    ]
    # a JSON-typed flag takes a mapping and renders it as compact JSON
    got = argv({"extra_metric_labels": {"rig": "a", "gpu": "h200"}}, "0.5.23")
    assert got[-2:] == ["--extra-metric-labels", '{"gpu":"h200","rig":"a"}']


def test_booleans_none_and_metrics() -> None:
    assert argv({"trust_remote_code": True}, "0.5.23")[len(BASE) :] == [
        "--trust-remote-code",
        "--enable-metrics",
    ]
    assert argv({"trust_remote_code": False, "page_size": None}, "0.5.23")[len(BASE) :] == [
        "--enable-metrics"
    ]
    assert argv({"enable_metrics": False}, "0.5.23") == BASE
    with pytest.raises(ConfigError, match="true or false"):
        argv({"disable_radix_cache": "yes"}, "0.5.23")


def test_value_types_are_checked() -> None:
    with pytest.raises(ConfigError, match="integer"):
        argv({"page_size": "64"}, "0.5.23")
    with pytest.raises(ConfigError, match="number"):
        argv({"mem_fraction_static": True}, "0.5.23")
    with pytest.raises(ConfigError, match="one value"):
        argv({"page_size": [1, 2]}, "0.5.23")
    with pytest.raises(ConfigError, match="at least one"):
        argv({"cuda_graph_bs_decode": []}, "0.5.23")
    assert argv({"cuda_graph_bs_decode": 8}, "0.5.23")[-3:-1] == ["--cuda-graph-bs-decode", "8"]


def test_conflicting_names_for_one_option() -> None:
    with pytest.raises(ConfigError, match="same option"):
        argv({"mamba_scheduler_strategy": "auto", "mamba_radix_cache_strategy": "auto"}, "0.5.23")
    with pytest.raises(ConfigError, match="same engine option"):
        argv({"tp_size": 2, "tensor_parallel_size": 2}, "0.5.23")
    with pytest.raises(ConfigError, match="launcher"):
        argv({"port": 1234}, "0.5.23")


def test_hicache_file_backend_env_p4() -> None:
    config = {
        "enable_hierarchical_cache": True,
        "hicache_storage_backend": "file",
        "hicache_file_storage_dir": "/data/hicache",
        "hicache_file_max_size": "200G",
        "hicache_file_min_free_space": 10 * 2**30,
    }
    cmd = build_command(config, model="/m", version="0.5.17")
    assert cmd.env == {
        "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": "/data/hicache",
        "SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE": "200G",
        "SGLANG_HICACHE_FILE_BACKEND_MIN_FREE_SPACE": str(10 * 2**30),
    }
    assert "--hicache-storage-backend" in cmd.argv
    assert not any("hicache-file" in a or "/data/hicache" in a for a in cmd.argv)
    with pytest.raises(ConfigError, match="hicache_storage_backend='file'"):
        build_command({"hicache_file_storage_dir": "/data/h"}, model="/m", version="0.5.17")
    with pytest.raises(UnsupportedFlagError, match="0.5.14-0.5.23"):
        build_command(config, model="/m", version="0.5.12")
    with pytest.raises(ConfigError, match="suffix"):
        build_command({**config, "hicache_file_max_size": "lots"}, model="/m", version="0.5.17")


def test_launcher_host_port() -> None:
    cmd = build_command(
        {},
        model="/m",
        version="0.5.23",
        host="0.0.0.0",
        port=31000,
        launcher=["/venv/bin/python", "-m", "autotune.sim.server"],
    )
    assert cmd.argv == [
        "/venv/bin/python",
        "-m",
        "autotune.sim.server",
        "--model-path",
        "/m",
        "--host",
        "0.0.0.0",
        "--port",
        "31000",
        "--enable-metrics",
    ]
    with pytest.raises(ConfigError, match="--port"):
        build_command({}, model="/m", version="0.5.23", port=0)
    with pytest.raises(ConfigError, match="launcher"):
        build_command({}, model="/m", version="0.5.23", launcher=[])


@pytest.mark.parametrize("bad", ["0.5.8", "0.5.24", "0.6.0", "latest", "0.5", "0.5.x"])
def test_unsupported_versions(bad: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_version(bad)
    assert "--engine-version" in str(err.value) and "0.5.9 to 0.5.23" in str(err.value)
    with pytest.raises(ConfigError):
        build_command({}, model="/m", version=bad)


def test_versions_parse() -> None:
    assert parse_version("0.5.17") == (0, 5, 17)
    assert parse_version("0.5.15.post1") == (0, 5, 15)
    assert SUPPORTED_VERSIONS[0] == "0.5.9" and SUPPORTED_VERSIONS[-1] == "0.5.23"
    assert len(SUPPORTED_VERSIONS) == 15


def test_table_agrees_with_catalog() -> None:
    """Every curated flag exists, in SGLang's own parser, across its whole declared range."""
    catalog = _catalog()
    for name, field in FIELDS.items():
        if field.env is not None:
            continue
        rules = field.flags or ((9, 23, "--" + name.replace("_", "-")),)
        for first, last, flag in rules:
            assert flag in catalog, flag
            for minor in range(first, last + 1):
                assert flag_spec(flag, f"0.5.{minor}") is not None, (name, flag, minor)
    for version in SUPPORTED_VERSIONS:
        names = flag_names(version)
        assert {"--model-path", "--host", "--port", "--enable-metrics"} <= names
        assert "--help" not in names


def test_adapter_protocol_and_registry() -> None:
    adapter = get_adapter("sglang")
    assert isinstance(adapter, SGLangAdapter)
    assert adapter.name == "sglang"
    assert adapter.health_path() == "/health"
    assert adapter.is_ready_line("[2026-03-01 12:00:00] The server is fired up and ready to roll!")
    assert not adapter.is_ready_line("[2026-03-01 12:00:00] Load weight begin. avail mem=30 GB")
    cmd = adapter.build_command(K1, model="/m", version="0.5.17")
    assert cmd.argv == argv(K1, "0.5.17")
