"""Both kernels against their dequantize-then-matmul references on tiny shapes, on CPU under
Triton's interpreter (bf16 needs a GPU: the interpreter cannot compute in bf16, so INT4 runs in
fp16 here and bf16 in test_gpu.py)."""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip(
        "interpreter tests (TRITON_INTERPRET=1); GPU runs use test_gpu.py", allow_module_level=True
    )

import torch  # noqa: E402

from autotune.errors import ConfigError  # noqa: E402
from kernels_tuning import bench  # noqa: E402
from kernels_tuning.kernel_config import KernelConfig as C  # noqa: E402
from kernels_tuning.kernels import fp8_block as F  # noqa: E402
from kernels_tuning.kernels import int4_w4a16 as W  # noqa: E402
from kernels_tuning.kernels.vllm_awq_like import awq_gemm_vllm_defaults  # noqa: E402


@pytest.mark.parametrize(
    ("m", "cfg"),
    [
        (16, C(16, 32, 128, 1, 4, 2)),
        (16, C(16, 64, 64, 1, 4, 3, SPLIT_K=2)),  # BK 64 < the 128 group: two tiles per scale
        (5, C(32, 128, 64, 16, 4, 2, SPLIT_K=4)),  # M not a tile multiple, wrap + masked store
    ],
    ids=lambda v: v.key() if isinstance(v, C) else str(v),
)
def test_fp8_block_matches_reference(m: int, cfg: C) -> None:
    p = bench.make_problem("fp8", m, 256, 256, device="cpu")
    meas = bench.Evaluator(p)(cfg)
    assert meas.ok, meas.error
    assert meas.rel_err is not None and meas.rel_err < 5e-3  # bf16 output rounding only


SWAP_FP8 = [C(8, 64, 128, 1, 4, 2, SWAP_AB=1), C(16, 128, 64, 1, 4, 3, SPLIT_K=2, SWAP_AB=1)]


@pytest.mark.parametrize("m", [1, 3, 16, 33])
@pytest.mark.parametrize("cfg", SWAP_FP8, ids=lambda c: c.key())
def test_fp8_swap_ab_matches_reference(m: int, cfg: C) -> None:
    # M=33 with BM 8/16: several M tiles, the last one partial (wrapped loads, masked store)
    p = bench.make_problem("fp8", m, 256, 256, device="cpu")
    meas = bench.Evaluator(p)(cfg)
    assert meas.ok, meas.error
    assert meas.rel_err is not None and meas.rel_err < 5e-3


FOLD_FP8 = [
    C(16, 64, 128, 1, 4, 2, FOLD_SCALES=1),
    C(32, 128, 64, 16, 4, 2, SPLIT_K=2, FOLD_SCALES=1),  # BK 64: two K tiles per scale
    C(8, 64, 128, 1, 4, 2, SWAP_AB=1, FOLD_SCALES=1),
]


@pytest.mark.parametrize("m", [1, 5])
@pytest.mark.parametrize("cfg", FOLD_FP8, ids=lambda c: c.key())
def test_fp8_fold_scales_matches_reference(m: int, cfg: C) -> None:
    # Weight blocks whose scales differ by up to 64x along N and K: a tile that took another
    # block's scale, or one scale for two blocks, would be off by far more than bf16 rounding.
    torch.manual_seed(m)
    w = torch.randn(256, 256) * torch.tensor([1.0, 8.0]).repeat_interleave(128)[:, None]
    w = w * torch.tensor([0.125, 1.0]).repeat_interleave(128)[None, :]
    b, bs = F.block_quant_fp8(w)
    a, a_s = F.per_token_group_quant_fp8(torch.randn(m, 256))
    got = F.w8a8_block_fp8_matmul(a, b, a_s, bs, config=cfg).float()
    ref = F.reference(a, b, a_s, bs).float()
    assert (got - ref).abs().max() <= 1e-2 * ref.abs().max()


TMA_FP8 = [
    C(16, 64, 128, 1, 4, 2, TMA=1),
    C(32, 128, 64, 16, 4, 2, SPLIT_K=4, FOLD_SCALES=1, TMA=1),  # BK 64, split, fold
    C(8, 64, 128, 1, 4, 2, SWAP_AB=1, TMA=1),
    C(16, 128, 64, 1, 4, 3, SPLIT_K=2, SWAP_AB=1, FOLD_SCALES=1, TMA=1),
]


