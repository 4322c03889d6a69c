"""vLLM argv by release: golden command lines (0.10.0, 0.33.0 and the newest, 0.34.0), renames, the
--speculative-config JSON element, booleans with --no-, errors with suggestions."""

from __future__ import annotations

import json

import pytest

from autotune.engines import ENGINES, get_adapter
from autotune.engines.vllm import (
    API_SERVER_LAUNCHER,
    DEFAULT_LAUNCHER,
    VLLMAdapter,
    build_command,
    build_flags,
    field_flag,
    flag_names,
    flag_spec,
    parse_version,
    speculative_config,
    speculative_methods,
    supported_versions,
)
from autotune.errors import ConfigError, UnknownNameError, UnsupportedFlagError

OLDEST, NEWEST = "0.10.0", "0.34.0"

# FIELD-NOTES K6 (2 x 2080 Ti 22G): TP2, 262144 context, 8 sequences, 2048-token chunks, MTP 2,
# chunked prefill and prefix caching on; plus the other fields the issue names.
K6 = {
    "tensor_parallel_size": 2,
    "max_model_len": 262144,
    "max_num_seqs": 8,
    "max_num_batched_tokens": 2048,
    "enable_chunked_prefill": True,
    "enable_prefix_caching": True,
    "speculative_method": "mtp",
    "num_speculative_tokens": 2,
    "gpu_memory_utilization": 0.9,
    "kv_cache_dtype": "fp8_e4m3",
    "block_size": 16,
    "quantization": "gptq",
    "enforce_eager": False,
    "cudagraph_capture_sizes": [8, 1, 2, 4],
    "served_model_name": "qwen3.8",
}


def test_registered_and_protocol() -> None:
    assert ENGINES["vllm"] == "autotune.engines.vllm:VLLMAdapter"
    adapter = get_adapter("vllm")
    assert isinstance(adapter, VLLMAdapter) and adapter.name == "vllm"
    assert adapter.health_path() == "/health"
    assert adapter.supported_versions[0] == OLDEST and adapter.supported_versions[-1] == NEWEST


# 0.34.0 renamed or removed none of these flags (the catalogue's 0.33.0 rows all run on to
# 0.34.0): the same argv for both.
@pytest.mark.parametrize("version", ["0.33.0", NEWEST])
def test_golden_argv_newest(version: str) -> None:
    cmd = build_command(K6, model="/models/qwen3.8-27b", version=version, port=8011)
    assert cmd.argv == [
        "vllm", "serve", "/models/qwen3.8-27b", "--host", "127.0.0.1", "--port", "8011",
        "--max-model-len", "262144",
        "--gpu-memory-utilization", "0.9",
        "--kv-cache-dtype", "fp8_e4m3",
        "--block-size", "16",
        "--max-num-seqs", "8",
        "--max-num-batched-tokens", "2048",
        "--enable-chunked-prefill",
        "--enable-prefix-caching",
        "--quantization", "gptq",
        "--tensor-parallel-size", "2",
        "--speculative-config", '{"method":"mtp","num_speculative_tokens":2}',
        "--no-enforce-eager",
        "--cudagraph-capture-sizes", "1", "2", "4", "8",
        "--served-model-name", "qwen3.8",
    ]  # fmt: skip
    assert cmd.env == {}


