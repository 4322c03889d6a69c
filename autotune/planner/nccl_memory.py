"""NCCL's device memory on one rank of a one-node NVSwitch TP group, derived from NCCL's source,
for the NCCL releases that vLLM's torch pins ship (2.20.5 and 2.21.5; later ones are not derived).

What one communicator holds once its rings and trees are connected (NCCL connects them at init in
these releases) and its NVLink SHARP (NVLS) buffers are bound:
- a P2P receive connection: sizeof(ncclRecvMem) (4 KiB, MEM_ALIGN) + the three protocols' buffers
  (init.cc computeBuffSizes: SIMPLE DEFAULT_BUFFSIZE 4 MiB, LL 8 x 512 x 8 x 16 B = 512 KiB, LL128
  120 x 640 x 8 x 8 B = 4.6875 MiB) rounded up to CUDA_IPC_MIN (2 MiB, comm.h): 10 MiB
  (transport/p2p.cc p2pRecvSetup; Hopper uses P2P write, graph/paths.cc enables read only for
  sm_80 pairs, so SIMPLE stays on the receiver). A send connection: sizeof(ncclSendMem) (4 KiB)
  rounded up to 2 MiB (p2pSendSetup).
- per channel the ring connects prev -> me -> next; the intra-node tree is a chain over the same
  order (up = prev, down = next), so at 2 ranks it reuses the ring's two connections and above 2
  a middle rank adds a receive from down and a send to up (init.cc: rings, then trees, through
  ncclTransportP2pConnect, which skips connected peers).
- NVLS (transport/nvls.cc ncclNvlsSetup), only above 2 GPUs (ncclNvlsInit: gpuCount <= 2 returns)
  and where the driver reports multicast (NVSwitch systems): a unicast buffer of nHeads x
  nChannels x 2 x (buffSize + memSize), nHeads = the node's ranks, memSize NVLS_MEM_ALIGN_SIZE
  (2 MiB); buffSize is comm->buffSizes[SIMPLE] (4 MiB) in 2.20.5 and NVLS_CHUNKSIZE (128 KiB) x
  NCCL_STEPS (8) = 1 MiB in 2.21.5. The size is rounded up to the multicast granularity (a driver
  value, not counted here: the figures are lower bounds).

Channels: 24 on an 8-GPU H100 / H200 NVSwitch node, as NCCL logs it ("24 coll channels, ..., 16
nvls channels" on p5.48xlarge nccl-tests logs) and as vLLM issue #9699's NVLS line on 8 x H200
(NCCL 2.20.5) implies: nvlsPerRankSize 301989888 = 24 x 2 x (4 MiB + 2 MiB). Taken for 3 .. 8
ranks of a node of 18-link NVLink 4 GPUs; other fabrics are not derived. 3 .. 7 ranks are an
extrapolation: NCCL 2.20.5 / 2.21.5 have no channel count per rank count. comm->nChannels (the
count nvls.cc sizes its buffer by; NCCL_NVLS_NCHANNELS, 16 by default, is the NVLS algorithm's
own) comes out of the topology search (graph/search.cc ncclTopoCompute: the fastest
sm90SpeedArrayIntra step whose channels the GPU's links carry, then ncclTopoDupChannels, which
doubles it when the per-channel bandwidth allows), seen only at 8 ranks; the plan says so
(vllm_legacy.plan_history).
"""

from __future__ import annotations

from autotune.hardware.gpu_spec import GPUSpec
from autotune.planner.common import MIB
from autotune.planner.vllm_history import at_least

CUDA_IPC_MIN = 2 * MIB  # comm.h, 2.20.5 / 2.21.5
MEM_ALIGN = 4096  # comm.h: ncclSendMem / ncclRecvMem are one MEM_ALIGN page
NCCL_STEPS = 8  # device.h
SIMPLE_BUFF = 1 << 22  # init.cc DEFAULT_BUFFSIZE
LL_BUFF = 8 * 512 * NCCL_STEPS * 16  # NCCL_LL_LINES_PER_THREAD x NCCL_LL_MAX_NTHREADS x 16 B
LL128_BUFF = 120 * 640 * NCCL_STEPS * 8  # NCCL_LL128_ELEMS_PER_THREAD x _MAX_NTHREADS x 8 B
NVLS_MEM_ALIGN_SIZE = 1 << 21  # nvls.cc
NVLS_CHUNKSIZE = 128 * 1024  # nvls.cc NCCL_NVLS_CHUNKSIZE default, from 2.21
HOPPER_NVSWITCH_CHANNELS = 24
NVLINK4_FULL_GBS = 450.0  # 18 links (link_facts._NVLINK4): the fabric the 24 channels are for
# vLLM's TP group holds two communicators by the end of its profiling run: the PyNcclCommunicator
# (created at init, with a warmup all_reduce) and torch's process group for the same ranks (its
# communicator is built at the first collective on device_group: the all-reduce in 0.5.4 ..
# 0.6.4, whose pynccl is off outside graphs; the logits gather / all_gather later). Read from the
# 0.5.4 .. 0.8.4 wheels (tests/planner/test_nccl_memory.py).
VLLM_TP_COMMUNICATORS = 2
# torch's nvidia-nccl-cu12 pin for the torch that vLLM requires (its wheel's Requires-Dist):
# torch 2.4.x -> 2.20.5, 2.5.x and 2.6.0 -> 2.21.5 (PyTorch's binary build matrix).
_NCCL_FOR_TORCH = {"2.4": "2.20.5", "2.5": "2.21.5", "2.6": "2.21.5"}
# vLLM releases -> torch (Requires-Dist of the wheels): 0.5.4 .. 0.6.3.post1 torch 2.4.0,
# 0.6.4 .. 0.7.3 torch 2.5.1, 0.8.0 .. 0.8.5 torch 2.6.0. Earlier and later ones: not derived.
VLLM_TORCH = (("0.5.4", "2.4"), ("0.6.4", "2.5"), ("0.8.0", "2.6"), ("0.9.0", None))


