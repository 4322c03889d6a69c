"""Profile probe (calls 43-44, not shipped): which pipes the INT4 plane kernel keeps busy at M = 1
and 16 on the largest and the smallest shape, with the shipped configs (split-K with
ATOMIC_REDUCE), and its executed SASS instruction mix, under Nsight Compute. One launch each
between cudaProfilerStart/Stop, after two warm-up launches. Run from the repository root; call 43
(ncu_pipes-call43.txt):

    ncu --clock-control none --profile-from-start off --section ComputeWorkloadAnalysis \
        --section InstructionStats --metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum,\
sm__cycles_elapsed.avg --print-metric-instances values --print-details all \
        python3 reports/kernels/data/call38/ncu_pipes_probe.py

call 44 (ncu_opcodes-call44.txt; `details` names each opcode's count):

    ncu --clock-control none --profile-from-start off --metrics sass__inst_executed_per_opcode,\
smsp__inst_executed.sum,gpu__time_duration.sum --print-metric-instances details \
        python3 reports/kernels/data/call38/ncu_pipes_probe.py
"""

import sys

sys.path.insert(0, ".")
import torch

from kernels_tuning import bench, shim

cases = [(34816, 5120, 1), (34816, 5120, 16), (5120, 3072, 1), (5120, 3072, 16)]
launch = []
for n, k, m in cases:
    p = bench.make_problem("int4", m, n, k)
    cfg = shim.get_config("int4", n, k, m, check_provenance=False)
    print("int4", n, k, m, cfg, flush=True)
    launch.append((f"int4 {n}x{k} M={m}", lambda p=p, cfg=cfg: p.launch(cfg, 0)))
for _name, fn in launch:  # compile + warm
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
