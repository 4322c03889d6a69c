"""The engine release's own block-FP8 kernel, loaded from its real wheel and run under Triton's
interpreter with its config lookup fed (kernels_tuning/engine_kernel.py, engine_standalone.py).

Wheels come from the project's wheel cache ($AUTOTUNE_WHEEL_CACHE or ~/.cache/autotune/wheels),
downloaded once; without a registry these tests skip."""

from __future__ import annotations

import zipfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from autotune.engines.kernel_facts import facts_for
from autotune.engines.kernel_source import definitions_fingerprint
from autotune.errors import ConfigError
from kernels_tuning import engine_kernel as E
from kernels_tuning.engine_kernel import honoured_config
from kernels_tuning.engine_standalone import standalone_source
from tests.wheels import engine_wheel_or_skip, nightly_site


@cache
def _source(version: str) -> str:
    facts = facts_for("sglang", version)
    with zipfile.ZipFile(engine_wheel_or_skip("sglang", version)) as zf:
        return zf.read(facts.kernel_module).decode()


def _kernel(version: str, cache_dir: Path) -> E.EngineKernel:
    """The release's kernel as `load_engine_kernel` builds it from the wheel (cache primed)."""
    facts = facts_for("sglang", version)
    src = cache_dir / f"sglang-{version}" / Path(facts.kernel_module).name
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(_source(version))
    return E.load_engine_kernel("sglang", version, allow_import=False, cache=cache_dir)


def _problem(m: int = 3, n: int = 256, k: int = 512) -> dict[str, Any]:
    import torch

    from kernels_tuning.kernels import fp8_block as F

    g = torch.Generator().manual_seed(0)
    w = torch.randn((n, k), generator=g) * 0.02
    b, bs = F.block_quant_fp8(w)
    a, a_s = F.per_token_group_quant_fp8(torch.randn((m, k), generator=g))
    return {"A": a, "B": b, "As": a_s, "Bs": bs, "ref": F.reference(a, b, a_s, bs)}


PLAIN = dict(
    BLOCK_SIZE_M=16, BLOCK_SIZE_N=64, BLOCK_SIZE_K=128, GROUP_SIZE_M=1, num_warps=4, num_stages=3
)


class _Counting:
    """Stands in for a @triton.jit kernel global: counts launches, then launches it."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.launches = 0

    def __getitem__(self, grid: Any) -> Any:
        self.launches += 1
        return self.fn[grid]


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_engine_kernel_from_wheel_runs_fed_configs(
    version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from kernels_tuning.bench import check_output

    ek = _kernel(version, tmp_path)
    assert ek.origin == "wheel" and ek.facts.version == version
    # what runs is that release's code: the rebuilt module holds its kernels verbatim
    text = Path(ek.module.__file__ or "").read_text()
    assert all(f"def {name}(" in text for name in ek.facts.jit_kernels)
    p = _problem()
    lookup_before = getattr(ek.module, ek.facts.lookup_function)
    for cfg in (None, PLAIN):
        out = ek.run(p["A"], p["B"], p["As"], p["Bs"], cfg, out_dtype=torch.float16, poison=True)
        assert check_output(out, p["ref"]).ok, cfg
    assert getattr(ek.module, ek.facts.lookup_function) is lookup_before  # restored


def test_a_nightly_runs_its_own_installed_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`kernels tune --engine sglang --engine-version BUILD` where a nightly is installed: its
    facts and its kernel are read from the installed source (kernel_derive.facts_of), and the
    kernel runs the configs it is fed."""
    import torch

    from kernels_tuning.bench import check_output

    build = "0.5.23.post1.dev4+g0123abc"
    monkeypatch.syspath_prepend(str(nightly_site("sglang", "0.5.23", build, tmp_path / "site")))
    ek = E.load_engine_kernel("sglang", build, allow_import=False, cache=tmp_path / "cache")
    assert ek.origin == "installed source" and ek.facts.version == build
    assert ek.facts.kernel_fingerprint == facts_for("sglang", "0.5.23").kernel_fingerprint
    p = _problem()
    out = ek.run(p["A"], p["B"], p["As"], p["Bs"], PLAIN, out_dtype=torch.float16, poison=True)
    assert check_output(out, p["ref"]).ok


def test_a_nightly_in_another_environment_runs_from_its_source(tmp_path: Path) -> None:
    """`kernels tune --engine sglang --site-packages DIR`: a build installed in another
    environment (not on this interpreter's path) is read there: its facts and kernel from its
    source, never imported; a folder without the kernel module is refused by name."""
    import torch

    from kernels_tuning.bench import check_output

    build = "0.5.23.post1.dev4+g0123abc"
    site = nightly_site("sglang", "0.5.23", build, tmp_path / "site")
    ek = E.load_engine_kernel("sglang", build, site=site, cache=tmp_path / "cache")
    assert ek.origin == "installed source" and ek.facts.version == build
    assert ek.source_path == site / ek.facts.kernel_module
    p = _problem()
    out = ek.run(p["A"], p["B"], p["As"], p["Bs"], PLAIN, out_dtype=torch.float16, poison=True)
    assert check_output(out, p["ref"]).ok
    (site / ek.facts.kernel_module).unlink()
    with pytest.raises(ConfigError, match="has no .*: not an install of sglang 0.5.23"):
        E.load_engine_kernel("sglang", "0.5.23", site=site, cache=tmp_path / "cache")


