"""Workspace and arrival counters for the in-kernel split-K epilogue (kernels/_common.py)."""

from __future__ import annotations

from typing import Any

from autotune.errors import ConfigError

# Counters are self-resetting (the last arriver zeroes its tile's counter), so one zeroed buffer
# per device serves every launch in stream order. It is per device, not per stream, so a launch
# inside CUDA-graph capture reuses it instead of capturing a memset. So split-K launches must not
# run concurrently on two streams of one device: they would share counters (and atomic sums).
_LOCKS: dict[str, Any] = {}
_MIN_LOCKS = 4096


_DUMMY: dict[str, Any] = {}
# The atomic reduction's fp32 [M, N] sums (kernels/_atomic.py), zeroed: the last arriver of each
# tile zeroes its part again, so like the counters one buffer per device serves every launch.
_ZEROED: dict[str, Any] = {}
# Counters and sums a larger launch replaced: a CUDA graph captured earlier still points at them,
# so they stay allocated (and stay zeroed: only that graph's launches touch them).
_RETIRED: list[Any] = []


def split_k_buffers(
    device: Any,
    split_k: int,
    m: int,
    n: int,
    tiles: int,
    workspace: Any = None,
    *,
    atomic: bool = False,
) -> tuple[Any, Any]:
    """(workspace, counters) for a launch: fp32 [split_k, M, N] and int32 [>= tiles].

    With split_k == 1 the workspace is a cached 1-element dummy (the kernel never touches it).
    Pass `workspace` (fp32, at least split_k*M*N elements) to avoid an allocation per call, e.g.
    inside CUDA-graph capture; the first call on a device creates the counters, so make one
    call before capturing. With `atomic` (ATOMIC_REDUCE) the workspace is always the zeroed fp32
    [M, N] cached per device, which the kernel leaves zeroed (grown when a launch needs more;
    `workspace` is not used, so one caller buffer serves configs of both kinds: the ordered sum
    leaves its partials in it). Make the call with the largest M and N before capturing, so
    that no capture allocates.
    """
    import torch

    key = str(device)
    locks = _LOCKS.get(key)
    if split_k == 1:
        if locks is None:
            locks = torch.zeros(_MIN_LOCKS, dtype=torch.int32, device=device)
            _LOCKS[key] = locks
        dummy = _DUMMY.get(key)
        if dummy is None:
            dummy = torch.empty(1, dtype=torch.float32, device=device)
            _DUMMY[key] = dummy
        return dummy, locks
    if atomic and m * n >= 2**31:
        raise ConfigError(
            f"M={m} N={n}: the ATOMIC_REDUCE sum would hold over 2^31 elements; use "
            "ATOMIC_REDUCE=0 or a smaller M",
            field="ATOMIC_REDUCE",
        )
    if not atomic and split_k * m * n >= 2**31:
        raise ConfigError(
            f"SPLIT_K={split_k} with M={m} N={n} needs a workspace over 2^31 elements; "
            "use a smaller SPLIT_K for this M",
            field="SPLIT_K",
        )
    if locks is None or locks.numel() < tiles:
        if locks is not None:
            _RETIRED.append(locks)
        locks = torch.zeros(max(tiles, _MIN_LOCKS), dtype=torch.int32, device=device)
        _LOCKS[key] = locks
    if atomic:
        zeroed = _ZEROED.get(key)
        if zeroed is None or zeroed.numel() < m * n:
            if zeroed is not None:
                _RETIRED.append(zeroed)
            zeroed = torch.zeros(m * n, dtype=torch.float32, device=device)
            _ZEROED[key] = zeroed
        return zeroed, locks
    if workspace is not None:
        if workspace.dtype != torch.float32 or workspace.numel() < split_k * m * n:
            raise ConfigError(
                f"workspace must be fp32 with >= {split_k * m * n} elements, got "
                f"{workspace.dtype} with {workspace.numel()}",
                field="workspace",
            )
        return workspace, locks
    ws = torch.empty((split_k, m, n), dtype=torch.float32, device=device)
    return ws, locks
