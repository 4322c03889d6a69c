"""The version endpoint each adapter asks a ready engine (sweep/trial_serving.served_version),
checked in the catalogued releases' own server code (the oldest and newest of each engine;
AUTOTUNE_SERVED_VERSION_ALL=1: every one): a GET route of that path whose handler answers a
mapping with a "version" key."""

from __future__ import annotations

import ast
import os
import warnings
import zipfile

import pytest

from autotune.engines import get_adapter
from autotune.engines.sglang.flags import SUPPORTED_VERSIONS
from autotune.engines.vllm.releases import supported_versions
from tests.wheels import engine_wheel_or_skip

ALL = [("sglang", v) for v in SUPPORTED_VERSIONS] + [("vllm", v) for v in supported_versions()]
ENDS = {
    ("sglang", SUPPORTED_VERSIONS[0]),
    ("sglang", SUPPORTED_VERSIONS[-1]),
    ("vllm", supported_versions()[0]),
    ("vllm", supported_versions()[-1]),
}


def _answers_version(handler: ast.AST) -> bool:
    return any(
        isinstance(node, ast.Dict)
        and any(isinstance(k, ast.Constant) and k.value == "version" for k in node.keys)
        for node in ast.walk(handler)
    )


def _get_routes(source: str, path: str) -> list[ast.AsyncFunctionDef | ast.FunctionDef]:
    """Handlers decorated `@<app|router>.get(path)`."""
    out = []
    with warnings.catch_warnings():  # the engines' own invalid escapes are not ours to report
        warnings.simplefilter("ignore", (SyntaxWarning, DeprecationWarning))
        tree = ast.parse(source)
    for node in ast.walk(tree):
        if not isinstance(node, (ast.AsyncFunctionDef, ast.FunctionDef)):
            continue
        for dec in node.decorator_list:
            if (
                isinstance(dec, ast.Call)
                and isinstance(dec.func, ast.Attribute)
                and dec.func.attr == "get"
                and dec.args
                and isinstance(dec.args[0], ast.Constant)
                and dec.args[0].value == path
            ):
                out.append(node)
    return out


@pytest.mark.parametrize(("engine", "version"), ALL, ids=[f"{e}-{v}" for e, v in ALL])
def test_the_version_endpoint_is_the_releases_own(engine: str, version: str) -> None:
    if (engine, version) not in ENDS and not os.environ.get("AUTOTUNE_SERVED_VERSION_ALL"):
        pytest.skip("set AUTOTUNE_SERVED_VERSION_ALL=1 to check every release")
    path = get_adapter(engine).version_path()
    assert path is not None
    handlers = []
    with zipfile.ZipFile(engine_wheel_or_skip(engine, version)) as zf:
        for name in zf.namelist():
            if name.startswith(f"{engine}/") and "entrypoints" in name and name.endswith(".py"):
                handlers += _get_routes(zf.read(name).decode(), path)
    assert handlers, f"{engine} {version} serves no GET {path}"
    assert any(_answers_version(h) for h in handlers), f"GET {path} answers no version"


def test_llama_server_states_no_release() -> None:
    assert get_adapter("llamacpp").version_path() is None
