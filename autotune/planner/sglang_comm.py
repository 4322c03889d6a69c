"""Where NCCL's memory at TP > 1 falls against the free-memory reading SGLang sizes its KV pool
from (the pre-load total: ModelRunner.init_torch_distributed's min_per_gpu_memory, from 0.5.18
distributed/bootstrap.py's pre_model_load_memory).

Every release reads it after init_distributed_environment and initialize_model_parallel: the TP
group's PyNcclCommunicator (with its warmup all_reduce) and the custom all-reduce buffers are set
up before it (0.5.18's bootstrap says so: transport allocations are exercised "before measuring
pre_model_load_memory so [they] are included in later KV-cache sizing"). From the reading to the
KV profile no device collective runs: load_model's barrier and the profile's MIN go over the CPU
group. One exception, before 0.4.6.post4: get_available_gpu_memory reduced its reading as a CUDA
tensor over the default process group, whose NCCL communicator torch builds at that first
collective, right after the value was read and before `Load weight begin`.

So on an NVLink rank (vllm_memory.NVLINK_ARCHS, Hopper's measured size HOPPER_TP_NON_TORCH_MIB):
  - from 0.4.6.post4 the buffers are inside the reading: a pre-load free memory the log gives
    (`Load weight begin`, or after-load + `mem usage`) already lacks them, and one estimated from
    the capacity loses them; nothing comes off the static budget after it;
  - before, the world communicator is set up after the reading: it comes off the budget whole
    when `pre` is estimated from the capacity; a logged `pre` (read after it) stands for the
    reading less that communicator, so the budget loses its (1 - mem_fraction_static) share."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.hardware.gpus import GPUSpec
from autotune.planner import sglang_history
from autotune.planner.sglang_release import Release
from autotune.planner.vllm_memory import HOPPER_TP_NON_TORCH_MIB, NVLINK_ARCHS

# The first release whose free-memory reading is reduced over the CPU group (utils.py).
CPU_GROUP_READING_SINCE: Release = (4, 6, 4)


@dataclass(frozen=True)
class CommSplit:
    """NCCL's memory on one rank (GiB): what `pre` loses (set up before SGLang's reading) and
    what the static budget loses after it."""

    before_reading_gib: float = 0.0
    after_reading_gib: float = 0.0


def comm_split(
    gpu: GPUSpec, tp: int, version: str, *, pre_logged: bool, mem_fraction_static: float
) -> CommSplit:
    """Module docstring; `pre_logged`: the free memory before weights comes from the launch's
    log (read after the communicators), not from the GPU's capacity."""
    if tp <= 1 or gpu.arch not in NVLINK_ARCHS:
        return CommSplit()
    size = HOPPER_TP_NON_TORCH_MIB / 1024
    rel = sglang_history.release(version)
    if rel is None or rel >= CPU_GROUP_READING_SINCE:
        return CommSplit(before_reading_gib=0.0 if pre_logged else size)
    if pre_logged:
        return CommSplit(after_reading_gib=size * (1 - mem_fraction_static))
    return CommSplit(after_reading_gib=size)
