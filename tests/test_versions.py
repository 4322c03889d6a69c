"""autotune.versions: the one version parser (packaging), and the places that use it agree:
`plan`, the SGLang and vLLM flag catalogs, the space rules and the launch script."""

from __future__ import annotations

import json

import pytest
from packaging.version import Version
from typer.testing import CliRunner

from autotune.engines.sglang.flags import parse_version as sglang_version
from autotune.engines.vllm.flags import parse_version as vllm_version
from autotune.errors import ConfigError
from autotune.planner.rules import parse_version as planner_version
from autotune.space.rules import is_version as space_is_version
from autotune.versions import base_release, is_version, parse_version, release3, try_version


@pytest.mark.parametrize(
    ("text", "release", "base"),
    [
        ("0.5.17", (0, 5, 17), "0.5.17"),
        ("0.5.15.post1", (0, 5, 15), "0.5.15"),
        (" v0.11.0 ", (0, 11, 0), "0.11.0"),
        ("0.20.2+cu128", (0, 20, 2), "0.20.2"),
        ("0.10.1.1", (0, 10, 1), "0.10.1.1"),
        ("7", (7, 0, 0), "7"),
    ],
)
def test_parse(text: str, release: tuple[int, int, int], base: str) -> None:
    v = parse_version(text)
    assert isinstance(v, Version)
    assert release3(v) == release and base_release(v) == base
    assert is_version(text) and try_version(text) == v
    assert parse_version(v) is v


@pytest.mark.parametrize("bad", ["latest", "0.5.x", "", "0..5", None, 3.5j])
def test_invalid_names_field_and_forms(bad: object) -> None:
    with pytest.raises(ConfigError) as err:
        parse_version(bad, field="engine.version", source="spec.yaml")  # type: ignore[arg-type]
    text = str(err.value)
    assert text.startswith("spec.yaml: engine.version: ")
    assert "is not a version number" in text and "0.5.15.post1" in text
    assert try_version(bad) is None and not is_version(bad)


def test_ordering_is_pep440() -> None:
    assert parse_version("0.5.15.post1") > parse_version("0.5.15")
    assert parse_version("0.5.16rc1") < parse_version("0.5.16")
    assert parse_version("0.5.9") < parse_version("0.5.10")


@pytest.mark.parametrize(
    "text", ["0.5.15.post1", "0.5.17", "v0.5.23", "0.5.17+cu128", "0.5.17rc1", "0.5.17.dev3"]
)
def test_sglang_parsers_agree(text: str) -> None:
    """The flag code and the planner accept the same SGLang versions (the planner refused
    post releases before they shared a parser)."""
    assert planner_version(text) == sglang_version(text) == release3(parse_version(text))
    assert space_is_version(text)


@pytest.mark.parametrize(
    "bad", ["0.5.8", "0.5.24", "0.6.0", "0.5", "0.5.24rc1", "0.5.x", "0.5.17.1"]
)
def test_sglang_parsers_refuse_alike(bad: str) -> None:
    for parse in (planner_version, sglang_version):
        with pytest.raises(ConfigError, match="--engine-version.*0.5.9 to 0.5.23"):
            parse(bad)


def test_vllm_catalog_uses_the_base_release() -> None:
    assert vllm_version("0.11.0.post2") == "0.11.0"
    assert vllm_version("0.11.0rc1") == "0.11.0"  # autotune.engines.builds
    with pytest.raises(ConfigError, match="--engine-version"):
        vllm_version("0.35.0rc1")


def test_plan_accepts_a_post_release() -> None:
    from autotune.cli import app

    runner = CliRunner()
    args = ["plan", "--model", "qwen3.8-27b-awq-int4", "--gpu", "h100-80g", "--json"]
    done = runner.invoke(app, [*args, "--engine-version", "0.5.15.post1"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["engine_version"] == "0.5.15.post1"
    done = runner.invoke(app, [*args, "--engine-version", "0.5.x"])
    assert done.exit_code != 0 and "0.5.9 to 0.5.23" in str(done.exception)


def test_cli_version() -> None:
    from autotune.cli import app, package_version

    done = CliRunner().invoke(app, ["--version"])
    assert done.exit_code == 0
    assert done.output.strip() == f"autotune {package_version()}"
    assert is_version(package_version())
