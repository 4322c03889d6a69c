"""The vLLM AWQ plugin against the real `awq_triton.py` and `awq_gemm` call site of the vLLM 0.32.0
wheel, loaded under a stub `vllm` package (autotune/testing/vllm_awq.py) and run on CPU under
Triton's interpreter: N = K = 256, M <= 4, fp16, a tuned file for that shape in a temporary
$AUTOTUNE_KERNEL_CONFIG_DIR (device name `CPU`).

The wheel comes from $AUTOTUNE_WHEEL_CACHE or ~/.cache/autotune/wheels (pip download otherwise);
the tests skip only when PyPI cannot be reached.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import warnings
from collections.abc import Iterator
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from autotune.plugins import awq_gate
from autotune.plugins import vllm_awq as P
from autotune.testing import vllm_awq as stub
from kernels_tuning import output as O
from kernels_tuning.bench import CheckResult, check_output
from kernels_tuning.kernels import int4_w4a16 as W
from kernels_tuning.output import ProvenanceWarning
from kernels_tuning.shim import ENV_DIR
from kernels_tuning.space import KernelConfig
from tests.wheels import engine_wheel_or_skip

ROOT = Path(__file__).resolve().parents[2]
VERSION = "0.32.0"
N = K = 256
# M 1-2 -> SMALL (split-K 2, atomic sum); M >= 3 -> LARGE (nearest key 4).
SMALL = KernelConfig(16, 128, 64, 1, 4, 3, SPLIT_K=2, ATOMIC_REDUCE=1)
LARGE = KernelConfig(16, 64, 128, 1, 4, 3)
interpreter = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="runs the kernels under the interpreter"
)
pytestmark = pytest.mark.filterwarnings(
    f"ignore::{ProvenanceWarning.__module__}.ProvenanceWarning"
)


def _wheel() -> Path:
    return engine_wheel_or_skip("vllm", VERSION)


def _write_table(d: Path, table: dict[int, KernelConfig], n: int = N, k: int = K) -> None:
    O.merge_write(
        d / "autotune" / O.int4_filename(n, k, "CPU"), {m: c.as_dict() for m, c in table.items()}
    )


@pytest.fixture
def vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The wheel's awq_triton module (stub package), plugin state clean, VLLM_USE_TRITON_AWQ=1,
    a tuned file for N=K=256 on `CPU`, the up-front gate limited to M <= 4."""
    saved_path = list(sys.path)
    monkeypatch.setenv("VLLM_USE_TRITON_AWQ", "1")
    monkeypatch.delenv(P.ENV, raising=False)
    cfg_dir = tmp_path / "configs"
    _write_table(cfg_dir, {1: SMALL, 4: LARGE})
    monkeypatch.setenv(ENV_DIR, str(cfg_dir))
    monkeypatch.setattr(P, "PREGATE_MAX_M", 4)
    P.reset()
    mod = stub.load_awq_triton(_wheel(), tmp_path / "site")
    yield mod
    stub.unload()
    sys.path[:] = saved_path
    P.reset()


def _weights(seed: int = 1, k: int = K, n: int = N) -> tuple[Any, Any, Any]:
    gen = torch.Generator().manual_seed(seed)
    return awq_gate.synthetic_weights(n, k, torch.float16, "cpu", gen)


def _x(m: int, seed: int = 2) -> Any:
    return torch.randn((m, K), generator=torch.Generator().manual_seed(seed + m)).half()


def _ref(x: Any, qw: Any, qz: Any, s: Any) -> Any:
    return W.reference(x, qw, qz, s)


class Spy:
    """Counts our kernel's launches outside the gate (the gate passes `out=`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.routed: list[KernelConfig] = []
        real = W.w4a16_matmul

        def spy(*args: Any, **kw: Any) -> Any:
            if kw.get("out") is None:
                self.routed.append(kw["config"])
            return real(*args, **kw)

        monkeypatch.setattr(W, "w4a16_matmul", spy)


class VllmSpy:
    """Wraps vLLM's function before the plugin does: its calls are the fallbacks."""

    def __init__(self, vllm: ModuleType) -> None:
        self.real = vllm.awq_gemm_triton
        self.outputs: list[Any] = []

        def awq_gemm_triton(*args: Any) -> Any:
            self.outputs.append(self.real(*args))
            return self.outputs[-1]

        vllm.awq_gemm_triton = awq_gemm_triton


def _ops() -> Any:
    import vllm._custom_ops as ops  # the stub's copy of vLLM's own call site

    return ops


# ------------------------------------------------------------------------------------------------
# Registration