def test_golden_argv_oldest() -> None:
    # 0.10.0 has no `mtp` method name (deepseek_mtp is the generic MTP drafter there) and spells
    # the capture list --cuda-graph-sizes.
    cfg = {**K6, "speculative_method": "deepseek_mtp"}
    cmd = build_command(cfg, model="/models/m", version=OLDEST, launcher=list(API_SERVER_LAUNCHER))
    assert cmd.argv == [
        "python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/m",
        "--host", "127.0.0.1", "--port", "8000",
        "--max-model-len", "262144",
        "--gpu-memory-utilization", "0.9",
        "--kv-cache-dtype", "fp8_e4m3",
        "--block-size", "16",
        "--max-num-seqs", "8",
        "--max-num-batched-tokens", "2048",
        "--enable-chunked-prefill",
        "--enable-prefix-caching",
        "--quantization", "gptq",
        "--tensor-parallel-size", "2",
        "--speculative-config", '{"method":"deepseek_mtp","num_speculative_tokens":2}',
        "--no-enforce-eager",
        "--cuda-graph-sizes", "1", "2", "4", "8",
        "--served-model-name", "qwen3.8",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("version", "sizes_flag", "cap_flag"),
    [
        ("0.10.0", "--cuda-graph-sizes", "--cuda-graph-sizes"),
        ("0.11.0", "--cuda-graph-sizes", "--cuda-graph-sizes"),
        ("0.11.1", "--cudagraph-capture-sizes", "--max-cudagraph-capture-size"),
        ("0.20.2", "--cudagraph-capture-sizes", "--max-cudagraph-capture-size"),
    ],
)
def test_graph_fields_follow_the_release(version: str, sizes_flag: str, cap_flag: str) -> None:
    assert field_flag("cudagraph_capture_sizes", version) == sizes_flag
    assert field_flag("max_cudagraph_capture_size", version) == cap_flag
    argv, _ = build_flags({"max_cudagraph_capture_size": 16}, version)
    assert argv == [cap_flag, "16"]


def test_old_single_size_is_refused_and_both_conflict() -> None:
    with pytest.raises(ConfigError, match="single --cuda-graph-sizes value as a maximum"):
        build_flags({"cudagraph_capture_sizes": [8]}, "0.10.0")
    with pytest.raises(ConfigError, match="one flag"):
        build_flags({"cudagraph_capture_sizes": [4, 8], "max_cudagraph_capture_size": 8}, "0.11.0")
    # newer releases have two flags: both are fine
    argv, _ = build_flags(
        {"cudagraph_capture_sizes": [8], "max_cudagraph_capture_size": 8}, NEWEST
    )
    assert argv == ["--cudagraph-capture-sizes", "8", "--max-cudagraph-capture-size", "8"]


def test_booleans_use_no_prefix_and_switches_drop_false() -> None:
    argv, _ = build_flags({"enable_prefix_caching": False, "enforce_eager": True}, OLDEST)
    assert argv == ["--no-enable-prefix-caching", "--enforce-eager"]
    argv, _ = build_flags({"disable_log_stats": False}, NEWEST)  # store_true: nothing to say
    assert argv == []
    argv, _ = build_flags({"disable_log_stats": True}, NEWEST)
    assert argv == ["--disable-log-stats"]
    with pytest.raises(ConfigError, match="switch"):
        build_flags({"enable_prefix_caching": "yes"}, NEWEST)


