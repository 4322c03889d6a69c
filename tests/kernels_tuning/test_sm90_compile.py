"""Compile the SWAP_AB kernels for sm_90 on the CPU (Triton's bundled ptxas, no GPU) and check
what the design relies on: wgmma on the weight rows for FP8 and GPTQ, the dequantized INT4
weights fed to the MMA from registers, the shared memory model bounding the compiler's figure.

The specialization mirrors a real launch (16-byte aligned pointers, integers divisible by 16
marked so, integers equal to 1 folded to constants, the kernels' do_not_specialize honoured),
so these are the binaries the GPU run builds. The compiles run in a subprocess without
TRITON_INTERPRET (conftest sets it for this process, where triton.jit then builds interpreter
functions that cannot be compiled); about 10 s."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from kernels_tuning.kernel_config import KernelConfig as C
from kernels_tuning.resources import smem_bytes

N, K = 5120, 6144


def _compile(fn: Any, vals: dict[str, Any], consts: dict[str, Any], cfg: C) -> Any:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    dns = set(fn.do_not_specialize)
    sig: dict[str, str] = {}
    cx = dict(consts)
    attrs: dict[tuple[int, ...], list[list[Any]]] = {}
    for i, name in enumerate(fn.arg_names):
        if name in consts:
            sig[name] = "constexpr"
            continue
        v = vals[name]
        if isinstance(v, str):  # a pointer
            sig[name] = v
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name in dns:
            sig[name] = "i32"
        elif v == 1:
            sig[name] = "constexpr"
            cx[name] = 1
        else:
            sig[name] = "i32"
            if v % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn, sig, cx, attrs)
    opts = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)


def _fp8(cfg: C) -> Any:
    from kernels_tuning.kernels.fp8_block import _fp8_block_kernel

    bm, bn, bk = cfg.BLOCK_SIZE_M, cfg.BLOCK_SIZE_N, cfg.BLOCK_SIZE_K
    descs = (
        dict(A_DESC=f"tensordesc<fp8e4nv[{bm}, {bk}]>", B_DESC=f"tensordesc<fp8e4nv[{bn}, {bk}]>")
        if cfg.TMA
        else {}
    )
    vals = dict(
        A="*fp8e4nv", B="*fp8e4nv", C="*bf16", As="*fp32", Bs="*fp32", WS="*fp32", LOCKS="*i32",
        **descs, M=16, N=N, K=K, group_n=128, group_k=128, stride_am=K, stride_ak=1, stride_bk=1,
        stride_bn=K, stride_cm=N, stride_cn=1, stride_As_m=K // 128, stride_As_k=1,
        stride_Bs_k=1, stride_Bs_n=K // 128, GROUP_SIZE_M=1, SPLIT_K=1,
    )  # fmt: skip
    consts = dict(
        BLOCK_SIZE_M=cfg.BLOCK_SIZE_M, BLOCK_SIZE_N=cfg.BLOCK_SIZE_N,
        BLOCK_SIZE_K=cfg.BLOCK_SIZE_K, SWAP_AB=bool(cfg.SWAP_AB),
        FOLD_SCALES=bool(cfg.FOLD_SCALES), TMA=bool(cfg.TMA),
    )  # fmt: skip
    if not cfg.TMA:
        consts.update(A_DESC=None, B_DESC=None)
    return _compile(_fp8_block_kernel, vals, consts, cfg)


def _int4(cfg: C, awq: bool) -> Any:
    from kernels_tuning.kernels.int4_w4a16_jit import _w4a16_kernel

    vals = dict(
        A="*bf16", QW="*i32", QZ="*i32", S="*bf16", C="*bf16", WS="*fp32", LOCKS="*i32",
        M=16, N=N, K=K, group_size=128, zero_offset=0, stride_am=K, stride_ak=1,
        stride_qk=N // 8 if awq else N, stride_qn=1, stride_zg=N // 8, stride_zn=1,
        stride_sg=N, stride_sn=1, stride_cm=N, stride_cn=1, GROUP_SIZE_M=1, SPLIT_K=1, ATOMIC=0,
    )  # fmt: skip
    consts = dict(
        BLOCK_SIZE_M=cfg.BLOCK_SIZE_M, BLOCK_SIZE_N=cfg.BLOCK_SIZE_N,
        BLOCK_SIZE_K=cfg.BLOCK_SIZE_K, SWAP_AB=bool(cfg.SWAP_AB), AWQ=awq,
    )  # fmt: skip
    return _compile(_w4a16_kernel, vals, consts, cfg)


FP8_CASES = [
    (C(16, 64, 128, 1, 4, 4, SWAP_AB=1), True),  # 64 weight rows x 16 tokens: wgmma
    (C(8, 128, 128, 1, 4, 4, SWAP_AB=1), False),  # 8 tokens: mma.sync
    (C(16, 64, 128, 1, 4, 4), False),  # the unswapped decode tile: mma.sync
    (C(64, 128, 128, 1, 4, 3, FOLD_SCALES=1, TMA=1), True),  # large M, tiles copied by TMA
    (C(16, 64, 128, 1, 4, 4, SWAP_AB=1, TMA=1), True),
    (C(8, 64, 128, 1, 4, 4, SWAP_AB=1, TMA=1), False),
]
INT4_CFG = C(16, 128, 128, 1, 4, 3, SWAP_AB=1)


def _facts(k: Any) -> dict[str, Any]:
    ttgir: str = k.asm["ttgir"]
    loop = ttgir.split("scf.for")[1].split("scf.yield")[0]
    i32_loads = [ln for ln in loop.splitlines() if "ttg.local_load" in ln and "xi32" in ln]
    return {
        "wgmma": "ttng.warp_group_dot " in ttgir,
        "async": "async_copy_global_to_local" in ttgir
        or "async_tma_copy_global_to_local" in ttgir,
        "tma": "async_tma_copy_global_to_local" in ttgir,
        "shared": int(k.metadata.shared),
        "packed_to_operand": any("dot_op<{opIdx = 0" in ln for ln in i32_loads),
        "relayout_in_loop": any(op in loop for op in ("tt.interleave", "tt.join", "tt.reshape")),
    }


PLANES_CFG = C(16, 256, 128, 1, 4, 3)


def _planes(cfg: C, act: str) -> dict[str, Any]:
    """The AWQ plane kernel (inline PTX dequantization) for `act` activations: PTX facts and
    the register use cuobjdump reads from the sm_90 binary."""
    import tempfile
    from pathlib import Path

    import triton

    from kernels_tuning.kernels.int4_awq_planes import _awq_planes_kernel

    vals = dict(
        A=f"*{act}", QW="*i32", QZ="*i32", S32="*i32", C=f"*{act}", WS="*fp32", LOCKS="*i32",
        M=16, N=N, K=K, group_size=128, stride_am=K, stride_qk=N // 8, stride_zg=N // 8,
        stride_sg=N // 2, stride_cm=N, GROUP_SIZE_M=1, SPLIT_K=1, ATOMIC=0,
    )  # fmt: skip
    consts = dict(
        BLOCK_SIZE_M=cfg.BLOCK_SIZE_M, BLOCK_SIZE_N=cfg.BLOCK_SIZE_N,
        BLOCK_SIZE_K=cfg.BLOCK_SIZE_K, USE_ASM=True,
    )  # fmt: skip
    k = _compile(_awq_planes_kernel, vals, consts, cfg)
    ptx: str = k.asm["ptx"]
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"])
        f.flush()
        usage = subprocess.run(
            [str(tool), "--dump-resource-usage", f.name], capture_output=True, text=True
        ).stdout
    fields = dict(kv.split(":") for kv in usage.split() if kv.count(":") == 1)
    op = "bf16x2" if act == "bf16" else "f16x2"
    return {
        "lop3": ptx.count("lop3.b32"),
        "pair_math": f"sub.rn.{op}" in ptx and f"mul.rn.{op}" in ptx,
        "regs": int(fields.get("REG", -1)),
        "stack": int(fields.get("STACK", -1)),
        "shared": int(k.metadata.shared),
    }


def _main() -> None:
    out: dict[str, Any] = {"fp8": [_facts(_fp8(c)) for c, _ in FP8_CASES]}
    out["int4"] = [_facts(_int4(INT4_CFG, awq)) for awq in (True, False)]
    out["planes"] = {act: _planes(PLANES_CFG, act) for act in ("bf16", "fp16")}
    print(json.dumps(out))


@pytest.fixture(scope="module")
def facts() -> dict[str, Any]:
    pytest.importorskip("triton.backends.nvidia.compiler")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("i", range(len(FP8_CASES)), ids=[c.key() for c, _ in FP8_CASES])
def test_fp8_swap_ab_gets_wgmma(facts: dict[str, Any], i: int) -> None:
    cfg, wgmma = FP8_CASES[i]
    f = facts["fp8"][i]
    assert f["wgmma"] == wgmma
    assert f["async"]  # operands pipelined
    assert f["tma"] == bool(cfg.TMA)  # TMA=1: the copy engine loads the tiles
    assert f["shared"] <= smem_bytes(cfg, "fp8", "sm_90") <= f["shared"] + 1024


@pytest.mark.parametrize("i", [0, 1], ids=["awq", "gptq"])
def test_int4_swap_ab_feeds_the_mma_from_registers(facts: dict[str, Any], i: int) -> None:
    f = facts["int4"][i]
    # the packed tile goes from its pipelined buffer straight into the MMA operand layout: no
    # interleave/reshape of the dequantized weights in the loop, no staging of them in smem
    assert f["async"] and f["packed_to_operand"], f
    assert not f["relayout_in_loop"] or i == 1, f  # GPTQ reshapes the tiny activation tile
    # GPTQ's planes are 128 weight rows: wgmma; AWQ's are 128/8 = 16 rows: mma.sync
    assert f["wgmma"] == (i == 1)
    assert f["shared"] <= smem_bytes(INT4_CFG, "int4", "sm_90")


@pytest.mark.parametrize("act", ["bf16", "fp16"])
def test_awq_planes_dequantize_in_ptx_without_spills(facts: dict[str, Any], act: str) -> None:
    f = facts["planes"][act]
    # 32 packed words per thread per K tile (128 x 32 words over 128 threads), one lop3 per
    # pair of weights: the PTX path is the one compiled, with the packed bf16x2/f16x2 math
    assert f["lop3"] >= 4 and f["pair_math"], f
    assert 0 < f["regs"] <= 255 and f["stack"] == 0, f
    assert f["shared"] <= smem_bytes(PLANES_CFG, "int4", "sm_90"), f


if __name__ == "__main__":
    _main()
