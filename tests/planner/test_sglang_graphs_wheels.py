"""planner.sglang_graphs against the releases themselves: each case reads the release's PyPI
wheel (tests.wheels: downloaded once, a skip without a registry) and runs the code it ships,
the piecewise (prefill) graph's sizes and the default mem-fraction block, on the same inputs."""

from __future__ import annotations

import ast
import itertools
import zipfile
from types import SimpleNamespace
from typing import Any

import pytest

from autotune.planner import rules
from autotune.planner import sglang_graphs as g
from tests.wheels import engine_wheel_or_skip

PIECEWISE = ("0.5.10", "0.5.11", "0.5.12", "0.5.13", "0.5.14")
GPUS_MIB = (24564, 46068, 81559, 97887, 143771, 183359)


def _source(version: str, path: str) -> str:
    with zipfile.ZipFile(engine_wheel_or_skip("sglang", version)) as z:
        return z.read(path).decode()


def _function(source: str, name: str) -> ast.FunctionDef:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError(f"no {name}: the release changed its code")


def _sizes_fn(version: str) -> Any:
    """The release's own generator of captured token counts, as a function of the maximum."""
    src = _source(version, "sglang/srt/server_args.py")
    if version == "0.5.14":
        fn = _function(src, "_generate_prefill_cuda_graph_batch_sizes")
    else:
        fn = _function(src, "_generate_piecewise_cuda_graph_tokens")
    ns: dict[str, Any] = {}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), version, "exec"), ns)
    method = ns[fn.name]
    if version == "0.5.14":
        return lambda top: method(None, top)
    return lambda top: method(SimpleNamespace(piecewise_cuda_graph_max_tokens=top))


@pytest.mark.parametrize("version", PIECEWISE)
def test_capture_sizes_are_the_releases(version: str) -> None:
    sizes = _sizes_fn(version)
    for top in (512, 2048, 4096, 8192, 16384, 20000):
        assert g.capture_sizes(top) == sizes(top), (version, top)


def _mem_block(version: str) -> ast.If:
    """`if self.mem_fraction_static is None:` of the release's _handle_gpu_memory_settings."""
    fn = _function(_source(version, "sglang/srt/server_args.py"), "_handle_gpu_memory_settings")
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and "mem_fraction_static is None" in ast.unparse(node.test):
            return node
    raise AssertionError(f"{version}: no default mem-fraction block")


def _release_mfs(
    version: str, gpu_mib: int, cps: int, max_bs: int, *, mla: bool, on: bool
) -> float:
    """The release's default mem_fraction_static, its block run on a text model at TP 1 with the
    piecewise (prefill) graph on or off and the sizes its own generator gives."""
    sizes = _sizes_fn(version)(2048 if mla else cps)
    model = SimpleNamespace(is_multimodal=False)
    this = SimpleNamespace(
        mem_fraction_static=None,
        chunked_prefill_size=cps,
        max_prefill_tokens=16384,
        cuda_graph_max_bs=max_bs,
        tp_size=1,
        pp_size=1,
        dp_size=1,
        enable_dp_attention=False,
        speculative_algorithm=None,
        language_only=False,
        disable_piecewise_cuda_graph=not on,
        piecewise_cuda_graph_tokens=sizes,
        use_mla_backend=lambda: mla,
        get_model_config=lambda: model,
    )
    backend = SimpleNamespace(DISABLED="disabled")
    ns: dict[str, Any] = {
        "self": this,
        "gpu_mem": gpu_mib,
        "Backend": backend,
        "decode_cuda_graph_config": SimpleNamespace(max_bs=max_bs),
        "prefill_cuda_graph_config": SimpleNamespace(
            backend="tc_piecewise" if on else "disabled", bs=sizes
        ),
    }
    block = _mem_block(version)
    exec(compile(ast.Module(body=[block], type_ignores=[]), version, "exec"), ns)
    return float(this.mem_fraction_static)


