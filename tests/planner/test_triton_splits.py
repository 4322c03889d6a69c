"""planner.triton_splits against the releases: the split-count rule is the release's own
`get_num_kv_splits_triton`, run here on numpy through a stand-in for `triton.language`, and the
facts behind FIELD-NOTES C5's depth curve (two RX 7900 XTX, TP 2, MTP-3, Triton backend)."""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from autotune.planner.triton_splits import decode_kv_splits, head_tiles
from tests.wheels import function_def, wheel_text

METADATA = "sglang/kernels/ops/attention/metadata.py"
DECODE = "sglang/kernels/ops/attention/decode_attention.py"
BACKEND = "sglang/srt/layers/attention/triton_backend.py"
EXTEND = "sglang/kernels/ops/attention/extend_attention.py"


@dataclass
class _Ptr:
    """A pointer into a numpy array, as triton.language's pointer arithmetic uses it."""

    data: np.ndarray
    offs: Any = 0

    def __add__(self, offs: Any) -> _Ptr:
        return _Ptr(self.data, self.offs + offs)


def _load(ptr: _Ptr, mask: np.ndarray, other: Any) -> np.ndarray:
    safe = np.where(mask, ptr.offs, 0)
    return np.where(mask, ptr.data[safe], other)


def _store(ptr: _Ptr, value: np.ndarray, mask: np.ndarray) -> None:
    ptr.data[ptr.offs[mask]] = value[mask]


_TL = SimpleNamespace(
    constexpr=int,
    float32=np.float32,
    int32=np.int32,
    arange=lambda a, b: np.arange(a, b),
    load=_load,
    store=_store,
    max=np.max,
    min=np.min,
    maximum=np.maximum,
    minimum=np.minimum,
    log2=np.log2,
    cdiv=lambda a, b: -(-a // b),
    cast=lambda x, dtype: np.asarray(x).astype(dtype),
)


def _release_splits(version: str) -> Any:
    """The release's get_num_kv_splits_triton as a plain function over numpy."""
    fn = function_def(wheel_text("sglang", version, METADATA), "get_num_kv_splits_triton")
    fn.decorator_list = []
    namespace: dict[str, Any] = {"tl": _TL}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), METADATA, "exec"), namespace)
    return namespace["get_num_kv_splits_triton"]


@pytest.mark.parametrize("version", ["0.5.17", "0.5.18"])
def test_split_count_is_the_releases(version: str) -> None:
    kernel = _release_splits(version)
    heads = [(12, 2), (24, 4), (32, 32), (64, 8), (40, 1)]
    batches = [[1], [256], [4096], [65536], [131072], [8192] * 4, [1000, 30000], [512] * 48]
    for (h, kv), lens, cap, cores, group in itertools.product(
        heads, batches, [8, 16, 32], [48, 80, 96, 132], [1, 4]
    ):
        out = np.zeros(len(lens) * group, dtype=np.int64)
        kernel(_Ptr(out), _Ptr(np.array(lens)), len(lens), group, h, kv, cap, cores, 256)
        ours = decode_kv_splits(
            lens, num_heads=h, num_kv_heads=kv, max_kv_splits=cap, core_count=cores,
            num_group=group,
        )  # fmt: skip
        assert out[::group].tolist() == ours, (h, kv, lens, cap, cores, group)


@pytest.mark.parametrize("version", ["0.5.17", "0.5.18"])
def test_head_tiles_is_the_releases(version: str) -> None:
    """MHA: one program per query head; GQA: per block of up to 16 heads of a KV head (0.5.17
    writes the block inline, 0.5.18 names it _GROUPED_BLOCK_H)."""
    src = wheel_text("sglang", version, DECODE)
    assert "grid = (batch, head_num, MAX_KV_SPLITS)" in src
    block = "_GROUPED_BLOCK_H" if "_GROUPED_BLOCK_H = 16" in src else "BLOCK_H"
    assert f"{block} = 16" in src
    assert f"triton.cdiv(head_num, min({block}, kv_group_num))" in src
    assert head_tiles(12, 2) == 2 and head_tiles(32, 32) == 32 and head_tiles(64, 2) == 4


def test_c5_takes_the_cap_at_every_depth() -> None:
    """C5 (12 query / 2 KV heads per rank, ROCm's cap of 16, 96 CUs or the 48 WGPs ROCm's torch
    may report): one to four streams split 16 ways from 1K to 131K, so the split rule puts no
    bend in the decode-by-depth curve; the roofline's KV read stays linear in depth."""
    for cores, streams, depth in itertools.product(
        (48, 96), (1, 2, 4), (1024, 16384, 32768, 65536, 131072)
    ):
        splits = decode_kv_splits(
            [depth] * streams, num_heads=12, num_kv_heads=2, max_kv_splits=16, core_count=cores
        )
        assert splits == [16] * streams
    # a full batch of short sequences fills the GPU with fewer splits (4080 SUPER, TP 1)
    assert (
        decode_kv_splits([512] * 64, num_heads=24, num_kv_heads=4, max_kv_splits=8, core_count=80)
        == [1] * 64
    )


def test_mtp_verify_off_gfx95_runs_the_serial_prefix_extend_kernel() -> None:
    """0.5.18 runs an EAGLE/NEXTN target-verify step through the split-KV verify kernel only on
    gfx95 (MI350/355); elsewhere, RDNA 3 included, it falls back to extend_attention_fwd, one
    program per (sequence, query head, 64-query tile) walking the whole prefix, with 64x64
    tiles on HIP off gfx95. Padded to 64 query rows, 4 verify tokens of C5's head_dim 256 cost
    4 x 64 x 256 FLOP per prefix token, query head and layer: at peak WMMA (512 FLOP/clk/CU,
    2.5 GHz, a program on a 2-CU WGP) that is >= 0.41 us per prefix token per verify step over
    16 layers, 54 ms at 131K, above C5's measured step growth even if all 3 drafts were
    accepted (44 ms): C5's ROCm fork does not run this path, so its kernels are not the public
    release's and the roofline keeps pricing the verify read as split-KV decode."""
    backend = " ".join(wheel_text("sglang", "0.5.18", BACKEND).split())
    assert "self.use_verify_splitkv = ( is_gfx95_supported()" in backend
    assert (
        "def _should_use_verify_shared_kv(model_config, topk, use_mla, use_verify_splitkv):"
        " if not is_gfx95_supported() or topk != 1: return False" in backend
    )
    extend = wheel_text("sglang", "0.5.18", EXTEND)
    hip = extend.split("if _is_hip:", 1)[1].split("else:\n        if _is_cuda", 1)[0]
    assert hip.rstrip().endswith("BLOCK_M, BLOCK_N = (64, 64)\n            num_warps = 4")
    assert "grid = (batch_size, head_num, triton.cdiv(max_len_extend, BLOCK_M))" in extend
    floor_s = 4 * 64 * 256 / (2 * 512 * 2.5e9) * 16 * 131072
    measured_growth_s = (1 / 42.0 - 1 / 78.4) * 4  # tok/s at 131K and 0K, 4 tokens per step
    assert floor_s > measured_growth_s
