"""HiCache load-back cost (planner.hicache_perf): the copies SGLang 0.5.17 makes and how the
forward waits for them; the release's code is checked in test_hicache_perf_wheels.py."""

from __future__ import annotations

import pytest

from autotune.models import BUILTIN_CARDS
from autotune.planner import hicache_perf as hp

HYBRID = BUILTIN_CARDS["qwen3.8-27b-awq-int4"]  # 16 full-attention layers of 64
DENSE = BUILTIN_CARDS["tiny-dense"]


def test_hybrid_load_runs_every_layer_in_order() -> None:
    lb = hp.load_back(HYBRID, 32768, 16384, 1000, 1)
    assert len(lb.layer_bytes) == 64
    full = set(HYBRID.full_attention_layers)
    for i, b in enumerate(lb.layer_bytes):
        # KV split over the full-attention layers; a host-only state is copied twice
        assert b == (16384 * 32768 / 16 if i in full else 2 * 1000 / 48)
    assert lb.total_bytes == pytest.approx(16384 * 32768 + 2 * 1000)
    # one KV launch per full layer, the SSM state and conv window per copy per linear layer
    assert lb.launches == 16 + 48 * 2 * 2


def test_state_on_device_copies_kv_only() -> None:
    lb = hp.load_back(HYBRID, 32768, 16384, 1000, 0)
    assert lb.total_bytes == 16384 * 32768
    assert lb.launches == 16


def test_short_kv_load_is_skipped_unless_a_state_loads() -> None:
    assert hp.load_back(DENSE, 4096, hp.LOAD_BACK_THRESHOLD - 1, 0, 0).total_bytes == 0
    assert hp.load_back(DENSE, 4096, hp.LOAD_BACK_THRESHOLD, 0, 0).total_bytes > 0
    # a state to load carries the short KV with it (the aux transfers still run)
    assert hp.load_back(HYBRID, 32768, 5, 1000, 1).total_bytes == pytest.approx(5 * 32768 + 2000)


def test_dense_model_has_no_state_copy() -> None:
    lb = hp.load_back(DENSE, 4096, 100, 12345, 1)
    assert lb.total_bytes == 100 * 4096
    assert len(lb.layer_bytes) == DENSE.num_layers


def _exposed(loads: list[float], computes: list[float], launches: list[float]) -> float:
    return hp.timeline(loads, computes, launches)[0] - sum(computes)


def test_overlap_exposes_only_what_compute_cannot_hide() -> None:
    # copy faster than compute: only the first layer's copy is waited for
    assert _exposed([1.0] * 4, [2.0] * 4, [0.0] * 4) == pytest.approx(1.0)
    # the forward is launched after every copy kernel: the launches delay it
    assert _exposed([1.0] * 4, [2.0] * 4, [0.5, 0, 0, 0]) == pytest.approx(1.5)
    assert _exposed([1.0] * 4, [2.0] * 4, [1.0] * 4) == pytest.approx(4.0)
    # copy slower than compute: the forward ends one layer of compute after the copy
    assert _exposed([3.0] * 4, [1.0] * 4, [0.0] * 4) == pytest.approx(12.0 + 1.0 - 4.0)
    # nothing to copy: nothing lost but the launches
    assert _exposed([0.0] * 4, [1.0] * 4, [0.25, 0, 0, 0]) == pytest.approx(0.25)
    # the copy of a layer cannot start before its kernels are launched
    assert hp.timeline([1.0, 1.0], [0.0, 0.0], [0.0, 3.0])[1] == pytest.approx(4.0)


def test_load_back_s_is_bounded_by_serial_copy() -> None:
    lb = hp.load_back(HYBRID, 32768, 16384, 150 * 2**20, 1)
    exposed, copy = hp.load_back_s(lb, 25.0, 0.9)
    serial = lb.launches * hp.LAUNCH_S + lb.total_bytes / 25e9
    assert lb.total_bytes / 25e9 <= copy <= serial
    assert lb.launches * hp.LAUNCH_S - 1e-12 <= exposed < copy
    # no forward to hide behind: the whole copy is waited for
    assert hp.load_back_s(lb, 25.0, 0.0)[0] == pytest.approx(copy)


def test_repeat_reuses_the_last_chunk_boundary() -> None:
    assert hp.repeat_prefix(17900, 2048) == 16384  # C3
    # the last token is always computed: a prompt ending on a boundary reuses the one before
    assert hp.repeat_prefix(18432, 2048) == 16384
    assert hp.repeat_prefix(18433, 2048) == 18432
    assert hp.repeat_prefix(1000, 2048) == 0
    assert hp.repeat_prefix(1000, 0) == 0