def _align(n: int, to: int) -> int:
    return -(-n // to) * to


def recv_connection_bytes() -> int:
    """One P2P receive connection (write mode): 10 MiB."""
    return _align(MEM_ALIGN + SIMPLE_BUFF + LL_BUFF + LL128_BUFF, CUDA_IPC_MIN)


def send_connection_bytes() -> int:
    """One P2P send connection (write mode): 2 MiB."""
    return _align(MEM_ALIGN, CUDA_IPC_MIN)


def ring_tree_bytes(ranks: int, channels: int = HOPPER_NVSWITCH_CHANNELS) -> int:
    """Ring and chain-tree connections of a middle rank of a one-node communicator."""
    if ranks <= 1:
        return 0
    pairs = 1 if ranks == 2 else 2  # the tree's up / down are the ring's peers
    return channels * pairs * (recv_connection_bytes() + send_connection_bytes())


def nvls_bytes(ranks: int, nccl: str, channels: int = HOPPER_NVSWITCH_CHANNELS) -> int:
    """NVLS unicast buffer of one rank (before the multicast granularity); 0 at 2 ranks."""
    if ranks <= 2:
        return 0
    buff = SIMPLE_BUFF if nccl == "2.20.5" else NVLS_CHUNKSIZE * NCCL_STEPS
    return ranks * channels * 2 * (buff + NVLS_MEM_ALIGN_SIZE)


def communicator_bytes(ranks: int, nccl: str, multicast: bool) -> int:
    """One communicator's buffers on a rank of a one-node NVSwitch group."""
    return ring_tree_bytes(ranks) + (nvls_bytes(ranks, nccl) if multicast else 0)


def nccl_for_vllm(version: str) -> str | None:
    """The NCCL that the release's torch pin ships, where derived here."""
    torch = None
    for since, pinned in VLLM_TORCH:
        if at_least(version, since):
            torch = pinned
    return _NCCL_FOR_TORCH.get(torch) if torch else None


def nvswitch_node(gpu: GPUSpec) -> bool:
    """An 18-link NVLink 4 switch node (H100 / H200 / H20 SXM): multicast, 24 channels."""
    return (
        gpu.arch == "sm_90"
        and gpu.fabric_gbs == NVLINK4_FULL_GBS
        and gpu.fabric_group == 0
        and gpu.fabric_mesh_links == 0
    )


def extrapolated_channels_note(gpu: GPUSpec, tp: int, version: str) -> str | None:
    """The plan's assumption where the growth below applies the 8-rank channel count at 3 .. 7
    ranks (module docstring); None where it does not."""
    if not 2 < tp < 8 or not vllm_tp_growth_mib(gpu, tp, version):
        return None
    return (
        f"NCCL buffers at TP {tp}: {HOPPER_NVSWITCH_CHANNELS} channels a communicator, the count "
        "NCCL logs on 8-GPU NVSwitch nodes; at fewer GPUs it is assumed, not derived"
    )


def vllm_tp_growth_mib(gpu: GPUSpec, tp: int, version: str, gpus_per_node: int = 8) -> int:
    """What the TP group's NCCL buffers hold on a rank at `tp` beyond `tp` = 2 (where the
    planner's Hopper figure was measured), for releases whose NCCL is derived; 0 elsewhere, and
    for groups that span nodes (net transport: not derived)."""
    nccl = nccl_for_vllm(version)
    if nccl is None or tp <= 2 or tp > gpus_per_node or not nvswitch_node(gpu):
        return 0
    grow = communicator_bytes(tp, nccl, True) - communicator_bytes(2, nccl, True)
    return VLLM_TP_COMMUNICATORS * grow // MIB
