"""CPU check (no GPU; with call 45): does Triton 3.6 warp-specialize the FP8 SWAP_AB TMA K loop
for sm_90 when it is written `tl.range(k_first, k_last, warp_specialize=True)`? Writes that
variant of kernels_tuning/kernels/fp8_block.py to a temporary module, compiles the own-file
decode tile with the bundled ptxas (as tests/kernels_tuning/test_sm90_compile.py does) and prints
whether the TTGIR has a `ttg.warp_specialize` op. Seen on 2026-11-30: False (4 warps, 40992 B).
Run from the repository root, without TRITON_INTERPRET:
    .venv/bin/python reports/kernels/data/call38/ws_compile_check.py
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, ".")
sys.path.insert(0, "tests/kernels_tuning")

src = Path("kernels_tuning/kernels/fp8_block.py").read_text()
old = """        acc_t = tl.zeros((BLOCK_SIZE_N, BLOCK_SIZE_M), dtype=tl.float32)
        for kt in range(k_first, k_last):"""
assert old in src, "the SWAP_AB loop moved; update this check"
tmp = Path(tempfile.mkdtemp())
(tmp / "fp8_ws.py").write_text(src.replace(old, old.replace(
    "range(k_first, k_last)", "tl.range(k_first, k_last, warp_specialize=True)")))
sys.path.insert(0, str(tmp))

import fp8_ws  # noqa: E402
import test_sm90_compile as T  # noqa: E402

import kernels_tuning.kernels.fp8_block as fb  # noqa: E402
from kernels_tuning.space import KernelConfig as C  # noqa: E402

fb._fp8_block_kernel = fp8_ws._fp8_block_kernel  # what T._fp8 compiles
ck = T._fp8(C(16, 64, 128, 1, 4, 4, SPLIT_K=3, SWAP_AB=1, TMA=1))
print("warp_specialize op:", "ttg.warp_specialize" in ck.asm["ttgir"],
      "| num_warps", ck.metadata.num_warps, "| shared", ck.metadata.shared)