def test_sm90_keys_run_the_hopper_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """0.5.23 on sm_90 (forced: no GPU under the interpreter): SWAP_AB + SPLIT_K entries launch
    the split-K Hopper kernel and its reduce, and the result passes the gate."""
    import torch

    from kernels_tuning.bench import check_output

    monkeypatch.setenv("AUTOTUNE_ENGINE_ARCH", "sm_90")
    ek = _kernel("0.5.23", tmp_path)
    hopper = _Counting(ek.module._w8a8_block_fp8_matmul_hopper)
    monkeypatch.setattr(ek.module, "_w8a8_block_fp8_matmul_hopper", hopper)
    p = _problem()
    feed = honoured_config({**PLAIN, "SWAP_AB": 1, "SPLIT_K": 2}, ek.facts, "sm_90")
    assert feed["SWAP_AB"] is True and feed["SPLIT_K"] == 2
    out = ek.run(p["A"], p["B"], p["As"], p["Bs"], feed, out_dtype=torch.float16, poison=True)
    assert hopper.launches == 1
    assert check_output(out, p["ref"]).ok


def test_poison_makes_an_unwritten_output_fail_the_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from kernels_tuning.bench import check_output

    ek = _kernel("0.5.17", tmp_path)

    class _Nothing:
        def __getitem__(self, grid: Any) -> Any:
            return lambda *a, **kw: None  # a "kernel" that writes nothing

    monkeypatch.setattr(ek.module, "_w8a8_block_fp8_matmul", _Nothing())
    p = _problem()
    out = ek.run(p["A"], p["B"], p["As"], p["Bs"], PLAIN, out_dtype=torch.float16, poison=True)
    assert not check_output(out, p["ref"]).ok


def test_fingerprint_mismatch_and_unknown_helpers_are_refused() -> None:
    facts = facts_for("sglang", "0.5.23")
    src = _source("0.5.23")
    patched = src.replace("accumulator.to(tl.bfloat16)", "accumulator.to(tl.float16)", 1)
    assert patched != src
    with pytest.raises(ConfigError, match="differs from sglang 0.5.23"):
        standalone_source(facts, patched, "patched.py")
    # a launcher that reaches an engine helper no stand-in covers is named, not guessed
    at = src.index(f"def {facts.kernel_function}(")
    grown = src[:at] + src[at:].replace(
        "    M, N, K, C = prepare_block_fp8_matmul_inputs(",
        "    new_engine_helper()\n    M, N, K, C = prepare_block_fp8_matmul_inputs(",
        1,
    )
    fp = definitions_fingerprint(grown, [*facts.jit_kernels, facts.kernel_function])
    grown_facts = type(facts)(**{**facts.__dict__, "kernel_fingerprint": fp})
    with pytest.raises(ConfigError, match="new_engine_helper"):
        standalone_source(grown_facts, grown, "grown.py")


def test_honoured_config_per_release_and_arch() -> None:
    f17 = facts_for("sglang", "0.5.17")
    f23 = facts_for("sglang", "0.5.23")
    swapped = {**PLAIN, "SWAP_AB": 1, "SPLIT_K": 4}
    with pytest.raises(ConfigError, match="does not honour"):
        honoured_config(swapped, f17, "sm_90")
    with pytest.raises(ConfigError, match="does not honour"):
        honoured_config(swapped, f23, "sm_80")
    # off-default values of keys a plain kernel lacks are left out: the plain kernel refuses them
    assert honoured_config({**PLAIN, "SWAP_AB": 0, "SPLIT_K": 1}, f23, "sm_90") == PLAIN
    assert honoured_config(swapped, f23, "sm_90") == {**PLAIN, "SWAP_AB": True, "SPLIT_K": 4}


def test_load_without_wheel_or_install_says_what_to_do(tmp_path: Path) -> None:
    """No installed engine, no cached module, and a wheel that cannot be had: a clear error."""
    import os

    env = dict(os.environ)
    os.environ["AUTOTUNE_WHEEL_CACHE"] = str(tmp_path / "wheels")
    os.environ["PIP_INDEX_URL"] = "http://127.0.0.1:9/simple"  # nothing listens there
    os.environ["PIP_NO_INDEX"] = "1"
    try:
        with pytest.raises(ConfigError, match="is not installed here"):
            E.load_engine_kernel("sglang", "0.5.19", allow_import=False, cache=tmp_path / "ek")
    finally:
        os.environ.clear()
        os.environ.update(env)


def test_vllm_launcher_from_wheel_runs_fed_configs(tmp_path: Path) -> None:
    """vLLM's own launcher (w8a8_triton_block_scaled_mm) rebuilt from its wheel: its
    `current_platform` and `envs` answered by stand-ins, its lookup fed."""
    import torch

    from kernels_tuning.bench import check_output

    engine_wheel_or_skip("vllm", "0.32.0")
    ek = E.load_engine_kernel("vllm", "0.32.0", allow_import=False, cache=tmp_path)
    assert ek.facts.kernel_function == "w8a8_triton_block_scaled_mm"
    p = _problem()
    for cfg in (None, PLAIN):
        out = ek.run(p["A"], p["B"], p["As"], p["Bs"], cfg, out_dtype=torch.float16, poison=True)
        assert check_output(out, p["ref"]).ok, cfg
