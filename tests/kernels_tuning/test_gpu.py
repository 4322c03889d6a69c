"""Kernels on a real GPU (bf16, the engines' dtype, which Triton's CPU interpreter cannot run),
split-K under back-to-back graph replays, the timing harness and the precompile cache.
Skipped without CUDA."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")
if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
    pytest.skip("needs CUDA (and TRITON_INTERPRET unset)", allow_module_level=True)

from kernels_tuning import bench  # noqa: E402
from kernels_tuning.kernel_config import KernelConfig as C  # noqa: E402
from kernels_tuning.kernels import fp8_block as F  # noqa: E402
from kernels_tuning.kernels import int4_w4a16 as W  # noqa: E402

pytestmark = pytest.mark.gpu

FP8_CONFIGS = [
    C(16, 32, 128, 1, 4, 5),
    C(16, 64, 64, 1, 4, 4, SPLIT_K=4),
    C(64, 128, 128, 32, 4, 3),
    C(128, 256, 128, 16, 8, 3),
    C(32, 64, 128, 1, 4, 4, SPLIT_K=8),
    # SWAP_AB (C^T = B A^T, wgmma on the weight rows): M=256 only checks the wrap-around
    C(8, 64, 128, 1, 4, 4, SWAP_AB=1),
    C(16, 128, 128, 1, 4, 3, SPLIT_K=4, SWAP_AB=1),
    C(32, 64, 64, 1, 4, 5, SWAP_AB=1),
    # FOLD_SCALES (one weight scale per tile folded into the token scales)
    C(64, 128, 128, 32, 4, 3, FOLD_SCALES=1),
    C(16, 64, 128, 1, 4, 4, SPLIT_K=4, SWAP_AB=1, FOLD_SCALES=1),
    # TMA (the copy engine loads the tiles; rows past M or N read as zeros)
    C(64, 128, 128, 32, 4, 3, FOLD_SCALES=1, TMA=1),
    C(128, 128, 64, 16, 8, 4, TMA=1),
    C(8, 64, 128, 1, 4, 4, SPLIT_K=3, SWAP_AB=1, FOLD_SCALES=1, TMA=1),
    C(16, 128, 128, 1, 4, 5, SWAP_AB=1, TMA=1),
]


@pytest.mark.parametrize("m", [1, 33, 256])
@pytest.mark.parametrize("cfg", FP8_CONFIGS, ids=lambda c: c.key())
def test_fp8_block_bf16_matches_reference(m: int, cfg: C) -> None:
    p = bench.make_problem("fp8", m, 5120, 6144)
    meas = bench.Evaluator(p)(cfg)
    assert meas.ok, meas.error
    assert meas.rel_err is not None and meas.rel_err < 5e-3


INT4_CONFIGS = [
    C(16, 64, 128, 1, 4, 4),
    C(16, 128, 64, 1, 4, 3, SPLIT_K=4),
    C(64, 128, 128, 16, 4, 3),
    C(128, 128, 64, 16, 8, 3, SPLIT_K=2),
    # AWQ decode tiles (BM 16, BN >= 128) take the PTX plane kernel (int4_awq_planes.py)
    C(16, 256, 128, 1, 4, 4),
    C(16, 256, 64, 1, 8, 3, SPLIT_K=8),
    # SWAP_AB: nibble planes, dequantized weights on the MMA's M side
    C(8, 128, 128, 1, 4, 3, SWAP_AB=1),
    C(16, 256, 128, 1, 4, 3, SPLIT_K=4, SWAP_AB=1),
    C(32, 128, 128, 1, 8, 4, SPLIT_K=2, SWAP_AB=1),
    # ATOMIC_REDUCE: split-K partials summed by atomic adds (main kernel, planes, SWAP_AB)
    C(16, 128, 64, 1, 4, 3, SPLIT_K=4, ATOMIC_REDUCE=1),
    C(16, 256, 128, 1, 4, 3, SPLIT_K=6, ATOMIC_REDUCE=1),
    C(16, 256, 128, 1, 4, 3, SPLIT_K=4, SWAP_AB=1, ATOMIC_REDUCE=1),
]


@pytest.mark.parametrize("packing", ["awq", "gptq"])
@pytest.mark.parametrize("m", [1, 300])
@pytest.mark.parametrize("cfg", INT4_CONFIGS, ids=lambda c: c.key())
def test_int4_bf16_matches_reference(packing: str, m: int, cfg: C) -> None:
    p = bench.make_problem("int4", m, 5120, 3072, packing=packing)
    meas = bench.Evaluator(p)(cfg)
    assert meas.ok, meas.error


def test_int4_fp16_activations() -> None:
    torch.manual_seed(0)
    k, n = 1024, 512
    q, z, s = W.quantize_int4(torch.randn(k, n, device="cuda") * 0.02)
    qw, qz = W.pack(q, z, "awq")
    x = torch.randn(8, k, device="cuda", dtype=torch.float16)
    ref = W.reference(x, qw, qz, s.half())
    for cfg in (C(16, 64, 128, 1, 4, 3, SPLIT_K=2), C(8, 128, 128, 1, 4, 3, SPLIT_K=2, SWAP_AB=1)):
        out = W.w4a16_matmul(x, qw, qz, s.half(), config=cfg)
        assert bench.check_output(out, ref).ok, cfg.key()
    # scales at an odd element offset: the swapped AWQ path must not read unaligned words
    odd = torch.cat([torch.zeros(1, device="cuda"), s.flatten()]).half()[1:].view(s.shape)
    for cfg in (C(16, 128, 128, 1, 4, 3, SWAP_AB=1), C(16, 128, 128, 1, 4, 3)):  # swap, planes
        assert bench.check_output(W.w4a16_matmul(x, qw, qz, odd, config=cfg), ref).ok


def _graph_of(
    p: bench.Problem, cfg: C, n: int, after: Callable[[int], object] | None = None
) -> torch.cuda.CUDAGraph:
    """`n` launches of `cfg` on input set 0 captured in one CUDA graph; one eager launch first
    compiles and sizes the split-K buffers, so the capture allocates nothing. `after(j)` is
    captured after launch j."""
    p.launch(cfg, 0)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.graph(graph, stream=stream):
        for j in range(n):
            p.launch(cfg, 0)
            if after is not None:
                after(j)
    return graph


def test_swapped_split_k_survives_back_to_back_replays() -> None:
    for kind in ("fp8", "int4"):
        p = bench.make_problem(kind, 4, 5120, 6144)  # type: ignore[arg-type]
        graph = _graph_of(p, C(8, 128, 128, 1, 4, 4, SPLIT_K=8, SWAP_AB=1), 100)
        p.output(0).fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert bench.check_output(p.output(0), p.ref).ok, kind


def test_split_k_survives_back_to_back_replays() -> None:
    """The in-kernel reduction uses arrival counters; 200 launches in one graph must all give
    the reference (a missing fence or a counter left non-zero shows up here)."""
    p = bench.make_problem("fp8", 16, 5120, 6144)
    graph = _graph_of(p, C(16, 64, 128, 1, 4, 4, SPLIT_K=8), 200)
    for _ in range(3):
        p.output(0).fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert bench.check_output(p.output(0), p.ref).ok


def test_atomic_reduce_survives_back_to_back_replays() -> None:
    """The atomic sum lives in one zeroed [M, N] buffer that each tile's last arriver zeroes
    again: every one of 200 launches in one graph (main kernel, plane kernel, SWAP_AB) must give
    the reference (each launch's output is copied out, so residue one launch leaves for the next
    shows), and the buffer must be zero afterwards."""
    from kernels_tuning.kernels import _buffers

    p = bench.make_problem("int4", 16, 5120, 6144)
    for cfg in (
        C(16, 128, 64, 1, 4, 3, SPLIT_K=8, ATOMIC_REDUCE=1),
        C(16, 256, 128, 1, 4, 3, SPLIT_K=12, ATOMIC_REDUCE=1),
        C(16, 256, 128, 1, 4, 3, SPLIT_K=6, SWAP_AB=1, ATOMIC_REDUCE=1),
    ):
        outs = torch.empty((200, *p.output(0).shape), dtype=p.output(0).dtype, device="cuda")
        graph = _graph_of(p, cfg, 200, lambda j, outs=outs: outs[j].copy_(p.output(0)))
        for _ in range(2):
            outs.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            bad = [j for j in range(200) if not bench.check_output(outs[j], p.ref).ok]
            assert not bad, (cfg.key(), bad[:5])
        assert not bool(_buffers._ZEROED[str(p.output(0).device)].any()), cfg.key()


def test_time_graph_is_positive_and_stable() -> None:
    p = bench.make_problem("fp8", 1, 5120, 6144)
    cfg = C(16, 64, 128, 1, 4, 4)
    p.launch(cfg, 0)
    a, _ = bench.time_graph(lambda i: p.launch(cfg, i), p.n_sets)
    b, _ = bench.time_graph(lambda i: p.launch(cfg, i), p.n_sets)
    assert 1.0 < a < 1000.0
    assert abs(a - b) / min(a, b) < 0.25


def test_gate_rejects_a_wrong_kernel() -> None:
    p = bench.make_problem("fp8", 8, 512, 512)
    bad = p.ref.clone()
    bad[3] += 0.05 * bad.float().abs().max().to(bad.dtype)
    assert not bench.check_output(bad, p.ref).ok
    assert F.reference is not None


@pytest.mark.parametrize("act", ["bfloat16", "float16"])
def test_awq_planes_match_the_reference_in_bf16_and_fp16(act: str) -> None:
    # The PTX path (bf16x2 / f16x2 pair math) in both activation dtypes, split-K, M not a
    # multiple of 8; the odd-offset scales of test_int4_fp16_activations cover the alignment.
    from kernels_tuning.kernels.int4_awq_planes import uses_planes

    cfg = C(16, 128, 128, 1, 4, 3, SPLIT_K=2)
    assert uses_planes(cfg, "awq")
    p = bench.make_problem("int4", 7, 4096, 2048, packing="awq", act_dtype=act)
    meas = bench.Evaluator(p)(cfg)
    assert meas.ok, meas.error
    assert meas.rel_err is not None and meas.rel_err < 2e-3