def test_register_patches_only_when_enabled(
    vllm: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = vllm.awq_gemm_triton
    monkeypatch.setattr(torch.version, "hip", None)
    for use, flag in (("0", None), ("1", "0"), ("1", "off"), ("1", "OFF")):
        monkeypatch.setenv("VLLM_USE_TRITON_AWQ", use)
        if flag is None:
            monkeypatch.delenv(P.ENV, raising=False)
        else:
            monkeypatch.setenv(P.ENV, flag)
        P.register()
        assert vllm.awq_gemm_triton is original, (use, flag)
    monkeypatch.delenv(P.ENV)
    monkeypatch.setenv("VLLM_USE_TRITON_AWQ", "1")
    P.register()
    wrapper = vllm.awq_gemm_triton
    assert getattr(wrapper, P.ORIGINAL_ATTR) is original
    P.register()  # vLLM may load plugins more than once per process: never wrap twice
    assert vllm.awq_gemm_triton is wrapper
    P.unpatch(vllm)
    assert vllm.awq_gemm_triton is original


def test_rocm_enables_it_without_the_variable(
    vllm: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VLLM_USE_TRITON_AWQ")
    monkeypatch.setattr(torch.version, "hip", "6.4.0")
    assert P.triton_awq_in_use()
    P.register()
    assert hasattr(vllm.awq_gemm_triton, P.ORIGINAL_ATTR)
    monkeypatch.setenv("VLLM_USE_TRITON_AWQ", "yes")  # vLLM's int() would raise; we say off
    monkeypatch.setattr(torch.version, "hip", None)
    assert not P.triton_awq_in_use()


def test_every_vllm_module_holding_the_function_is_patched(vllm: ModuleType) -> None:
    holder = ModuleType("vllm.some_caller")
    holder.awq_gemm_triton = vllm.awq_gemm_triton  # type: ignore[attr-defined]
    other = ModuleType("not_vllm")
    other.awq_gemm_triton = vllm.awq_gemm_triton  # type: ignore[attr-defined]
    sys.modules["vllm.some_caller"] = holder
    sys.modules["not_vllm"] = other
    try:
        P.register()
        assert holder.awq_gemm_triton is vllm.awq_gemm_triton  # type: ignore[attr-defined]
        assert hasattr(holder.awq_gemm_triton, P.ORIGINAL_ATTR)  # type: ignore[attr-defined]
        assert not hasattr(other.awq_gemm_triton, P.ORIGINAL_ATTR)  # type: ignore[attr-defined]
    finally:
        del sys.modules["not_vllm"]


def test_register_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_USE_TRITON_AWQ", "1")
    stub.unload()
    monkeypatch.setattr(P, "AWQ_TRITON_MODULE", "vllm_absent_for_this_test.awq_triton")
    with pytest.warns(P.AwqPluginWarning, match="not active: ModuleNotFoundError"):
        P.register()


def test_entry_point_is_declared_and_resolves() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    group = meta["entry-points"]["vllm.general_plugins"]
    assert group == {"autotune_awq": "autotune.plugins.vllm_awq:register"}
    assert "vllm" in meta["optional-dependencies"]
    ep = EntryPoint("autotune_awq", group["autotune_awq"], "vllm.general_plugins")
    assert ep.load() is P.register
    installed = [e for e in entry_points(group="vllm.general_plugins") if e.name == "autotune_awq"]
    if installed:  # after `pip install -e .` with this pyproject
        assert installed[0].value == group["autotune_awq"]
    # vLLM imports every plugin in every process: ours must not import torch or triton until
    # register() finds the AWQ Triton path on.
    code = (
        "import sys, os; os.environ['AUTOTUNE_VLLM_AWQ'] = '0'; "
        "import autotune.plugins.vllm_awq as p; p.register(); "
        "print(sorted(m for m in ('torch', 'triton', 'vllm') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------------------------------------
# Routing


def test_handles_only_what_it_can_serve_identically() -> None:
    qw, qz, s = _weights()
    x = _x(2)
    assert P.handles(x, qw, s, qz) == (os.environ.get("TRITON_INTERPRET") == "1")
    qz64 = torch.zeros((K // 64, N // 8), dtype=torch.int32)
    s64 = torch.ones((K // 64, N), dtype=torch.float16)
    assert not P.handles(x, qw, s64, qz64)  # group size 64
    assert not P.handles(x.float(), qw, s.float(), qz)  # fp32
    assert not P.handles(x, qw, s.float(), qz)  # scales in another dtype than the input
    assert not P.handles(torch.randn((K, 4)).half().t(), qw, s, qz)  # non-contiguous input
    assert not P.handles(x[None], qw, s, qz)  # 3-D input
    assert not P.handles(x, qw.t().contiguous().t(), s, qz)  # column-major qweight

    calls: list[tuple[Any, ...]] = []

    def fake_original(*args: Any) -> str:
        calls.append(args)
        return "vllm"

    wrapper = P.make_wrapper(fake_original)
    assert wrapper(x, qw, s64, qz64, 8) == "vllm"
    assert calls[0][4:] == (8, 32, 32, 32)  # its own defaults, unchanged


def test_no_tuned_file_for_this_gpu_calls_vllm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_DIR, str(tmp_path))  # empty; the shipped files are for NVIDIA_H200
    P.reset()
    gated: list[Any] = []
    monkeypatch.setattr(awq_gate, "run_gate", lambda *a, **k: gated.append(a))
    wrapper = P.make_wrapper(lambda *args: "vllm")
    qw, qz, s = _weights()
    if P.handles(_x(1), qw, s, qz):
        assert wrapper(_x(1), qw, s, qz, 8) == "vllm"
    assert not gated and P.STATE.config(N, K, torch.device("cpu"), 1) is None
    P.reset()


def test_nearest_m_lookup_and_the_up_front_gate(
    vllm: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    gated: list[tuple[KernelConfig, list[int]]] = []

    def fake_gate(cfg: KernelConfig, n: int, k: int, ms: list[int], *rest: Any) -> CheckResult:
        gated.append((cfg, list(ms)))
        return CheckResult(True, 0.0)

    monkeypatch.setattr(awq_gate, "run_gate", fake_gate)
    qw = torch.zeros((K, N // 8), dtype=torch.int32)
    cpu = torch.device("cpu")
    for m, want in ((1, SMALL), (2, SMALL), (3, LARGE), (4, LARGE), (9, LARGE), (300, LARGE)):
        assert P.STATE.route(torch.zeros((m, K), dtype=torch.float16), qw) == want, m
    # First call: every config of M <= PREGATE_MAX_M (4 here), at its smallest and largest M.
    assert gated == [(SMALL, [1, 2]), (LARGE, [3, 4])]
    assert P.STATE.config(N, K, cpu, 2) == SMALL
    monkeypatch.setenv(P.ENV, P.DETERMINISTIC)
    P.reset()
    assert P.STATE.config(N, K, cpu, 1) == SMALL.with_(ATOMIC_REDUCE=0)


@interpreter
def test_routed_calls_pass_the_gate_against_reference_and_vllm(
    vllm: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = vllm.awq_gemm_triton
    P.register()
    spy = Spy(monkeypatch)
    ops = _ops()
    qw, qz, s = _weights()
    for m in (1, 2, 3, 4):
        x = _x(m)
        y = ops.awq_gemm(x, qw, s, qz, 8)  # vLLM's call site, split_k_iters = pack factor 8
        assert y.dtype == torch.float16 and tuple(y.shape) == (m, N)
        chk = check_output(y, _ref(x, qw, qz, s))
        assert chk.ok, (m, chk)
        if m == 3:  # one comparison: vLLM's kernel takes ~2 s per call in the interpreter
            theirs = original(x, qw, s, qz, 8)
            assert theirs.dtype == y.dtype and theirs.shape == y.shape
            assert check_output(y, theirs).ok and check_output(theirs, _ref(x, qw, qz, s)).ok
    assert spy.routed == [SMALL, SMALL, LARGE, LARGE]
    assert all(g.ok for g in P.STATE.gates.values()) and len(P.STATE.gates) == 2


@interpreter
def test_a_config_failing_the_gate_falls_back_with_one_warning(
    vllm: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # BLOCK_SIZE_K 256 straddles two 128-row groups: the kernel refuses it (a broken file).
    broken = KernelConfig(16, 64, 256, 1, 4, 3)
    _write_table(Path(os.environ[ENV_DIR]), {1: broken, 4: broken})
    theirs = VllmSpy(vllm)
    P.register()
    spy = Spy(monkeypatch)
    qw, qz, s = _weights()
    x = _x(1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        y = _ops().awq_gemm(x, qw, s, qz, 8)
        y2 = _ops().awq_gemm(x, qw, s, qz, 8)
    msgs = [str(w.message) for w in seen if issubclass(w.category, P.AwqPluginWarning)]
    assert len(msgs) == 1 and "failed the correctness gate" in msgs[0]
    assert "BLOCK_SIZE_K=256 must divide group_size=128" in msgs[0]
    assert not spy.routed and len(theirs.outputs) == 2
    assert y is theirs.outputs[0] and y2 is theirs.outputs[1]


@interpreter
def test_a_numerically_wrong_gate_result_falls_back(
    vllm: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        awq_gate, "check_output", lambda out, ref: CheckResult(False, 0.5, "relative error 0.5")
    )
    monkeypatch.setattr(P, "PREGATE_MAX_M", 1)
    theirs = VllmSpy(vllm)
    P.register()
    spy = Spy(monkeypatch)
    qw, qz, s = _weights()
    with pytest.warns(P.AwqPluginWarning, match=r"M=1: relative error 0.5"):
        y = _ops().awq_gemm(_x(1), qw, s, qz, 8)
    assert not spy.routed and y is theirs.outputs[0]


@interpreter
def test_capture_with_an_ungated_key_calls_vllm_without_synchronizing(
    vllm: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(P, "PREGATE_MAX_M", 1)  # gate SMALL only, at M = 1
    theirs = VllmSpy(vllm)
    P.register()
    spy = Spy(monkeypatch)

    def no(*_: Any, **__: Any) -> None:
        raise AssertionError("synchronized or gated during capture")

    monkeypatch.setattr(P, "capturing", lambda dev: True)
    monkeypatch.setattr(torch.cuda, "synchronize", no)
    real_gate = awq_gate.run_gate
    monkeypatch.setattr(awq_gate, "run_gate", no)
    qw, qz, s = _weights()
    x = _x(1)
    with pytest.warns(P.AwqPluginWarning, match="during CUDA-graph capture"):
        y = _ops().awq_gemm(x, qw, s, qz, 8)
    assert y is theirs.outputs[0] and not spy.routed and not P.STATE.gates
    # Outside capture the key is gated; in a later capture it is used.
    monkeypatch.setattr(P, "capturing", lambda dev: False)
    monkeypatch.setattr(awq_gate, "run_gate", real_gate)
    _ops().awq_gemm(x, qw, s, qz, 8)
    monkeypatch.setattr(P, "capturing", lambda dev: True)
    monkeypatch.setattr(awq_gate, "run_gate", no)
    y = _ops().awq_gemm(x, qw, s, qz, 8)
    assert spy.routed == [SMALL, SMALL] and check_output(y, _ref(x, qw, qz, s)).ok
    assert len(theirs.outputs) == 1 and list(P.STATE.gates) == [(N, K, SMALL, x.dtype, "cpu")]


@interpreter
def test_torch_compile_runs_the_choice_at_run_time(
    vllm: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM compiles the model: the wrapper is traced, and the per-M choice (and any gate) must
    run in the custom op on real tensors, not at trace time on fake ones."""
    monkeypatch.setattr(awq_gate, "run_gate", lambda *a: CheckResult(True, 0.0))  # tested above
    P.register()
    spy = Spy(monkeypatch)
    qw, qz, s = _weights()
    ops = _ops()
    torch._dynamo.reset()
    f = torch.compile(lambda x: ops.awq_gemm(x, qw, s, qz, 8), backend="eager", fullgraph=True)
    x = _x(3)
    y = f(x)
    assert spy.routed == [LARGE] and check_output(y, _ref(x, qw, qz, s)).ok
    torch._dynamo.reset()


def test_stub_loader_reads_the_module_file_and_refuses_a_real_vllm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = stub.read_sources(_wheel())
    assert set(files) == {stub.AWQ_TRITON_PATH, stub.CUSTOM_OPS_PATH, *stub.WHOLE_FILES}
    call = "awq_gemm_triton(input, qweight, scales, qzeros, split_k_iters)"
    assert call in files[stub.CUSTOM_OPS_PATH]
    src = tmp_path / "awq_triton.py"
    src.write_text(files[stub.AWQ_TRITON_PATH])
    saved = list(sys.path)
    try:
        mod = stub.load_awq_triton(src, tmp_path / "site")
        assert callable(mod.awq_gemm_triton) and mod.__file__.startswith(str(tmp_path))
    finally:
        stub.unload()
        sys.path[:] = saved
    monkeypatch.setitem(sys.modules, "vllm", ModuleType("vllm"))
    with pytest.raises(Exception, match="real vllm"):
        stub.load_awq_triton(src, tmp_path / "site2")


def test_vllms_own_plugin_loader_finds_and_calls_it(
    vllm: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's `load_general_plugins` (copied from the wheel) with an installed distribution that
    declares our entry point: a probe dist-info on sys.path, as `pip install` would leave."""
    group = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    info = tmp_path / "dists" / "autotune_probe-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: autotune-probe\nVersion: 0.0\n")
    lines = [f"{k} = {v}" for k, v in group["vllm.general_plugins"].items()]
    (info / "entry_points.txt").write_text("[vllm.general_plugins]\n" + "\n".join(lines) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path / "dists"))
    monkeypatch.setenv("VLLM_PLUGINS", "autotune_awq")  # vLLM's allow-list: ours only
    import vllm.plugins as plugins

    plugins.load_general_plugins()
    assert hasattr(vllm.awq_gemm_triton, P.ORIGINAL_ATTR)
