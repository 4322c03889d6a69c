"""NCCL's buffers on a rank of a one-node NVSwitch TP group (nccl_memory.py): the derivation's
arithmetic against the one NVLS line a public log states, the releases' torch pins and
communicators read from the vLLM wheels, and the launches it moves."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest

from autotune.calibration.records import load_record
from autotune.calibration.replay import replay
from autotune.hardware import get_gpu
from autotune.models import load_card
from autotune.planner.common import MIB
from autotune.planner.nccl_memory import (
    HOPPER_NVSWITCH_CHANNELS,
    VLLM_TORCH,
    communicator_bytes,
    extrapolated_channels_note,
    nccl_for_vllm,
    nvls_bytes,
    nvswitch_node,
    recv_connection_bytes,
    ring_tree_bytes,
    send_connection_bytes,
    vllm_tp_growth_mib,
)
from autotune.planner.vllm import plan_vllm
from autotune.planner.vllm_history import at_least
from autotune.planner.vllm_legacy import WHOLE_DEVICE_NON_TORCH_MIB, non_torch_mib
from autotune.planner.vllm_memory import HOPPER_TP_NON_TORCH_MIB
from tests.wheels import full_vllm_text, full_vllm_wheel_or_skip

RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches" / "vllm"
# vLLM issue #9699 (8 x H200, NCCL 2.20.5 with torch 2.4): "NCCL INFO NVLS comm ... headRank 3
# nHeads 8 buffSize 4194304 memSize 2097152 nvlsPerRankSize 301989888 nvlsTotalSize 2415919104".
LOGGED_NVLS_PER_RANK = 301989888
LOGGED_NVLS_TOTAL = 2415919104


def test_connection_buffers() -> None:
    assert recv_connection_bytes() == 10 * MIB  # 4 KiB + 4 MiB + 512 KiB + 4.6875 MiB -> 2 MiB
    assert send_connection_bytes() == 2 * MIB
    assert ring_tree_bytes(1) == 0
    assert ring_tree_bytes(2) == 24 * 12 * MIB  # the tree reuses the ring's two connections
    assert ring_tree_bytes(8) == 2 * ring_tree_bytes(2)


def test_nvls_reproduces_the_logged_line() -> None:
    assert nvls_bytes(8, "2.20.5") == LOGGED_NVLS_TOTAL
    assert nvls_bytes(8, "2.20.5") // 8 == LOGGED_NVLS_PER_RANK
    assert LOGGED_NVLS_PER_RANK == HOPPER_NVSWITCH_CHANNELS * 2 * (4 * MIB + 2 * MIB)
    assert nvls_bytes(8, "2.21.5") == 8 * 24 * 2 * 3 * MIB  # 1 MiB chunk ring + 2 MiB flags
    assert nvls_bytes(2, "2.21.5") == 0  # NVLS starts above two GPUs
    assert communicator_bytes(8, "2.21.5", False) == ring_tree_bytes(8)


def test_growth_only_on_one_nvswitch_node() -> None:
    h200 = get_gpu("h200-141g")
    assert nvswitch_node(h200) and nvswitch_node(get_gpu("h100-80g"))
    assert not nvswitch_node(get_gpu("h100-nvl-94g"))  # bridged pairs: no multicast
    assert not nvswitch_node(get_gpu("a100-80g"))
    # 2 communicators x (NVLS 1152 MiB + the tree's second pair, 288 MiB) on 2.21.5
    assert vllm_tp_growth_mib(h200, 8, "0.6.4.post1") == 2 * (1152 + 288)
    assert vllm_tp_growth_mib(h200, 8, "0.6.3.post1") == 2 * (2304 + 288)
    assert vllm_tp_growth_mib(h200, 2, "0.6.4.post1") == 0
    assert vllm_tp_growth_mib(h200, 16, "0.8.4") == 0  # across nodes: not derived
    assert vllm_tp_growth_mib(h200, 8, "0.9.2") == 0  # NCCL 2.26 and later: not derived
    assert vllm_tp_growth_mib(get_gpu("h100-nvl-94g"), 4, "0.8.3") == 0


@pytest.mark.parametrize("version", ["0.5.4", "0.6.3.post1", "0.6.4.post1", "0.7.3", "0.8.4"])
def test_torch_pin_of_the_release(version: str) -> None:
    wheel = full_vllm_wheel_or_skip(version)
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(f"vllm-{version}.dist-info/METADATA").decode()
    pinned = re.search(r"^Requires-Dist: torch==(\d+\.\d+)", meta, re.M)
    assert pinned
    expected = [torch for since, torch in VLLM_TORCH if at_least(version, since)][-1]
    assert pinned.group(1) == expected
    assert nccl_for_vllm(version) in {"2.20.5", "2.21.5"}


@pytest.mark.parametrize("version", ["0.5.4", "0.6.4.post1", "0.6.6.post1", "0.8.4"])
def test_two_communicators_on_the_tp_group(version: str) -> None:
    """PyNcclCommunicator with its warmup all_reduce, and torch's process group over the same
    ranks, which the release uses for a collective during the profiling run."""
    pynccl = full_vllm_text(version, "vllm/distributed/device_communicators/pynccl.py")
    assert "A small all_reduce for warmup" in pynccl
    state = full_vllm_text(version, "vllm/distributed/parallel_state.py")
    assert "device_group = torch.distributed.new_group(" in state
    if at_least(version, "0.8.0"):
        base = full_vllm_text(
            version, "vllm/distributed/device_communicators/base_device_communicator.py"
        )
        assert "all_gather_into_tensor(" in base and "group=self.device_group" in base
    else:
        assert "torch.distributed.gather(" in state and "group=self.device_group" in state


def test_the_h200_tp8_launch() -> None:
    rec = load_record(RECORDS / "s18e-llama-3.1-70b-instruct-h200-tp8.yaml")
    logged = float(re.findall(r"non_torch_memory=([\d.]+)GiB", rec.log)[0])
    planned = non_torch_mib("v0", "0.6.4.post1", 8, "nvidia", "sm_90", get_gpu("h200-141g"))
    assert planned == WHOLE_DEVICE_NON_TORCH_MIB + HOPPER_TP_NON_TORCH_MIB + 2880
    assert planned / 1024 < logged  # a lower bound: the driver rank logs 7.71 GiB
    ratio = replay(rec).kv_ratio
    assert ratio is not None and 1.0 < ratio < 1.05


def test_channels_below_eight_ranks_are_an_assumption() -> None:
    # NCCL 2.20.5 / 2.21.5 search the channel count (graph/search.cc), with no count per rank
    # count; 24 is logged at 8 ranks only, so TP 3 .. 7 says it assumes it.
    h200 = get_gpu("h200-141g")
    assert extrapolated_channels_note(h200, 8, "0.6.4.post1") is None
    assert extrapolated_channels_note(h200, 2, "0.6.4.post1") is None
    assert extrapolated_channels_note(h200, 4, "0.9.2") is None  # no growth applied
    note = extrapolated_channels_note(h200, 4, "0.6.4.post1")
    assert note and "assumed, not derived" in note
    card = load_card("meta-llama/Llama-3.1-8B-Instruct")
    plan = plan_vllm(card, h200, {}, version="0.6.4.post1", tp=4)
    assert note in plan.assumptions
    plan8 = plan_vllm(card, h200, {}, version="0.6.4.post1", tp=8)
    assert not any("assumed, not derived" in a for a in plan8.assumptions)
