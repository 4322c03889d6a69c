"""Probe of a Gated DeltaNet layer's chunked prefill kernels on a CUDA GPU, as JSON.

    python benchmarks/gdn_prefill_probe.py --impl sglang --path DIR [--json F]
    python benchmarks/gdn_prefill_probe.py --path DIR --decode 1 2 4 ... [--json F]

What a hybrid model's GDN layer runs in an SGLang extend (prefill) forward beyond its
projections: `chunk_gated_delta_rule` (l2norm of q and k, the chunk-local gate cumsum, the
intra-chunk WY representation, the state recurrence over 64-token chunks, the output), called
as SGLang 0.5.16's TritonGDNKernel.extend calls it (head_first False, use_qk_l2norm_in_kernel,
the state read from and written back to a pool slot by index). `--impl sglang` imports the
Triton kernels from a copy of the release wheel's sglang/kernels/ops/attention/fla folder under
DIR (with a one-line shim for sglang.srt.utils.common.torch_release); `--impl fla` the
fla-core package these kernels come from. The GDN projections are GEMMs the roofline already
prices; for scale, the same run times one bf16 GEMM of a 27B-class GDN layer's input
projection (5,120 -> 16,384) at every token count.

With --decode, the decode step instead: fused_sigmoid_gating_delta_rule_update as
TritonGDNKernel.decode calls it (one token per running request, each request's fp32 state read
from and written back to its pool slot), by the number of running requests.

Shapes: key and value heads per rank (16 and 48 for the 27B dense hybrids of Qwen3.5/3.6/3.8 at
TP 1, 16 and 32 for the A3B MoE ones and Qwen3-Next, divided under TP), head dims 128, one
sequence of T tokens. Times are CUDA-event medians of `--iters` runs after
warm-up.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from typing import Any

import torch


def _kernel(impl: str) -> Any:
    if impl == "sglang":
        from sglang.kernels.ops.attention.fla.chunk import (  # type: ignore[import-not-found]
            chunk_gated_delta_rule,
        )

        return chunk_gated_delta_rule
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule  # type: ignore[import-not-found]

    return chunk_gated_delta_rule


def _time(fn: Any, iters: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        b = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return float(statistics.median(times))


def _graph_time(fn: Any, iters: int) -> float | None:
    """The GPU's own time: one call captured in a CUDA graph and replayed (a prefill graph
    runs it so; a launched call's events also count the host's launch gaps). Not
    kernels_tuning.bench.time_graph, which packs as many calls into a graph as fill 400 us:
    the committed figures are one call per replay, and a 32K-token call alone is 3.6 ms."""
    try:
        s = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
    except Exception as e:  # noqa: BLE001 - a kernel that cannot be captured: report, go on
        print(f"  graph capture failed: {type(e).__name__}: {str(e)[:120]}", flush=True)
        return None
    return _time(graph.replay, iters)


def probe(
    impl: str, tokens: list[int], heads: list[tuple[int, int]], iters: int
) -> dict[str, Any]:
    kern = _kernel(impl)
    dev = torch.device("cuda")
    dk, dv = 128, 128
    rows = []
    for hk, hv in heads:
        for t in tokens:
            q = torch.randn(1, t, hk, dk, device=dev, dtype=torch.bfloat16)
            k = torch.randn(1, t, hk, dk, device=dev, dtype=torch.bfloat16)
            v = torch.randn(1, t, hv, dv, device=dev, dtype=torch.bfloat16)
            g = torch.nn.functional.logsigmoid(
                torch.randn(1, t, hv, device=dev, dtype=torch.float32)
            )
            # float32 gates and betas, as SGLang's fused_gdn_gating writes them
            beta = torch.rand(1, t, hv, device=dev, dtype=torch.float32).sigmoid()
            cu = torch.tensor([0, t], device=dev, dtype=torch.long)
            args: dict[str, Any] = {
                "q": q,
                "k": k,
                "v": v,
                "g": g,
                "beta": beta,
                "cu_seqlens": cu,
                "use_qk_l2norm_in_kernel": True,
            }
            if impl == "sglang":
                # the state is read from and written back to a pool slot, as SGLang runs it
                args["initial_state"] = torch.zeros(4, hv, dv, dk, device=dev, dtype=torch.float32)
                args["initial_state_indices"] = torch.tensor([1], device=dev, dtype=torch.int32)
                args["head_first"] = False
            else:
                args["initial_state"] = torch.zeros(1, hv, dk, dv, device=dev, dtype=torch.float32)
                args["output_final_state"] = True
            run = functools.partial(kern, **args)
            ms = _time(run, iters)
            gms = _graph_time(run, iters)
            rows.append(
                {
                    "value_heads": hv,
                    "key_heads": hk,
                    "tokens": t,
                    "ms": round(ms, 4),
                    "graph_ms": None if gms is None else round(gms, 4),
                }
            )
            print(
                f"Hk={hk:2d} Hv={hv:3d} T={t:6d}: launched {ms:8.3f} ms, graph replay {gms} ms",
                flush=True,
            )
            del q, k, v, g, beta, args, run
    gemm = []
    for t in tokens:
        x = torch.randn(t, 5120, device=dev, dtype=torch.bfloat16)
        w = torch.randn(5120, 16384, device=dev, dtype=torch.bfloat16)
        ms = _time(functools.partial(torch.matmul, x, w), iters)
        gemm.append(
            {"tokens": t, "ms": round(ms, 4), "tflops": round(2 * t * 5120 * 16384 / ms / 1e9, 1)}
        )
        print(f"GEMM T={t:6d}: {ms:8.3f} ms  {gemm[-1]['tflops']} TFLOP/s", flush=True)
    return {
        "impl": impl,
        "device": torch.cuda.get_device_name(),
        "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
        "torch": torch.__version__,
        "iters": iters,
        "gdn": rows,
        "gemm_5120x16384_bf16": gemm,
    }


def probe_decode(
    batches: list[int], heads: list[tuple[int, int]], iters: int
) -> list[dict[str, Any]]:
    """SGLang's GDN decode step for one layer (fused_sigmoid_gating_delta_rule_update, as
    TritonGDNKernel.decode calls it: one token per request, the fp32 state read from and
    written back to its pool slot) by the number of running requests."""
    from sglang.kernels.ops.attention.fla.fused_sigmoid_gating_recurrent import (  # type: ignore[import-not-found]
        fused_sigmoid_gating_delta_rule_update as kern,
    )

    dev = torch.device("cuda")
    dk = dv = 128
    rows = []
    for hk, hv in heads:
        for n in batches:
            bf = torch.bfloat16
            args: dict[str, Any] = {
                "A_log": torch.randn(hv, device=dev, dtype=torch.float32),
                "a": torch.randn(n, hv, device=dev, dtype=bf),
                "dt_bias": torch.randn(hv, device=dev, dtype=bf),
                "softplus_beta": 1.0,
                "softplus_threshold": 20.0,
                "q": torch.randn(1, n, hk, dk, device=dev, dtype=bf),
                "k": torch.randn(1, n, hk, dk, device=dev, dtype=bf),
                "v": torch.randn(1, n, hv, dv, device=dev, dtype=bf),
                "b": torch.randn(n, hv, device=dev, dtype=bf),
                "initial_state_source": torch.zeros(n + 1, hv, dv, dk, device=dev),
                "initial_state_indices": torch.arange(1, n + 1, device=dev, dtype=torch.int32),
                "use_qk_l2norm_in_kernel": True,
                "cu_seqlens": torch.arange(n + 1, device=dev, dtype=torch.int32),
            }
            run = functools.partial(kern, **args)
            gms = _graph_time(run, iters)
            state = n * hv * dv * dk * 4 * 2  # fp32 state read and written
            rows.append(
                {
                    "key_heads": hk,
                    "value_heads": hv,
                    "batch": n,
                    "graph_ms": gms,
                    "state_gbs": None if gms is None else round(state / gms / 1e6, 1),
                }
            )
            print(
                f"decode Hk={hk} Hv={hv} batch={n:5d}: graph {gms} ms, state {rows[-1]['state_gbs']} GB/s",
                flush=True,
            )
            del args, run
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--impl", choices=("sglang", "fla"), default="sglang")
    ap.add_argument("--path", help="folder holding sglang/kernels/ops/attention/fla (impl sglang)")
    ap.add_argument(
        "--tokens", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
    )
    ap.add_argument(
        "--heads",
        nargs="+",
        default=["16:48", "16:32", "8:24", "8:16", "4:8", "2:4"],
        help="key:value heads per rank (value heads a multiple of key heads)",
    )
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--decode", type=int, nargs="*", help="time the decode step at these batches")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.path:  # the wheel's kernels, unpacked there
        sys.path.insert(0, a.path)
    heads = [(int(h.split(":")[0]), int(h.split(":")[1])) for h in a.heads]
    out: dict[str, Any]
    if a.decode:
        decode = probe_decode(a.decode, heads, a.iters)
        out = {"device": torch.cuda.get_device_name(), "iters": a.iters, "decode": decode}
    else:
        out = probe(a.impl, a.tokens, heads, a.iters)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
