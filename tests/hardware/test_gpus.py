from __future__ import annotations

import pytest

from autotune.errors import HardwareError, UnknownNameError
from autotune.hardware import GPU_CATALOG, get_gpu, resolve_gpu
from autotune.hardware.gpus import match_device

DESIGN_NAMES = [
    "rtx-4080-super-32g",
    "rtx-pro-4500-32g",
    "rtx-3080-20g",
    "rtx-2080ti-22g",
    "rx-7900xtx-24g",
    "rtx-4090-24g",
    "rtx-5090-32g",
    "a100-80g",
    "h100-80g",
    "h200-141g",
]


def test_catalog_has_the_design_names() -> None:
    assert set(DESIGN_NAMES) <= set(GPU_CATALOG)
    assert get_gpu("RTX-4080-SUPER-32G").memory_mib == 32760  # F3
    assert get_gpu("h200-141g").memory_mib == 143771


def test_unknown_gpu_suggests() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'rtx-4090-24g'"):
        get_gpu("rtx-4090-24")


def test_match_modded_card_by_memory() -> None:
    assert match_device("NVIDIA GeForce RTX 4090", 49140).name == "rtx-4090-48g"  # type: ignore[union-attr]
    assert match_device("NVIDIA GeForce RTX 4090", 24564).name == "rtx-4090-24g"  # type: ignore[union-attr]
    assert match_device("NVIDIA H200", 143771).name == "h200-141g"  # type: ignore[union-attr]
    assert match_device("Some Other GPU", 1000) is None


def test_auto_without_driver_says_so() -> None:
    pytest.importorskip("pynvml")
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is present")
    except pynvml.NVMLError:
        pass
    with pytest.raises(HardwareError, match="no NVIDIA driver"):
        resolve_gpu("auto")