@pytest.mark.parametrize("m", [1, 33])
@pytest.mark.parametrize("cfg", TMA_FP8, ids=lambda c: c.key())
def test_fp8_tma_matches_reference(m: int, cfg: C) -> None:
    # M=33: the last M tile runs past the activations (TMA reads zeros there; masked store)
    p = bench.make_problem("fp8", m, 384, 256, device="cpu")
    meas = bench.Evaluator(p)(cfg)
    assert meas.ok, meas.error
    assert meas.rel_err is not None and meas.rel_err < 5e-3


def test_fp8_tma_refuses_an_unaligned_row_stride() -> None:
    s = bench.make_problem("fp8", 4, 256, 256, device="cpu").sets[0]
    a = torch.zeros(4, 264, dtype=torch.float8_e4m3fn)[:, 8:]  # stride 264: not a 16-multiple
    a.copy_(s["A"])
    with pytest.raises(ConfigError, match="TMA") as e:
        F.w8a8_block_fp8_matmul(a, s["B"], s["As"], s["Bs"], config=C(16, 64, 128, 1, 4, 2, TMA=1))
    assert e.value.field == "TMA"


def test_fp8_fold_scales_refuses_a_tile_wider_than_the_weight_block() -> None:
    s = bench.make_problem("fp8", 4, 256, 256, device="cpu").sets[0]
    with pytest.raises(ConfigError, match="FOLD_SCALES") as e:
        F.w8a8_block_fp8_matmul(
            s["A"], s["B"], s["As"], s["Bs"], config=C(16, 256, 128, 1, 4, 2, FOLD_SCALES=1)
        )
    assert e.value.field == "FOLD_SCALES"


def test_fp8_reference_is_the_dequantized_product() -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 256)
    w = torch.randn(128, 256)
    a, a_s = F.per_token_group_quant_fp8(x)
    b, b_s = F.block_quant_fp8(w)
    ref = F.reference(a, b, a_s, b_s, output_dtype=torch.float32)
    exact = (a.float() * a_s.repeat_interleave(128, 1)) @ (
        b.float() * b_s.repeat_interleave(128, 0).repeat_interleave(128, 1)
    ).T
    assert torch.allclose(ref, exact, rtol=1e-5, atol=1e-5)
    # fp8 quantization itself stays close to the unquantized product
    assert float((ref - x @ w.T).norm() / (x @ w.T).norm()) < 0.06


@pytest.mark.parametrize("packing", ["awq", "gptq"])
@pytest.mark.parametrize(
    "cfg", [C(16, 64, 64, 1, 4, 2), C(16, 32, 128, 1, 4, 2, SPLIT_K=2)], ids=lambda c: c.key()
)
def test_int4_matches_reference(packing: str, cfg: C) -> None:
    p = bench.make_problem(
        "int4", 16, 256, 256, device="cpu", packing=packing, act_dtype="float16"
    )
    meas = bench.Evaluator(p)(cfg)
    assert meas.ok, meas.error


SWAP_INT4 = [C(8, 128, 128, 1, 4, 2, SWAP_AB=1), C(16, 256, 128, 1, 4, 3, SPLIT_K=2, SWAP_AB=1)]


@pytest.mark.parametrize("packing", ["awq", "gptq"])
@pytest.mark.parametrize("m", [1, 3, 16, 33])
@pytest.mark.parametrize("cfg", SWAP_INT4, ids=lambda c: c.key())
def test_int4_swap_ab_planes_match_reference(packing: str, m: int, cfg: C) -> None:
    # N=384: with BN=256 the second N tile is half outside (wrapped packed columns, masked
    # permuted AWQ store); K=384: three groups, split 2 uneven.
    p = bench.make_problem("int4", m, 384, 384, device="cpu", packing=packing, act_dtype="float16")
    meas = bench.Evaluator(p)(cfg)
    assert meas.ok, meas.error


