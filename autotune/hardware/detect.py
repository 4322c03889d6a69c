"""Detect local NVIDIA GPUs through NVML (nvidia-ml-py) and match them to the catalog; resolve
`--gpu NAME|auto` (a catalog key, or the GPU detected here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.errors import HardwareError
from autotune.hardware.gpus import GPUSpec, get_gpu, match_device


@dataclass(frozen=True)
class DetectedGPU:
    index: int
    device_name: str
    memory_mib: int
    free_mib: int
    driver: str
    spec: GPUSpec


def detect_gpus() -> list[DetectedGPU]:
    """Return every NVIDIA GPU NVML sees, matched to the catalog.

    Raises HardwareError with a plain explanation when NVML or the driver is absent, or when a
    GPU is not in the catalog (name the closest key with ``--gpu`` instead).
    """
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
        raise HardwareError("nvidia-ml-py is not installed; pass --gpu NAME") from exc
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise HardwareError(
            f"--gpu auto: no NVIDIA driver found ({exc}); this machine has no usable NVIDIA GPU. "
            "Pass a catalog name instead, e.g. --gpu rtx-4080-super-32g (see `autotune gpus`)."
        ) from exc
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        out: list[DetectedGPU] = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = _text(pynvml.nvmlDeviceGetName(h))
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            total_mib = int(mem.total) // 2**20
            spec = match_device(name, total_mib)
            if spec is None:
                raise HardwareError(
                    f"--gpu auto: GPU {i} is {name!r} ({total_mib} MiB), which is not in the "
                    "catalog; pass the closest entry with --gpu (see `autotune gpus`)"
                )
            update = _links(pynvml, h, spec)
            reserved = _reserved_mib(pynvml, h)
            if reserved is not None:  # this driver's share, not the catalog's
                update["driver_reserved_mib"] = reserved
            spec = GPUSpec.model_validate({**spec.model_dump(), **update})
            out.append(DetectedGPU(i, name, total_mib, int(mem.free) // 2**20, driver, spec))
        if not out:
            raise HardwareError("--gpu auto: the NVIDIA driver reports no GPU")
        return _with_p2p(pynvml, out)
    finally:
        pynvml.nvmlShutdown()


def resolve_gpu(name: str) -> GPUSpec:
    """`--gpu NAME`: a catalog key, or `auto` to detect GPU 0 through NVML."""
    if name.strip().lower() == "auto":
        gpus = detect_gpus()
        return gpus[0].spec
    return get_gpu(name)


def _reserved_mib(pynvml: Any, handle: Any) -> int | None:
    """nvidia-smi's 'Reserved' through NVML's v2 memory query (drivers >= 510); None when the
    driver or binding lacks it."""
    try:
        info = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        return int(info.reserved) // 2**20
    except (AttributeError, TypeError, pynvml.NVMLError):
        return None


# Per-link bandwidth, one direction, GB/s, by NVML's nvmlNvlinkVersion_t (NVLink 1: 20; 2-4: 25;
# 5: 50; 6: 100).
NVLINK_LINK_GBS = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 25.0, 6: 25.0, 7: 50.0, 8: 100.0}
_P2P_READ = 0  # NVML_P2P_CAPS_INDEX_READ (some nvidia-ml-py releases define it as a tuple)


def _links(pynvml: Any, handle: Any, spec: GPUSpec) -> dict[str, object]:
    """What this machine's slot and fabric are, where NVML says: the PCIe generation and width
    the GPU and the board can run (a card in an x8 slot, a gen3 riser), and the active NVLinks.
    A query the driver refuses leaves the catalog's figure."""
    update: dict[str, object] = {}
    for key, query in (
        ("pcie_gen", "nvmlDeviceGetMaxPcieLinkGeneration"),
        ("pcie_lanes", "nvmlDeviceGetMaxPcieLinkWidth"),
    ):
        try:
            value = int(getattr(pynvml, query)(handle))
        except (AttributeError, pynvml.NVMLError):
            continue
        if value > 0:
            update[key] = min(value, 6 if key == "pcie_gen" else 16)
    if spec.vendor != "nvidia":
        return update
    answered = active = 0
    gbs = 0.0
    for link in range(int(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            state = pynvml.nvmlDeviceGetNvLinkState(handle, link)
            answered += 1
            if state != 1:  # NVML_FEATURE_ENABLED
                continue
            version = int(pynvml.nvmlDeviceGetNvLinkVersion(handle, link))
        except (AttributeError, pynvml.NVMLError):
            continue
        active += 1
        gbs += NVLINK_LINK_GBS.get(version, 25.0)
    # Links NVML answers for but none up: peers are over PCIe (an H100 PCIe matched to the SXM
    # entry). Every link "not supported" (a GPU passed through alone: our H200 answers so for all
    # 36) says nothing either way, so the catalog stands.
    if answered:
        update["fabric_gbs"] = gbs if active else None
        update["fabric_mesh_links"] = 0
    return update


def _with_p2p(pynvml: Any, gpus: list[DetectedGPU]) -> list[DetectedGPU]:
    """Whether GPU 0 reads its peers directly (NVML's P2P read status); blocked on GeForce Ada and
    Blackwell, or by the board. One GPU keeps the catalog's answer."""
    if len(gpus) < 2:
        return gpus
    try:
        h0 = pynvml.nvmlDeviceGetHandleByIndex(gpus[0].index)
        ok = all(
            pynvml.nvmlDeviceGetP2PStatus(
                h0, pynvml.nvmlDeviceGetHandleByIndex(g.index), _P2P_READ
            )
            == 0  # NVML_P2P_STATUS_OK
            for g in gpus[1:]
        )
    except (AttributeError, pynvml.NVMLError):
        return gpus
    return [
        DetectedGPU(
            g.index,
            g.device_name,
            g.memory_mib,
            g.free_mib,
            g.driver,
            g.spec.model_copy(update={"p2p": ok}),
        )
        for g in gpus
    ]


def _text(v: str | bytes) -> str:
    return v.decode() if isinstance(v, bytes) else v
