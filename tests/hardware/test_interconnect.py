"""The TP all-reduce link: catalog facts, pricing, and what NVML reports (a stand-in module)."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from autotune.hardware import GPU_CATALOG, get_gpu
from autotune.hardware.detect import detect_gpus
from autotune.hardware.interconnect import pcie_gbs, tp_link
from autotune.hardware.link_facts import LINK_FACTS
from autotune.models import BUILTIN_CARDS
from autotune.planner import plan_sglang
from autotune.planner.perf import PerfModel


def test_every_catalog_gpu_has_its_links() -> None:
    assert set(LINK_FACTS) == set(GPU_CATALOG)
    for g in GPU_CATALOG.values():
        assert g.pcie_gen == LINK_FACTS[g.name].pcie_gen


def test_links_by_kind() -> None:
    # Ada GeForce: P2P blocked, staged through host memory: ~8 GB/s on gen4 x16 (F3).
    ada = tp_link(get_gpu("rtx-4090-24g"), 2)
    assert ada.kind == "host" and ada.bus_gbs == pytest.approx(8.0, rel=0.01)
    # PCIe P2P on gen5 x16 (RTX PRO 4500): ~40 GB/s, the published H100 PCIe busbw range 35-45.
    pro = tp_link(get_gpu("rtx-pro-4500-32g"), 2)
    assert pro.kind == "p2p" and 35 <= pro.bus_gbs <= 45
    # NVLink 3 (A100): 0.8 of 300 GB/s, inside the published 230-250 GB/s.
    a100 = tp_link(get_gpu("a100-80g"), 8)
    assert a100.kind == "fabric" and 230 <= a100.bus_gbs <= 250
    # Datacenter parts that are not named h1*/h2*/a100 still get their fabric.
    for name in ("h800-80g", "b200-180g", "h20-96g", "mi300x-192g"):
        assert tp_link(get_gpu(name), 2).kind == "fabric"
    assert tp_link(get_gpu("b200-180g"), 8).bus_gbs > tp_link(get_gpu("h100-80g"), 8).bus_gbs


def test_an_xgmi_mesh_gives_a_small_group_only_its_links() -> None:
    mi = get_gpu("mi300x-192g")
    tp2, tp8 = tp_link(mi, 2), tp_link(mi, 8)
    assert tp8.bus_gbs == pytest.approx(7 * tp2.bus_gbs)
    assert tp2.bus_gbs == pytest.approx(64 * 0.8)


def test_a_narrow_slot_halves_the_link() -> None:
    g = get_gpu("rtx-3090-24g")
    x8 = g.model_copy(update={"pcie_lanes": 8})
    assert pcie_gbs(x8) == pytest.approx(pcie_gbs(g) / 2)
    assert tp_link(x8, 2).bus_gbs == pytest.approx(tp_link(g, 2).bus_gbs / 2)


def test_all_reduce_time_is_a_ring() -> None:
    link = tp_link(get_gpu("h100-80g"), 8)
    assert link.allreduce_s(1e9, 1) == 0.0
    assert link.allreduce_s(1e9, 8) == pytest.approx(
        2 * 7 / 8 * 1e9 / (link.bus_gbs * 1e9) + link.latency_s
    )


def test_tp2_prefill_is_slower_over_host_than_over_p2p() -> None:
    card = BUILTIN_CARDS["qwen3.8-27b-awq-int4"]
    cfg = {"context_length": 32768}
    ada = get_gpu("rtx-4090-48g")
    p2p = ada.model_copy(update={"p2p": True})
    slow = PerfModel(card, ada, plan_sglang(card, ada, cfg, version="0.5.17", tp=2), config=cfg)
    fast = PerfModel(card, p2p, plan_sglang(card, p2p, cfg, version="0.5.17", tp=2), config=cfg)
    assert slow.link.kind == "host" and fast.link.kind == "p2p"
    assert slow.prefill_tok_s(8192) < fast.prefill_tok_s(8192)


class _NVMLError(Exception):
    pass


def _state(device: dict[str, Any], link: int) -> int:
    if device.get("links") is None:  # a GPU passed through alone: NVML_ERROR_NOT_SUPPORTED
        raise _NVMLError("Not Supported")
    return int(link < device["links"])


def _fake_nvml(
    devices: list[dict[str, Any]], p2p: int = 0, refuse: tuple[str, ...] = ()
) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVMLError = _NVMLError  # type: ignore[attr-defined]
    m.NVML_NVLINK_MAX_LINKS = 18  # type: ignore[attr-defined]
    m.nvmlMemory_v2 = 2  # type: ignore[attr-defined]

    def call(name: str, fn: Any) -> Any:
        def wrapped(*a: Any, **kw: Any) -> Any:
            if name in refuse:
                raise _NVMLError(name)
            return fn(*a, **kw)

        return wrapped

    mem = types.SimpleNamespace
    fns: dict[str, Any] = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlSystemGetDriverVersion": lambda: "580.1",
        "nvmlDeviceGetCount": lambda: len(devices),
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetName": lambda h: devices[h]["name"],
        "nvmlDeviceGetMemoryInfo": lambda h, version=None: mem(
            total=devices[h]["mib"] * 2**20, free=devices[h]["mib"] * 2**20, reserved=600 * 2**20
        ),
        "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: devices[h]["gen"],
        "nvmlDeviceGetMaxPcieLinkWidth": lambda h: devices[h]["width"],
        "nvmlDeviceGetNvLinkState": lambda h, link: _state(devices[h], link),
        "nvmlDeviceGetNvLinkVersion": lambda h, link: devices[h]["nvlink_version"],
        "nvmlDeviceGetP2PStatus": lambda a, b, index: p2p,
    }
    for name, fn in fns.items():
        setattr(m, name, call(name, fn))
    return m


def test_nvml_reports_the_slot_and_the_fabric(monkeypatch: pytest.MonkeyPatch) -> None:
    h100 = {"name": "NVIDIA H100 80GB HBM3", "mib": 81559, "gen": 5, "width": 16}
    sxm = {**h100, "links": 18, "nvlink_version": 6}  # NVML_NVLINK_VERSION_4_0
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([sxm, sxm]))
    got = detect_gpus()
    assert got[0].spec.fabric_gbs == pytest.approx(450.0)
    assert got[0].spec.p2p and got[0].spec.driver_reserved_mib == 600
    # The same name in a PCIe card: NVML answers, no NVLink up, so peers are over PCIe.
    pcie = {**h100, "links": 0}
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([pcie, pcie]))
    assert tp_link(detect_gpus()[0].spec, 2).kind == "p2p"
    # Every link "not supported" (our H200 VM, one GPU): the catalog's NVLink stands.
    h200 = {"name": "NVIDIA H200", "mib": 143771, "gen": 5, "width": 16}
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([h200]))
    assert detect_gpus()[0].spec.fabric_gbs == get_gpu("h200-141g").fabric_gbs


def test_nvml_reports_a_narrow_slot_and_blocked_p2p(monkeypatch: pytest.MonkeyPatch) -> None:
    card = {"name": "NVIDIA GeForce RTX 3090", "mib": 24576, "gen": 4, "width": 8}
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([card, card], p2p=4))
    spec = detect_gpus()[0].spec
    assert (spec.pcie_gen, spec.pcie_lanes, spec.p2p) == (4, 8, False)
    assert tp_link(spec, 2).bus_gbs == pytest.approx(
        tp_link(get_gpu("rtx-3090-24g"), 2).bus_gbs / 2
    )


def test_a_query_the_driver_refuses_keeps_the_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    card = {"name": "NVIDIA GeForce RTX 5090", "mib": 32607, "gen": 3, "width": 4}
    refuse = ("nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth")
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([card], refuse=refuse))
    spec = detect_gpus()[0].spec
    assert (spec.pcie_gen, spec.pcie_lanes) == (5, 16)
