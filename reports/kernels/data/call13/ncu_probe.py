"""Profile probe (not shipped): one launch each of our INT4 plane kernel, our FP8 own-file kernel,
cuBLAS FP8 and bf16 matmul at decode size, between cudaProfilerStart/Stop for ncu."""

import sys

sys.path.insert(0, ".")
import torch

from kernels_tuning import bench, shim

cases = [("int4", 34816, 5120, 1), ("int4", 5120, 3072, 1), ("fp8", 5120, 3072, 1)]
launch = []
for kind, n, k, m in cases:
    p = bench.make_problem(kind, m, n, k, baselines=True)
    cfg = shim.get_config(kind, n, k, m, check_provenance=False)
    print(kind, n, k, m, cfg, flush=True)
    launch.append((f"ours {kind} {n}x{k}", lambda p=p, cfg=cfg: p.launch(cfg, 0)))
    s = p.sets[0]
    if kind == "fp8":
        launch.append(
            (
                "cublas fp8",
                lambda s=s: torch._scaled_mm(
                    s["A_pt"],
                    s["B_pt"].t(),
                    scale_a=s["sa"],
                    scale_b=s["sb"],
                    out_dtype=torch.bfloat16,
                ),
            )
        )
    else:
        launch.append((f"bf16 {n}x{k}", lambda s=s: torch.matmul(s["x"], s["w_bf16_t"].t())))
for name, fn in launch:  # compile + warm
    fn()
    fn()
torch.cuda.synchronize()
torch.cuda.profiler.start()
for name, fn in launch:
    torch.cuda.nvtx.range_push(name)
    fn()
    torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
print("done")
