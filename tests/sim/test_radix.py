"""The radix cache: page granularity, LRU eviction of leaves, the HiCache host tier, and mamba
checkpoints for hybrid models (FIELD-NOTES P12)."""

from __future__ import annotations

import numpy as np

from autotune.sim.radix import RadixCache


def seq(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**31, n, dtype=np.int64)


def test_lru_evicts_leaves_and_keeps_locked_paths() -> None:
    c = RadixCache()
    a, b = seq(100, 1), seq(100, 2)
    shared = np.concatenate([a, b])
    added, node = c.insert(shared, [])
    assert added == 200 and c.device_tokens == 200
    c.insert(np.concatenate([a, seq(50, 3)]), [])  # splits a shared 100-token prefix
    c.lock(node)
    assert c.evictable() == 50  # only the unlocked branch
    assert c.evict_device(1000) == 50
    assert c.match(np.concatenate([shared, seq(5, 9)])).usable == 200
    c.unlock(node)
    assert c.evict_device(1000) == 200 and c.device_tokens == 0
    assert c.match(shared).usable == 0


def test_host_tier_keeps_evicted_prefixes() -> None:
    for write_back in (False, True):
        c = RadixCache(host_tokens=1000, write_back=write_back)
        s = seq(300, 4)
        c.insert(s, [])
        assert c.host_tokens == (0 if write_back else 300)
        c.evict_device(300)
        m = c.match(np.concatenate([s, seq(10, 5)]))
        assert (m.usable, m.device, m.host, m.restore) == (300, 0, 300, True)
        assert c.host_tokens == 300


def test_host_tier_capacity_evicts_lru() -> None:
    c = RadixCache(host_tokens=400)
    old, new = seq(300, 6), seq(300, 7)
    c.insert(old, [])
    c.evict_device(300)  # old now lives in host only
    c.insert(new, [])  # backing up new pushes old out of the host pool
    assert c.host_tokens == 300
    assert c.match(np.concatenate([old, seq(3, 8)])).usable == 0


def test_hybrid_match_stops_at_the_last_checkpoint() -> None:
    c = RadixCache(hybrid=True, mamba_device_slots=lambda: 10)
    s = seq(5000, 9)
    c.insert(s, [2048, 4096])
    assert c.match(s).usable == 4096
    assert c.match(np.concatenate([s[:3000], seq(100, 10)])).usable == 2048
    c.insert(s, [5000])
    assert c.match(np.concatenate([s, seq(1, 11)])).usable == 5000
    # no free mamba slot: no device checkpoint, so nothing is reusable
    tight = RadixCache(hybrid=True, mamba_device_slots=lambda: 0)
    tight.insert(s, [2048])
    assert tight.match(s).usable == 0


def test_disabled_cache_never_hits() -> None:
    c = RadixCache(enabled=False)
    s = seq(100, 12)
    assert c.insert(s, [])[0] == 0
    assert c.match(s).usable == 0
