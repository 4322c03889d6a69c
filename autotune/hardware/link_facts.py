"""How each catalog GPU reaches its peers: PCIe generation and the scale-up fabric (NVLink, AMD
Infinity Fabric), from the vendors' datasheets. The tensor-parallel all-reduce is priced from
these (hardware/interconnect.py); `--gpu auto` replaces them with what NVML reports."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LinkFacts:
    pcie_gen: int
    # Fabric bandwidth per GPU, one direction, GB/s (half the datasheet's bidirectional figure).
    fabric_gbs: float | None = None
    # Links of a full mesh (AMD xGMI: 7 peers, one link each); 0 = a switch (NVSwitch), where any
    # peer is reached at the full fabric bandwidth.
    fabric_mesh_links: int = 0
    # GPUs one fabric joins (an NVLink bridge: 2); 0 = every GPU of the node.
    fabric_group: int = 0

    def fields(self) -> dict[str, object]:
        return {
            "pcie_gen": self.pcie_gen,
            "fabric_gbs": self.fabric_gbs,
            "fabric_mesh_links": self.fabric_mesh_links,
            "fabric_group": self.fabric_group,
        }


_NVLINK3 = 300.0  # A100 SXM4: 600 GB/s bidirectional (12 links x 50 GB/s)
_NVLINK4 = 450.0  # H100/H200/H20 SXM: 900 GB/s bidirectional (18 links)
LINK_FACTS: dict[str, LinkFacts] = {
    "rtx-4080-super-32g": LinkFacts(4),
    "rtx-pro-4500-32g": LinkFacts(5),
    "rtx-3080-20g": LinkFacts(4),
    "rtx-3090-24g": LinkFacts(4),
    "rtx-2080ti-22g": LinkFacts(3),
    "rx-7900xtx-24g": LinkFacts(4),
    "rx-7900xt-20g": LinkFacts(4),
    "rtx-4090-24g": LinkFacts(4),
    "rtx-4090-48g": LinkFacts(4),
    "rtx-5090-32g": LinkFacts(5),
    "a100-80g": LinkFacts(4, _NVLINK3),
    "a100-40g": LinkFacts(4, _NVLINK3),
    "h100-80g": LinkFacts(5, _NVLINK4),
    "h200-141g": LinkFacts(5, _NVLINK4),
    "h20-96g": LinkFacts(5, _NVLINK4),
    # H100 NVL: NVLink bridges of 600 GB/s bidirectional join two cards only (NVIDIA H100
    # datasheet, H100 NVL column: 'NVIDIA NVLink: 600GB/s, PCIe Gen5: 128GB/s'); a larger TP
    # group crosses PCIe between the pairs.
    "h100-nvl-94g": LinkFacts(5, 300.0, fabric_group=2),
    "h800-80g": LinkFacts(5, 200.0),  # NVLink cut to 400 GB/s bidirectional
    "a800-80g": LinkFacts(4, 200.0),  # A100 SXM4 with NVLink cut to 400 GB/s bidirectional
    "a800-pcie-80g": LinkFacts(4),  # peers over PCIe (a two-card bridge is not modelled)
    "b200-180g": LinkFacts(5, 900.0),  # NVLink 5: 1.8 TB/s bidirectional
    "l40s-48g": LinkFacts(4),
    "a40-48g": LinkFacts(4),  # its NVLink bridge pairs two cards only; not modelled
    "a10-24g": LinkFacts(4),
    "l4-24g": LinkFacts(4),
    "t4-16g": LinkFacts(3),
    "rtx-a5000-24g": LinkFacts(4),
    "rtx-a6000-48g": LinkFacts(4),
    "rtx-pro-6000-se-96g": LinkFacts(5),
    "rtx-pro-6000-ws-96g": LinkFacts(5),
    "w7900-48g": LinkFacts(4),
    "gb10-128g": LinkFacts(5),  # one GPU per box; a second box is reached over the network
    "jetson-agx-orin-64g": LinkFacts(4),  # one GPU per module; PCIe Gen4 for peripherals
    # Infinity Fabric: 7 xGMI links per GPU in a full mesh. MI300X 64 GB/s per link and
    # direction (896 GB/s bidirectional in all); MI355X 76.8 (1075 GB/s).
    "mi300x-192g": LinkFacts(5, 448.0, 7),
    "mi355x-288g": LinkFacts(5, 537.6, 7),
}