def test_int4_swap_ab_gptq_zero_offset_and_awq_column_order() -> None:
    """Planes must land on the right columns: a weight that is zero except one column per
    8-column word gives a result only there (AWQ's interleaved order), and GPTQ checkpoints
    that store the zero itself (zero_offset=0) are honoured."""
    torch.manual_seed(3)
    k, n = 128, 128
    w = torch.zeros(k, n)
    w[:, 5::8] = torch.randn(k, n // 8) * 0.05  # column 5 of every word: AWQ nibble 6
    q, z, s = W.quantize_int4(w, 128)
    x = torch.randn(2, k).half()
    cfg = C(8, 128, 128, 1, 4, 2, SWAP_AB=1)
    # scales at an odd element offset (the swapped AWQ path reads them as 4-byte pairs; the GPU
    # would fault on the unaligned words, which test_gpu.py checks: here only the values)
    odd = torch.cat([torch.zeros(1), s.flatten()]).half()[1:].view(s.shape)
    assert odd.storage_offset() == 1
    out = W.w4a16_matmul(x, *W.pack(q, z, "awq"), odd, config=cfg)
    assert bench.check_output(out, W.reference(x, *W.pack(q, z, "awq"), s.half())).ok
    for packing, zo in (("awq", None), ("gptq", 0), ("gptq", 1)):
        qw, qz = W.pack(q, z, packing, zero_offset=zo)  # type: ignore[arg-type]
        out = W.w4a16_matmul(
            x,
            qw,
            qz,
            s.half(),
            packing=packing,
            zero_offset=zo,
            config=cfg,  # type: ignore[arg-type]
        )
        ref = W.reference(x, qw, qz, s.half(), packing=packing, zero_offset=zo)  # type: ignore[arg-type]
        assert bench.check_output(out, ref).ok, (packing, zo)
        assert float(ref[:, 5::8].float().abs().sum()) > 0


@pytest.mark.parametrize("packing", ["awq", "gptq"])
def test_int4_packing_round_trips(packing: str) -> None:
    torch.manual_seed(1)
    w = torch.randn(256, 64) * 0.05
    q, z, s = W.quantize_int4(w, 128)
    qw, qz = W.pack(q, z, packing)  # type: ignore[arg-type]
    assert qw.dtype == torch.int32
    assert qw.shape == ((256, 8) if packing == "awq" else (32, 64))
    assert qz.shape == (2, 8)
    deq = W.dequantize(qw, qz, s, packing=packing)  # type: ignore[arg-type]
    manual = (q.float() - z.repeat_interleave(128, 0).float()) * s.repeat_interleave(128, 0)
    assert torch.equal(deq, manual)


def test_awq_order_is_interleaved() -> None:
    # nibble i of a word holds column AWQ_ORDER[i]: columns 0..7 = values 0..7
    q = torch.arange(8, dtype=torch.int32).reshape(1, 8)
    word = int(W.pack_awq(q)[0, 0]) & 0xFFFFFFFF
    nibbles = [(word >> (4 * i)) & 0xF for i in range(8)]
    assert nibbles == [0, 2, 4, 6, 1, 3, 5, 7]


def test_vllm_like_baseline_is_correct() -> None:
    torch.manual_seed(2)
    q, z, s = W.quantize_int4(torch.randn(256, 64) * 0.05, 128)
    qw, qz = W.pack_awq(q), W.pack_awq(z)
    x = torch.randn(8, 256).half()
    out = awq_gemm_vllm_defaults(x, qw, s.half(), qz)
    ref = W.reference(x, qw, qz, s.half())
    assert float((out.float() - ref.float()).norm() / ref.float().norm()) < 5e-3


def test_gate_rejects_a_wrong_result() -> None:
    p = bench.make_problem("fp8", 16, 256, 256, device="cpu")
    p.ref = p.ref.clone()
    p.ref[:, :32] *= 1.05  # one 32-column block off by 5%
    meas = bench.Evaluator(p)(C(16, 32, 128, 1, 4, 2))
    assert not meas.ok and "correctness gate" in (meas.error or "")


def test_bk_must_divide_the_group() -> None:
    p = bench.make_problem("fp8", 4, 256, 256, device="cpu")
    s = p.sets[0]
    with pytest.raises(ConfigError, match="BLOCK_SIZE_K"):
        F.w8a8_block_fp8_matmul(s["A"], s["B"], s["As"], s["Bs"], config=C(16, 32, 256, 1, 4, 2))
    with pytest.raises(ConfigError, match="Bs has shape"):
        F.w8a8_block_fp8_matmul(s["A"], s["B"], s["As"], s["Bs"][:1])


PLANES_INT4 = [C(16, 128, 64, 1, 4, 2), C(16, 256, 128, 4, 4, 3, SPLIT_K=2)]


@pytest.mark.parametrize("m", [1, 3, 16, 33])
@pytest.mark.parametrize("cfg", PLANES_INT4, ids=lambda c: c.key())
def test_int4_awq_planes_match_reference(m: int, cfg: C) -> None:
    # The decode-tile AWQ path (kernels/int4_awq_planes.py; here its interpreter stand-in for
    # the PTX): N=384 leaves the BN=256 tile half outside, K=384 splits 2 unevenly, M=33 needs
    # three M tiles of 16.
    from kernels_tuning.kernels.int4_awq_planes import uses_planes

    assert uses_planes(cfg, "awq") and not uses_planes(cfg, "gptq")
    p = bench.make_problem("int4", m, 384, 384, device="cpu", packing="awq", act_dtype="float16")
    meas = bench.Evaluator(p)(cfg)
    assert meas.ok, meas.error


def test_int4_awq_planes_put_each_column_back_in_place() -> None:
    # One nonzero column per 8-column word, for each position j: a plane landing on the wrong
    # column would leave these columns zero and fill others.
    torch.manual_seed(5)
    k, n = 128, 128
    x = torch.randn(3, k).half()
    for j in range(8):
        w = torch.zeros(k, n)
        w[:, j::8] = torch.randn(k, n // 8) * 0.05
        q, z, s = W.quantize_int4(w, 128)
        qw, qz = W.pack(q, z, "awq")
        out = W.w4a16_matmul(x, qw, qz, s.half(), config=PLANES_INT4[0])
        ref = W.reference(x, qw, qz, s.half())
        assert torch.equal(out, ref), j


ATOMIC_INT4 = [
    C(16, 64, 64, 1, 4, 2, SPLIT_K=3, ATOMIC_REDUCE=1),  # main kernel
    C(16, 256, 128, 1, 4, 3, SPLIT_K=2, SWAP_AB=1, ATOMIC_REDUCE=1),  # its SWAP_AB path
    C(16, 256, 128, 4, 4, 3, SPLIT_K=2, ATOMIC_REDUCE=1),  # AWQ: the plane kernel
]


@pytest.mark.parametrize("packing", ["awq", "gptq"])
@pytest.mark.parametrize("m", [1, 33])
@pytest.mark.parametrize("cfg", ATOMIC_INT4, ids=lambda c: c.key())
def test_int4_atomic_reduce_matches_reference_and_leaves_its_sums_zeroed(
    packing: str, m: int, cfg: C
) -> None:
    from kernels_tuning.kernels import _buffers

    p = bench.make_problem("int4", m, 384, 384, device="cpu", packing=packing, act_dtype="float16")
    ev = bench.Evaluator(p)
    for _ in range(2):  # the second launch starts from what the first left behind
        meas = ev(cfg)
        assert meas.ok, meas.error
        sums = _buffers._ZEROED["cpu"]
        assert sums.numel() >= m * 384 and not bool(sums.any())


def test_int4_one_caller_workspace_serves_ordered_and_atomic_configs() -> None:
    """The ordered sum leaves its partials in the caller's workspace; an atomic config given the
    same buffer must not add into them (it sums into the device's zeroed buffer)."""
    from kernels_tuning.kernels import _buffers

    ordered = C(16, 64, 64, 1, 4, 2, SPLIT_K=3)
    atomic = ordered.with_(ATOMIC_REDUCE=1)
    p = bench.make_problem("int4", 5, 384, 384, device="cpu", act_dtype="float16")
    s = p.sets[0]
    args = (s["x"], s["qweight"], s["qzeros"], s["scales"])
    ws = torch.zeros(3 * 5 * 384)
    for cfg in (ordered, atomic, atomic, ordered):
        out = W.w4a16_matmul(*args, config=cfg, workspace=ws)
        assert bench.check_output(out, p.ref).ok, cfg.key()
    assert bool(ws.any())  # the ordered sum's partials
    sums = _buffers._ZEROED["cpu"]
    assert sums.numel() >= 5 * 384 and not bool(sums.any())


def test_split_k_buffers_keep_what_a_larger_launch_replaced() -> None:
    """A CUDA graph captured before a larger launch still points at the smaller buffers."""
    from kernels_tuning.kernels import _buffers

    small, _ = _buffers.split_k_buffers("cpu", 2, 3, 4, 1, atomic=True)
    big, _ = _buffers.split_k_buffers("cpu", 2, 10**4, 4096, 1, atomic=True)
    assert big.numel() >= 10**4 * 4096 and any(t is small for t in _buffers._RETIRED)
    with pytest.raises(ConfigError, match="2\\^31") as e:
        _buffers.split_k_buffers("cpu", 2, 2**16, 2**15, 1, atomic=True)
    assert e.value.field == "ATOMIC_REDUCE"