def test_speculative_config_is_one_argv_element() -> None:
    cfg = {"speculative_method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
    argv, _ = build_flags(cfg, NEWEST)
    assert argv == [
        "--speculative-config",
        '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4}',
    ]
    assert json.loads(argv[1]) == {"method": "ngram", "num_speculative_tokens": 4,
                                   "prompt_lookup_max": 4}  # fmt: skip
    # the whole object may be given instead (dict or JSON text), but not both forms
    argv2, _ = build_flags({"speculative_config": json.dumps(json.loads(argv[1]))}, NEWEST)
    assert argv2 == argv
    with pytest.raises(ConfigError, match="not both"):
        build_flags({**cfg, "speculative_config": {"method": "ngram"}}, NEWEST)


def test_speculative_checks() -> None:
    with pytest.raises(UnsupportedFlagError, match="'mtp' is not supported by vLLM 0.10.0; "
                       "releases that have it: 0.11.0-0.34.0"):  # fmt: skip
        speculative_config({"speculative_method": "mtp", "num_speculative_tokens": 2}, OLDEST)
    with pytest.raises(ConfigError, match="unknown speculative method 'nextn'"):
        speculative_config({"speculative_method": "nextn", "num_speculative_tokens": 2}, NEWEST)
    with pytest.raises(ConfigError, match="only apply with speculative_method set"):
        build_flags({"num_speculative_tokens": 3}, NEWEST)
    with pytest.raises(ConfigError, match="only apply with speculative_method ngram"):
        build_flags(
            {"speculative_method": "mtp", "num_speculative_tokens": 1, "prompt_lookup_max": 3},
            NEWEST,
        )
    with pytest.raises(ConfigError, match="must be <= prompt_lookup_max"):
        build_flags({"speculative_method": "ngram", "prompt_lookup_min": 5,
                     "prompt_lookup_max": 3}, NEWEST)  # fmt: skip
    with pytest.raises(ConfigError, match="needs num_speculative_tokens"):
        build_flags({"speculative_method": "mtp"}, NEWEST)
    assert "mtp" in speculative_methods("0.11.0") and "mtp" not in speculative_methods(OLDEST)
    assert "qwen3_5_mtp" in speculative_methods(NEWEST)


def test_release_0_34_0() -> None:
    # new in 0.34.0 (config/cache.py CacheConfig.enable_extensible_kv_cache, a BooleanOptional
    # flag; EnableDisableAction's --disable- twin as well)
    assert build_flags({"enable_extensible_kv_cache": False}, NEWEST)[0] == [
        "--no-enable-extensible-kv-cache"
    ]
    assert {"--enable-extensible-kv-cache", "--disable-extensible-kv-cache"} <= flag_names(NEWEST)
    with pytest.raises(UnsupportedFlagError, match="releases that have it: 0.34.0$"):
        build_flags({"enable_extensible_kv_cache": True}, "0.33.0")
    # CacheConfig.gpu_memory_utilization is Optional from 0.34.0; a value is still a fraction
    argv, _ = build_flags({"gpu_memory_utilization": 1.0}, NEWEST)
    assert argv == ["--gpu-memory-utilization", "1.0"]
    # 0.34.0 drops custom_class (config/speculative.py SpeculativeMethod) and adds
    # nemotron3_5_transcribe_mtp (MTPModelTypes)
    assert "custom_class" in speculative_methods("0.33.0")
    assert "custom_class" not in speculative_methods(NEWEST)
    assert "nemotron3_5_transcribe_mtp" in speculative_methods(NEWEST)
    with pytest.raises(UnsupportedFlagError, match="releases that have it: 0.22.0-0.33.0"):
        speculative_config(
            {"speculative_config": {"method": "custom_class", "model": "pkg.Proposer",
                                    "num_speculative_tokens": 2}},
            NEWEST,
        )  # fmt: skip


def test_unknown_field_suggests_and_unsupported_names_releases() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'max_num_seqs'"):
        build_flags({"max_num_seq": 8}, NEWEST)
    with pytest.raises(UnsupportedFlagError, match=r"'max_num_active_seqs' is not supported "
                       r"by vLLM 0\.10\.0; releases that have it: 0\.31\.0-0\.34\.0"):  # fmt: skip
        build_flags({"max_num_active_seqs": 4}, OLDEST)
    with pytest.raises(UnsupportedFlagError, match="0.10.0-0.12.0"):
        build_flags({"cuda_graph_sizes": [1, 2]}, NEWEST)  # removed in 0.13.0


def test_values_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"fraction in \(0, 1\]"):
        build_flags({"gpu_memory_utilization": 1.2}, NEWEST)
    with pytest.raises(ConfigError, match="expects an integer"):
        build_flags({"max_num_seqs": "8"}, NEWEST)
    with pytest.raises(ConfigError, match="'fp9' is not valid for --kv-cache-dtype in vLLM "
                       "0.10.0; valid: auto, fp8"):  # fmt: skip
        build_flags({"kv_cache_dtype": "fp9"}, OLDEST)
    # older releases take block sizes from a Literal; the newest takes any integer
    with pytest.raises(ConfigError, match="'784' is not valid for --block-size"):
        build_flags({"block_size": 784}, "0.17.1")
    assert build_flags({"block_size": 784}, NEWEST)[0] == ["--block-size", "784"]


def test_aliases_reserved_and_duplicates() -> None:
    assert build_flags({"tp_size": 2}, NEWEST)[0] == ["--tensor-parallel-size", "2"]
    # the sweep adds tp_size beside a config that may already name the TP size
    both = build_flags({"tensor_parallel_size": 2, "tp_size": 2}, NEWEST)[0]
    assert both == ["--tensor-parallel-size", "2"]
    with pytest.raises(ConfigError, match="same option as 'tensor_parallel_size' to another"):
        build_flags({"tensor_parallel_size": 2, "tp_size": 4}, NEWEST)
    for key in ("model", "host", "port"):
        with pytest.raises(ConfigError, match="launcher"):
            build_flags({key: "x"}, NEWEST)


