"""Probe of SGLang 0.5.17's HiCache load-back copies on a CUDA GPU (CuPy only), as JSON.

    python benchmarks/hicache_copy_probe.py [--tokens 16384] [--layer-ms 14]

Replicas of the two JIT kernels start_loading runs with the default io backend `kernel` and
layout `page_first` (read from the release's wheel):

- kv: kvcacheio/hicache.cuh hicache_transfer_per_layer, instantiated as
  HybridCacheController runs it for 4 KV heads x 256 dims in fp8 (element_size 1024 B,
  unroll 2, block_quota 2, 1024 threads): a worker of 16 threads copies one token's K then V
  (8 x 8-byte L1::no_allocate loads each), 64 workers a block, grid min(ceil(n / 64), quota);
  host rows are page_first [token][layer][1024 B].
- mamba: kvcacheio/transfer_mamba.cuh transfer_mamba_load_kernel: grid min(2, items) blocks of
  1024 threads, 16-byte loads one step ahead of the store; host states page_first
  [slot][layer][item].

Measured, each on its own stream: the copy engine's H2D bandwidth (reference); one KV layer of
`tokens` tokens at block quota 2 (SGLang's) and wider; one layer of a mamba SSM state and conv
window; the whole load of a Qwen3.8-27B-shaped hybrid (64 transfer layers: full attention at
3, 7, ..., 63; a host-only mamba state copied twice, as build_hicache_transfers does); that load
beside a compute stream of fp16 GEMMs; and the replay pipeline: a compute stream that waits for
layer i's copy event before its layer i work (LayerDoneCounter), against the same work without
waits. Nothing here is SGLang's own binary: the kernels are transcribed.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import time
from typing import Any

import cupy as cp  # type: ignore[import-not-found]

SRC = r"""
typedef long long i64;
__device__ __forceinline__ uint2 ld2(const uint2* p) {
  uint2 r;
  asm volatile("ld.global.L1::no_allocate.v2.b32 {%0,%1},[%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
  return r;
}
__device__ __forceinline__ void st2(uint2* p, uint2 v) {
  asm volatile("st.global.L1::no_allocate.v2.b32 [%0],{%1,%2};" ::"l"(p), "r"(v.x), "r"(v.y));
}
__device__ __forceinline__ uint4 ld4(const uint4* p) {
  uint4 r;
  asm volatile("ld.global.L1::no_allocate.v4.b32 {%0,%1,%2,%3},[%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}
__device__ __forceinline__ void st4(uint4* p, uint4 v) {
  asm volatile("st.global.L1::no_allocate.v4.b32 [%0],{%1,%2,%3,%4};"
               ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}
// hicache_transfer_per_layer<int64, 1024, 2, quota, 1024>
extern "C" __global__ void __launch_bounds__(1024, 1)
kv_one_layer(char* k_dst, char* v_dst, const i64* idx_dst, const char* k_src, const char* v_src,
             const i64* idx_src, i64 src_stride, i64 dst_stride, unsigned length, unsigned quota) {
  const unsigned kThreads = 16, kWorkersPerBlock = 1024 / kThreads;
  const unsigned workers = kWorkersPerBlock * quota;
  const unsigned lane = threadIdx.x % kThreads;
  for (unsigned i = blockIdx.x * kWorkersPerBlock + threadIdx.x / kThreads; i < length;
       i += workers) {
    const i64 ps = idx_src[i], pd = idx_dst[i];
    uint2 vec[8];
    const uint2* sk = (const uint2*)(k_src + ps * src_stride);
    uint2* dk = (uint2*)(k_dst + pd * dst_stride);
#pragma unroll
    for (int j = 0; j < 8; ++j) vec[j] = ld2(sk + j * kThreads + lane);
#pragma unroll
    for (int j = 0; j < 8; ++j) st2(dk + j * kThreads + lane, vec[j]);
    const uint2* sv = (const uint2*)(v_src + ps * src_stride);
    uint2* dv = (uint2*)(v_dst + pd * dst_stride);
#pragma unroll
    for (int j = 0; j < 8; ++j) vec[j] = ld2(sv + j * kThreads + lane);
#pragma unroll
    for (int j = 0; j < 8; ++j) st2(dv + j * kThreads + lane, vec[j]);
  }
}
// transfer_mamba_load_kernel
extern "C" __global__ void __launch_bounds__(1024, 1)
mamba_load(const char* src_base, char* dst_base, const i64* src_idx, const i64* dst_idx,
           i64 item_size, i64 src_layout_dim, i64 layer_id, i64 num_items) {
  const int kStep = 1024 * 16;
  for (i64 item = blockIdx.x; item < num_items; item += gridDim.x) {
    const char* src = src_base + src_idx[item] * src_layout_dim + layer_id * item_size;
    char* dst = dst_base + dst_idx[item] * item_size;
    const i64 base = (i64)threadIdx.x * 16;
    if (base < item_size) {
      uint4 cur = ld4((const uint4*)(src + base));
      i64 off;
      for (off = base + kStep; off < item_size; off += kStep) {
        uint4 nxt = ld4((const uint4*)(src + off));
        st4((uint4*)(dst + off - kStep), cur);
        cur = nxt;
      }
      st4((uint4*)(dst + off - kStep), cur);
    }
  }
}
"""

# Qwen3.8-27B (the calibration model): 64 layers, full attention every 4th from 3.
LAYERS = 64
FULL = set(range(3, LAYERS, 4))
KV_ELEM = 4 * 256  # fp8 bytes of one token's K (or V) in one layer
SSM_ITEM = 48 * 128 * 128 * 4  # one layer's fp32 SSM state
CONV_ITEM = (48 * 128 + 2 * 16 * 128) * 3 * 2  # one layer's bf16 conv window


def pinned(nbytes: int) -> tuple[Any, int]:
    """Pinned host memory and the address kernels read it at (the same under UVA)."""
    mem = cp.cuda.alloc_pinned_memory(nbytes)
    return mem, int(mem.ptr)


class Probe:
    def __init__(self, tokens: int) -> None:
        mod = cp.RawModule(code=SRC, options=("-std=c++14",))
        self.kv_kernel = mod.get_function("kv_one_layer")
        self.mamba_kernel = mod.get_function("mamba_load")
        self.tokens = tokens
        n_full = len(FULL)
        host_tokens = 2 * tokens
        self._keep: list[Any] = []
        kv_host = 2 * host_tokens * n_full * KV_ELEM
        mem, self.kv_host = pinned(kv_host)
        self._keep.append(mem)
        self.k_host, self.v_host = self.kv_host, self.kv_host + kv_host // 2
        self.kv_stride_src = n_full * KV_ELEM  # page_first: a token's layers are contiguous
        pool = 4 * tokens
        self.k_dev = cp.zeros((n_full, pool * KV_ELEM), dtype=cp.uint8)
        self.v_dev = cp.zeros_like(self.k_dev)
        self.idx_src = cp.arange(tokens, dtype=cp.int64)  # a node's host slots run in order
        self.idx_dst = cp.random.permutation(pool)[:tokens].astype(cp.int64)
        n_lin = LAYERS - n_full
        slots = 4
        mem, self.ssm_host = pinned(slots * n_lin * SSM_ITEM)
        self._keep.append(mem)
        mem, self.conv_host = pinned(slots * n_lin * CONV_ITEM)
        self._keep.append(mem)
        self.ssm_dev = cp.zeros((n_lin, slots * SSM_ITEM), dtype=cp.uint8)
        self.conv_dev = cp.zeros((n_lin, slots * CONV_ITEM), dtype=cp.uint8)
        self.one = cp.zeros(1, dtype=cp.int64)
        self.dst_slots = [cp.full(1, s, dtype=cp.int64) for s in (1, 2)]

    def kv_layer(self, layer: int, quota: int) -> None:
        grid = min(-(-self.tokens // 64), quota)
        off = layer * KV_ELEM
        self.kv_kernel(
            (grid,),
            (1024,),
            (
                self.k_dev[layer],
                self.v_dev[layer],
                self.idx_dst,
                cp.uint64(self.k_host + off),
                cp.uint64(self.v_host + off),
                self.idx_src,
                cp.int64(self.kv_stride_src),
                cp.int64(KV_ELEM),
                cp.uint32(self.tokens),
                cp.uint32(quota),
            ),
        )

    def mamba_layer(self, lin: int, copy: int) -> None:
        n_lin = LAYERS - len(FULL)
        for host, dev, item in (
            (self.ssm_host, self.ssm_dev, SSM_ITEM),
            (self.conv_host, self.conv_dev, CONV_ITEM),
        ):
            self.mamba_kernel(
                (1,),
                (1024,),
                (
                    cp.uint64(host),
                    dev[lin],
                    self.one,
                    self.dst_slots[copy],
                    cp.int64(item),
                    cp.int64(item * n_lin),
                    cp.int64(lin),
                    cp.int64(1),
                ),
            )

    def load_all(self, events: list[Any] | None = None, quota: int = 2) -> None:
        """start_loading's loop: every transfer layer in order, an event after each."""
        f = lin = 0
        for i in range(LAYERS):
            if i in FULL:
                self.kv_layer(f, quota)
                f += 1
            else:
                for copy in (0, 1):
                    self.mamba_layer(lin, copy)
                lin += 1
            if events is not None:
                events[i].record()


def timed(fn: Any, stream: Any, reps: int = 5) -> float:
    """Median seconds of fn() on stream (CUDA events)."""
    out: list[float] = []
    for _ in range(reps + 1):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        with stream:
            a.record()
            fn()
            b.record()
        b.synchronize()
        out.append(float(cp.cuda.get_elapsed_time(a, b)) / 1e3)
    out = sorted(out[1:])
    return out[len(out) // 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--layer-ms", type=float, default=14.0, help="compute per layer to emulate")
    a = ap.parse_args()
    p = Probe(a.tokens)
    load_s = cp.cuda.Stream(non_blocking=True)
    comp_s = cp.cuda.Stream(non_blocking=True)
    res: dict[str, Any] = {"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode()}
    # copy engine reference: 512 MiB pinned -> device
    n = 512 * 2**20
    mem, _ = pinned(n)
    dst = cp.empty(n, dtype=cp.uint8)
    t = timed(lambda: dst.data.copy_from_host_async(ctypes.c_void_p(mem.ptr), n, load_s), load_s)
    res["memcpy_h2d_gbs"] = n / t / 1e9
    kv_bytes = 2 * a.tokens * KV_ELEM
    for quota in (2, 8, 32):
        t = timed(lambda q=quota: p.kv_layer(0, q), load_s)
        res[f"kv_layer_quota{quota}_gbs"] = kv_bytes / t / 1e9
    t = timed(lambda: p.mamba_layer(0, 0), load_s)
    res["mamba_layer_one_copy_gbs"] = (SSM_ITEM + CONV_ITEM) / t / 1e9
    total = len(FULL) * kv_bytes + 2 * (LAYERS - len(FULL)) * (SSM_ITEM + CONV_ITEM)
    res["load_bytes"] = total
    t0 = time.perf_counter()
    with load_s:
        p.load_all()
    res["load_launch_cpu_s"] = time.perf_counter() - t0
    load_s.synchronize()
    res["load_alone_s"] = timed(p.load_all, load_s)
    res["load_alone_gbs"] = total / res["load_alone_s"] / 1e9
    # compute: fp16 GEMMs sized so one layer's worth takes about --layer-ms
    x = cp.random.random((2048, 8192)).astype(cp.float16)
    w = cp.random.random((8192, 8192)).astype(cp.float16)
    one = timed(lambda: cp.matmul(x, w), comp_s, 3)
    per_layer = max(1, round(a.layer_ms / 1e3 / one))

    def layer_work() -> None:
        for _ in range(per_layer):
            cp.matmul(x, w)

    def forward(events: list[Any] | None) -> None:
        for i in range(LAYERS):
            if events is not None:
                comp_s.wait_event(events[i])
            layer_work()

    res["gemms_per_layer"] = per_layer
    res["forward_alone_s"] = timed(lambda: forward(None), comp_s, 3)
    # the replay: copies launched first on the load stream, then the forward waiting per layer
    runs = []
    for _ in range(4):
        events = [cp.cuda.Event(disable_timing=True) for _ in range(LAYERS)]
        start, end, lend = cp.cuda.Event(), cp.cuda.Event(), cp.cuda.Event()
        cp.cuda.Device().synchronize()
        with comp_s:
            start.record()
        load_s.wait_event(start)
        with load_s:
            p.load_all(events)
            lend.record()
        with comp_s:
            forward(events)
            end.record()
        end.synchronize()
        runs.append(
            (
                cp.cuda.get_elapsed_time(start, end) / 1e3,
                cp.cuda.get_elapsed_time(start, lend) / 1e3,
            )
        )
    runs = sorted(runs[1:])
    res["replay_forward_s"], res["replay_load_s"] = runs[len(runs) // 2]
    res["replay_exposed_s"] = res["replay_forward_s"] - res["forward_alone_s"]
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
