"""llama-server argv per llama-cpp-python version, and the flag table against llama.cpp's own
common/arg.cpp (the pinned sdist's copy kept by scripts/build-llama-server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.engines import get_adapter
from autotune.engines.llamacpp import (
    FIELDS,
    LlamaCppAdapter,
    build_command,
    canonical_field,
    catalog_version,
    field_flag,
    known_fields,
    option_spec,
    supported_versions,
)
from autotune.engines.llamacpp.argcpp import (
    kv_cache_types,
    parse_arg_cpp,
    server_options,
    speculative_types,
    strip_comments,
)
from autotune.engines.llamacpp.binary import PINNED_VERSION, cache_root
from autotune.engines.llamacpp.flags import _catalog, value_set
from autotune.errors import ConfigError, UnknownNameError, UnsupportedFlagError
from autotune.space.engine_fields import ENGINE_FIELDS

BASE = ["/opt/llama-server", "--model", "/m.gguf", "--host", "127.0.0.1", "--port", "8080"]
CONFIG = {
    "parallel": 4,
    "ctx_size": 8192,
    "batch_size": 1024,
    "ubatch_size": 256,
    "kv_unified": False,
    "flash_attn": "on",
    "cache_type_k": "q8_0",
    "cache_type_v": "q8_0",
    "cache_reuse": 256,
    "n_gpu_layers": 99,
    "spec_draft_model": "/d.gguf",
    "spec_draft_n_max": 8,
    "spec_draft_n_min": 2,
}


def _cmd(config: dict[str, object], version: str) -> list[str]:
    cmd = build_command(config, model="/m.gguf", version=version, launcher=["/opt/llama-server"])
    assert cmd.argv[: len(BASE)] == BASE
    return cmd.argv[len(BASE) :]


def test_golden_argv_pinned_version() -> None:
    expected = (
        "--parallel 4 --ctx-size 8192 --batch-size 1024 --ubatch-size 256 --no-kv-unified "
        "--flash-attn on --cache-type-k q8_0 --cache-type-v q8_0 --cache-reuse 256 "
        "--n-gpu-layers 99 --spec-draft-model /d.gguf --spec-draft-n-max 8 "
        "--spec-draft-n-min 2 --metrics --verbosity 4"
    )
    assert _cmd(CONFIG, "0.3.36") == expected.split()


def test_golden_argv_old_version_spellings() -> None:
    # 0.3.16: bare --flash-attn and --kv-unified switches, --draft-max / --model-draft.
    expected = (
        "--parallel 4 --ctx-size 8192 --batch-size 1024 --ubatch-size 256 --flash-attn "
        "--cache-type-k q8_0 --cache-type-v q8_0 --cache-reuse 256 --n-gpu-layers 99 "
        "--model-draft /d.gguf --draft-max 8 --draft-min 2 --metrics --verbosity 4"
    )
    assert _cmd(CONFIG, "0.3.16") == expected.split()


def test_ngram_speculation_and_fit() -> None:
    config = {"spec_type": "ngram-mod", "spec_ngram_mod_n_max": 32, "fit": "off"}
    expected = "--fit off --spec-type ngram-mod --spec-ngram-mod-n-max 32 --metrics --verbosity 4"
    assert _cmd(config, "0.3.30") == expected.split()
    with pytest.raises(UnsupportedFlagError, match="versions that have it: 0.3.30, 0.3.36"):
        _cmd({"spec_type": "ngram-mod"}, "0.3.16")
    with pytest.raises(ConfigError, match="'ngram-foo' is not valid for --spec-type"):
        _cmd({"spec_type": "ngram-foo"}, "0.3.36")
    assert "draft-dflash" in value_set("0.3.36", "spec_types")
    assert "draft-dflash" not in value_set("0.3.30", "spec_types")


QUIET = {"metrics": False, "verbosity": 3}


def test_flash_attn_values_per_version() -> None:
    assert (
        _cmd({"flash_attn": "auto", **QUIET}, "0.3.36")
        == "--flash-attn auto --verbosity 3".split()
    )
    assert _cmd({"flash_attn": True, **QUIET}, "0.3.36")[:2] == ["--flash-attn", "on"]
    assert _cmd({"flash_attn": "off", **QUIET}, "0.3.16") == ["--verbosity", "3"]
    with pytest.raises(ConfigError, match="bare switch: on or off"):
        _cmd({"flash_attn": "auto"}, "0.3.16")
    with pytest.raises(ConfigError, match="expects one of on, off, auto"):
        _cmd({"flash_attn": "maybe"}, "0.3.36")


def test_switches_and_negations() -> None:
    assert _cmd({"cont_batching": False, "slots": False, **QUIET}, "0.3.36") == [
        "--no-cont-batching",
        "--verbosity",
        "3",
        "--no-slots",
    ]
    # 0.3.16's -nocb is a separate bare option; its kv_unified has no negation (off = absent)
    assert _cmd({"cont_batching": False, "kv_unified": False, **QUIET}, "0.3.16") == [
        "--no-cont-batching",
        "--verbosity",
        "3",
    ]
    with pytest.raises(ConfigError, match="is a switch"):
        _cmd({"kv_unified": "yes"}, "0.3.36")


def test_value_checks() -> None:
    with pytest.raises(ConfigError, match="valid: f32, f16, bf16, q8_0"):
        _cmd({"cache_type_k": "fp8"}, "0.3.36")
    with pytest.raises(ConfigError, match="expects >= 1, got 0"):
        _cmd({"parallel": 0}, "0.3.36")
    with pytest.raises(ConfigError, match="expects an integer"):
        _cmd({"ctx_size": "4k"}, "0.3.36")
    assert _cmd({"n_gpu_layers": "all"}, "0.3.36")[:2] == ["--n-gpu-layers", "all"]
    with pytest.raises(ConfigError, match="needs llama-cpp-python >= 0.3.30"):
        _cmd({"n_gpu_layers": "all"}, "0.3.16")


def test_defaults_yield_to_any_spelling_of_their_option() -> None:
    # --log-verbosity is the same option as --verbosity: the default must not add a second one
    assert _cmd({"log_verbosity": 5, "metrics": False}, "0.3.36") == ["--log-verbosity", "5"]
    assert "--metrics" not in _cmd({"metrics": False}, "0.3.36")
    assert _cmd({"metrics": None}, "0.3.36") == ["--metrics", "--verbosity", "4"]


def test_names_aliases_and_duplicates() -> None:
    assert canonical_field("gpu_layers") == "n_gpu_layers"
    assert canonical_field("draft_max") == "spec_draft_n_max"
    assert field_flag("draft_max", "0.3.16") == "--draft-max"
    assert field_flag("spec_draft_n_max", "0.3.36") == "--spec-draft-n-max"
    with pytest.raises(UnknownNameError, match="did you mean 'ctx_size'"):
        canonical_field("ctx_sise")
    with pytest.raises(ConfigError, match="same option as 'gpu_layers'"):
        _cmd({"gpu_layers": 1, "n_gpu_layers": 2}, "0.3.36")
    with pytest.raises(ConfigError, match="launcher's 'port' argument"):
        _cmd({"port": 1}, "0.3.36")
    # --draft-max still parses in 0.3.30+ but its handler rejects it ("has been removed")
    spec = option_spec("--draft-max", "0.3.36")
    assert spec is not None and spec.removed
    with pytest.raises(UnsupportedFlagError, match="versions that have it: 0.3.16"):
        _cmd({"draft": 4}, "0.3.36")


def test_versions() -> None:
    assert supported_versions() == ("0.3.16", "0.3.30", "0.3.36")
    assert PINNED_VERSION == supported_versions()[-1]
    with pytest.raises(ConfigError, match="supported: 0.3.16, 0.3.30, 0.3.36"):
        _cmd({}, "0.3.20")
    # parsed by autotune.versions: spaces and a leading v are fine; only the exact release counts
    assert catalog_version(" v0.3.36 ") == "0.3.36"
    for other in ("0.3.36.post1", "0.3.36+cu128", "0.3.36rc1", "latest", ""):
        with pytest.raises(ConfigError, match="unsupported llama-cpp-python version"):
            catalog_version(other)


def test_every_table_field_resolves_where_the_catalog_has_it() -> None:
    for name in FIELDS:
        for version in supported_versions():
            try:
                flag = field_flag(name, version)
            except UnsupportedFlagError:
                continue
            spec = option_spec(flag, version)
            assert spec is not None and not spec.removed, (name, version)
    assert field_flag("spec_type", "0.3.36") == "--spec-type"


def test_space_field_names_match_the_adapter() -> None:
    assert ENGINE_FIELDS["llamacpp"] == frozenset(known_fields())


def test_adapter_registration_and_protocol() -> None:
    adapter = get_adapter("llamacpp")
    assert isinstance(adapter, LlamaCppAdapter)
    explicit = LlamaCppAdapter(binary="/opt/llama-server")
    cmd = explicit.build_command({"parallel": 2}, model="/m.gguf", version="0.3.36", port=9001)
    assert cmd.argv[:7] == [*BASE[:6], "9001"]
    assert explicit.health_path() == "/health"
    assert "--spec-type" in explicit.flag_names("0.3.36")


# ---------------------------------------------------------------------------------------------
# The parser of common/arg.cpp, on an excerpt in llama.cpp's own style

EXCERPT = r"""
static std::initializer_list<enum llama_example> mmproj_examples = {
    LLAMA_EXAMPLE_MTMD,
    LLAMA_EXAMPLE_SERVER,
};
const std::vector<ggml_type> kv_cache_types = {
    GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q8_0, // a comment "with quotes"
};
    add_opt(common_arg(
        {"-c", "--ctx-size"}, "N",
        string_format("size of the prompt context (default: %d)", params.n_ctx),
        [](common_params & params, int value) {
            params.n_ctx = value;
        }
    ).set_env("LLAMA_ARG_CTX_SIZE"));
    add_opt(common_arg(
        {"--swa-full"},
        "use full-size SWA cache [(more info)](https://github.com/ggml-org/llama.cpp/pull/13194)",
        [](common_params & params) {
            params.swa_full = true;
        }
    ).set_env("LLAMA_ARG_SWA_FULL"));
    add_opt(common_arg(
        {"--dry-sequence-breaker"}, "STRING",
        string_format("breakers (%s)", std::accumulate(a, b, std::string("'"),
                [](const std::string& a, const std::string& b) { return a + b; }).c_str()),
        [](common_params & params, const std::string & value) {
            // '"' is not the end of a string here
            params.x = value;
        }
    ).set_sampling());
    add_opt(common_arg(
        {"-kvu", "--kv-unified"},
        {"-no-kvu", "--no-kv-unified"},
        "use single unified KV buffer",
        [](common_params & params, bool value) {
            params.kv_unified = value;
        }
    ).set_examples({LLAMA_EXAMPLE_SERVER, LLAMA_EXAMPLE_PERPLEXITY}));
    add_opt(common_arg({ "-fa", "--flash-attn" }, "[on|off|auto]",
                       "set Flash Attention use",
                       [](common_params & params, const std::string & value) {}));
    add_opt(common_arg(
        {"-p", "--prompt"}, "PROMPT",
        "prompt to start generation with",
        [](common_params & params, const std::string & value) {}
    ).set_excludes({LLAMA_EXAMPLE_SERVER}));
    add_opt(common_arg(
        {"--mmproj-auto"}, "X", "h",
        [](common_params & params, const std::string & value) {}
    ).set_examples(mmproj_examples));
    add_opt(common_arg(
        {"--perplexity"}, "h",
        [](common_params & params) {}
    ).set_examples({LLAMA_EXAMPLE_PERPLEXITY}));
    add_opt(common_arg(
        {"--draft", "--draft-max"}, "N",
        "the argument has been removed. use --spec-draft-n-max",
        [](common_params & /*params*/, int /*value*/) {
            arg_removed("use --spec-draft-n-max");
        }
    ).set_spec().set_examples({LLAMA_EXAMPLE_SERVER}));