def test_env_field_by_release() -> None:
    argv, env = build_flags({"memory_profiler_estimate_cudagraphs": False}, "0.20.2")
    assert argv == [] and env == {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}
    with pytest.raises(UnsupportedFlagError, match="0.18.0-0.34.0"):
        build_flags({"memory_profiler_estimate_cudagraphs": True}, "0.17.1")


def test_launcher_and_model_position() -> None:
    serve = build_command({}, model="org/m", version=NEWEST, launcher=["/venv/bin/vllm", "serve"])
    assert serve.argv[:3] == ["/venv/bin/vllm", "serve", "org/m"]
    assert list(DEFAULT_LAUNCHER) == ["vllm", "serve"]
    sim = build_command({}, model="org/m", version=NEWEST, launcher=["python", "-m", "x"])
    assert sim.argv[:5] == ["python", "-m", "x", "--model", "org/m"]
    with pytest.raises(ConfigError, match="port"):
        build_command({}, model="m", version=NEWEST, port=0)
    with pytest.raises(ConfigError, match="model"):
        build_command({}, model="", version=NEWEST)


def test_versions() -> None:
    assert parse_version("v0.11.0") == "0.11.0"
    assert parse_version("0.10.1.1") == "0.10.1.1"
    assert parse_version("0.11.0.post2") == "0.11.0"
    assert parse_version("0.20.2+cu128") == "0.20.2"
    # an uncatalogued patch release or a nightly follows the release before it (engines.builds)
    assert parse_version("0.20.3") == parse_version("0.20.3.dev4+g0123abc") == "0.20.2"
    for bad in ("0.9.2", "0.35.0", "0.35.0rc1", "1.0", "latest"):
        with pytest.raises(ConfigError, match="--engine-version"):
            parse_version(bad)
    assert len(supported_versions()) == 40


def test_catalog_facts() -> None:
    spec = flag_spec("--enable-prefix-caching", OLDEST)
    assert spec is not None and spec.kind == "n"
    assert "--no-enable-prefix-caching" in flag_names(OLDEST)
    # from 0.33.0 EnableDisableAction also accepts --disable-x for --enable-x booleans
    assert "--disable-prefix-caching" in flag_names("0.33.0")
    assert "--disable-prefix-caching" in flag_names(NEWEST)
    assert "--disable-prefix-caching" not in flag_names("0.32.0")
    deprecated = flag_spec("--cuda-graph-sizes", "0.12.0")
    assert deprecated is not None and deprecated.deprecated
    assert flag_spec("--cuda-graph-sizes", "0.13.0") is None
    for version in (OLDEST, "0.20.2", NEWEST):
        assert {"--host", "--port", "--max-num-seqs", "--speculative-config"} <= flag_names(
            version
        )


def test_compilation_config_keys_follow_the_release() -> None:
    """A key the release's CompilationConfig lacks is refused with the closest fields (0.13.0+
    reject it at startup; older releases drop it unread): `cudagraph_mode` from 0.10.1, `level`
    through 0.17.1 (`mode` replaced it)."""
    ok = {"compilation_config": {"cudagraph_mode": "FULL_AND_PIECEWISE"}}
    assert "--compilation-config" in build_flags(ok, "0.10.1")[0]
    with pytest.raises(ConfigError, match=r"'cudagraph_mode' is not .* vLLM 0.10.0") as exc:
        build_flags(ok, "0.10.0")
    assert exc.value.field == "compilation_config"
    assert build_flags({"compilation_config": {"level": 3}}, "0.17.1")[0]
    with pytest.raises(ConfigError, match=r"'level' is not .* vLLM 0.18.0"):
        build_flags({"compilation_config": {"level": 3}}, "0.18.0")
    with pytest.raises(ConfigError, match=r"did you mean 'cudagraph_mode'"):
        build_flags({"compilation_config": '{"cudagraph_mod": "FULL"}'}, "0.34.0")
