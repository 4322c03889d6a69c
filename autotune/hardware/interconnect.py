"""The link a tensor-parallel all-reduce runs over, and what NCCL/RCCL reach on it.

Bus bandwidth is what nccl-tests' all_reduce_perf reports as busbw: a ring all-reduce of S bytes
over n ranks takes 2 (n - 1) / n * S / busbw. The shares below are MODELLED from published busbw
at large messages (docs.alayanew.com, "NCCL-tests in practice", 2026-05-06): 8 x A100 SXM4
230-250 GB/s on NVLink 3's 300 GB/s per direction (0.8); 8 x H100 PCIe 35-45 GB/s on PCIe gen5
x16's 63 GB/s (about 0.635). Without P2P (Ada GeForce, NCCL_P2P_DISABLE) every byte is staged
through host memory, crossing each PCIe link twice and a host copy: a quarter of the link, which
caps TP2 prefill on Ada near 2K tok/s as the field reports (FIELD-NOTES F3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from autotune.hardware.gpus import GPUSpec

# PCIe payload per lane and direction after line coding, GB/s (gen 1-2: 8b/10b; 3+: 128b/130b;
# gen 6 FLIT at 64 GT/s).
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
FABRIC_SHARE = 0.8
P2P_SHARE = 0.635
HOST_SHARE = 0.254
LATENCY_S = {"fabric": 8e-6, "p2p": 15e-6, "host": 30e-6}

LinkKind = Literal["fabric", "p2p", "host"]


@dataclass(frozen=True)
class Link:
    kind: LinkKind
    bus_gbs: float  # all-reduce bus bandwidth, GB/s
    latency_s: float  # per all-reduce call

    def allreduce_s(self, nbytes: float, ranks: int) -> float:
        """One ring all-reduce of `nbytes` over `ranks` GPUs."""
        if ranks <= 1:
            return 0.0
        return 2 * (ranks - 1) / ranks * nbytes / (self.bus_gbs * 1e9) + self.latency_s


def pcie_gbs(gpu: GPUSpec) -> float:
    """The slot's raw payload bandwidth per direction."""
    return PCIE_LANE_GBS[gpu.pcie_gen] * gpu.pcie_lanes


def tp_link(gpu: GPUSpec, tp: int) -> Link:
    """The link `tp` ranks of this GPU all-reduce over: the fabric when the GPU has one, else
    PCIe peer to peer, else staged through host memory."""
    # A bridged pair (H100 NVL) carries a TP2 group; a wider ring also crosses PCIe, which sets
    # its pace.
    if gpu.fabric_gbs and (not gpu.fabric_group or tp <= gpu.fabric_group):
        mesh = gpu.fabric_mesh_links
        # A full mesh gives a TP group only the links to its own peers (RCCL rings over them).
        share = min(max(tp - 1, 1), mesh) / mesh if mesh else 1.0
        return Link("fabric", gpu.fabric_gbs * share * FABRIC_SHARE, LATENCY_S["fabric"])
    if gpu.p2p:
        return Link("p2p", pcie_gbs(gpu) * P2P_SHARE, LATENCY_S["p2p"])
    return Link("host", pcie_gbs(gpu) * HOST_SHARE, LATENCY_S["host"])