"""


def test_arg_cpp_parser_on_an_excerpt() -> None:
    specs = {s.flags: s for s in parse_arg_cpp(EXCERPT)}
    assert specs[("-c", "--ctx-size")].kind == "v" and specs[("-c", "--ctx-size")].server
    assert specs[("--swa-full",)].kind == "b"  # the help's [(more info)](...) is no lambda
    assert specs[("--dry-sequence-breaker",)].kind == "v"  # a lambda inside the help is skipped
    kvu = specs[("-kvu", "--kv-unified")]
    assert kvu.kind == "n" and kvu.neg == ("-no-kvu", "--no-kv-unified") and kvu.server
    assert specs[("-fa", "--flash-attn")].choices == ("on", "off", "auto")
    assert not specs[("-p", "--prompt")].server  # excluded for the server
    assert specs[("--mmproj-auto",)].server  # named example set includes the server
    assert not specs[("--perplexity",)].server
    assert specs[("--draft", "--draft-max")].removed
    assert len(server_options(EXCERPT)) == 7
    assert kv_cache_types(EXCERPT) == ("f32", "f16", "q8_0")
    assert speculative_types('{"none", COMMON_SPECULATIVE_TYPE_NONE}, {"ngram-mod", X}') == (
        "none",
    )
    clean, masked = strip_comments('a // b "c"\n"d // e" /* f */ g')
    assert clean.split("\n")[1].startswith('"d // e"') and "f" not in clean
    assert len(clean) == len(masked) and '"      "' in masked


# ---------------------------------------------------------------------------------------------
# The catalog against the pinned sdist's source (kept in the build cache by the build script)


def _pinned_source(name: str) -> str:
    path = cache_root() / PINNED_VERSION / "share" / name
    if not path.is_file():
        pytest.skip(f"no {path}: run scripts/build-llama-server (llama.cpp source is not in git)")
    return path.read_text(encoding="utf-8")


@pytest.mark.llamacpp
def test_catalog_matches_the_pinned_arg_cpp() -> None:
    source = _pinned_source("arg.cpp")
    index = supported_versions().index(PINNED_VERSION)
    rows: dict[tuple[str, ...], tuple[str, bool, tuple[str, ...], tuple[str, ...]]] = {}
    for s in server_options(source):
        rows.setdefault(s.flags, (s.kind, s.removed, s.neg, s.choices))
    catalog = {
        spec.flags: (spec.kind, spec.removed, spec.neg, spec.choices)
        for specs in _catalog().values()
        for spec in specs
        if spec.first <= index <= spec.last
    }
    assert catalog == rows  # stale: rerun tests/engines/regen_llamacpp_catalog.py
    assert value_set(PINNED_VERSION, "cache_types") == kv_cache_types(source)
    # every flag the adapter's table emits for the pinned version is a live server option
    for name in FIELDS:
        flag = field_flag(name, PINNED_VERSION)
        spec = next(s for s in server_options(source) if flag in s.flags)
        assert not spec.removed, flag


@pytest.mark.llamacpp
def test_spec_types_match_the_pinned_speculative_cpp() -> None:
    path = cache_root() / PINNED_VERSION / "share" / "speculative.cpp"
    if not path.is_file():
        pytest.skip(f"no {path}: rebuild with the current scripts/build-llama-server")
    assert value_set(PINNED_VERSION, "spec_types") == speculative_types(Path(path).read_text())