@pytest.mark.parametrize("version", PIECEWISE)
def test_default_mem_fraction_with_the_prefill_graph_is_the_releases(version: str) -> None:
    """rules.resolve's default mem_fraction_static, prefill-graph reserve included, equals the
    release's own block on every GPU size, for an MLA and a non-MLA model, graph on and off."""
    v = rules.planning_version(version)
    for gpu_mib, mla, on in itertools.product(GPUS_MIB, (False, True), (True, False)):
        cps, max_bs = rules.gpu_size_defaults(gpu_mib, 1, v)
        config = {} if on else {"disable_piecewise_cuda_graph": True}
        if on is False and version == "0.5.14":
            config = {"disable_prefill_cuda_graph": True}
        r = rules.resolve(
            config,
            gpu_mem_mib=gpu_mib,
            tp=1,
            hybrid=False,
            version=version,
            context_default=32768,
            vision_factor=None,
            architecture="GptOssForCausalLM",
            mla=mla,
        )
        want = _release_mfs(version, gpu_mib, cps, max_bs, mla=mla, on=on)
        assert r.mem_fraction_static == pytest.approx(want), (version, gpu_mib, mla, on)


@pytest.mark.parametrize("version", PIECEWISE)
def test_disabled_architectures_are_the_releases(version: str) -> None:
    src = _source(version, "sglang/srt/configs/model_config.py")
    for node in ast.walk(ast.parse(src)):
        if (
            isinstance(node, ast.Assign)
            and ast.unparse(node.targets[0]) == "piecewise_cuda_graph_disabled_model_archs"
        ):
            listed = set(ast.literal_eval(node.value))
            break
    else:
        raise AssertionError(f"{version}: no disabled-architecture list")
    assert listed == g.disabled_archs(rules.planning_version(version))
    # DeepSeek NSA (DSA) models joined the disabled models beside the list until 0.5.13.
    assert ("or is_deepseek_nsa(self.hf_text_config)" in src) is (version < "0.5.13")


@pytest.mark.parametrize("version", PIECEWISE[:4])
def test_only_0_5_10_turns_it_off_for_speculative_decoding(version: str) -> None:
    fn = _function(_source(version, "sglang/srt/server_args.py"), "_handle_piecewise_cuda_graph")
    assert ("self.speculative_algorithm is not None" in ast.unparse(fn)) is (version == "0.5.10")
    off = g.prefill_graph_reserve_mib(
        {"speculative_algorithm": "EAGLE"}, rules.planning_version(version), 8192, g.GraphFacts()
    )
    assert (off == 0.0) is (version == "0.5.10")


def test_the_default_switched_on_in_0_5_10_and_to_breakable_in_0_5_15() -> None:
    """0.5.9 needs --enable-piecewise-cuda-graph (nothing reserved); 0.5.10 .. 0.5.13 have it on
    unless --disable-piecewise-cuda-graph; 0.5.14's prefill graph defaults to tc_piecewise and
    0.5.15's to breakable on CUDA (not modelled: no reserve)."""
    assert "enable_piecewise_cuda_graph: bool = False" in _source(
        "0.5.9", "sglang/srt/server_args.py"
    )
    for version in PIECEWISE[:4]:
        src = _source(version, "sglang/srt/server_args.py")
        assert "disable_piecewise_cuda_graph: bool = False" in src, version
    cfg = "sglang/srt/model_executor/cuda_graph_config.py"
    assert "PhaseConfig(backend=Backend.TC_PIECEWISE)" in " ".join(_source("0.5.14", cfg).split())
    assert "return Backend.BREAKABLE if is_cuda()" in _source("0.5.15", cfg)
    for version in ("0.5.9", "0.5.15"):
        v = rules.planning_version(version)
        assert g.prefill_graph_reserve_mib({}, v, 8192, g.GraphFacts()) == 0.0
