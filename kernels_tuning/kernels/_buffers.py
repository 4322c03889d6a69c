"""Workspace and arrival counters for the in-kernel split-K epilogue (kernels/_common.py)."""

from __future__ import annotations

from typing import Any

from autotune.errors import ConfigError

# Counters are self-resetting (the last arriver zeroes its tile's counter), so one zeroed buffer
# per device serves every launch in stream order. It is per device, not per stream, so a launch
# inside CUDA-graph capture reuses it instead of capturing a memset; split-K launches that run
# concurrently on two streams of one device must pass their own `locks`.
_LOCKS: dict[str, Any] = {}
_MIN_LOCKS = 4096


_DUMMY: dict[str, Any] = {}
# The atomic reduction's fp32 [M, N] sums (kernels/_atomic.py), zeroed: the last arriver of each
# tile zeroes its part again, so like the counters one buffer per device serves every launch.
_ZEROED: dict[str, Any] = {}


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
    call before capturing. With `atomic` (ATOMIC_REDUCE) the workspace is a zeroed fp32 [M, N]
    the kernel leaves zeroed: by default one cached per device (grown, zeroed, when a launch
    needs more); a `workspace` passed for it must be zeroed before its first use and serve
    atomic launches only (the ordered reduction leaves its partials in it).
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
    if (1 if atomic else split_k) * m * n >= 2**31:
        raise ConfigError(
            f"SPLIT_K={split_k} with M={m} N={n} needs a workspace over 2^31 elements; "
            "use a smaller SPLIT_K for this M",
            field="SPLIT_K",
        )
    if locks is None or locks.numel() < tiles:
        locks = torch.zeros(max(tiles, _MIN_LOCKS), dtype=torch.int32, device=device)
        _LOCKS[key] = locks
    if atomic:
        if workspace is not None:
            if workspace.dtype != torch.float32 or workspace.numel() < m * n:
                raise ConfigError(
                    f"the ATOMIC_REDUCE workspace must be zeroed fp32 with >= {m * n} elements, "
                    f"got {workspace.dtype} with {workspace.numel()}",
                    field="workspace",
                )
            return workspace, locks
        zeroed = _ZEROED.get(key)
        if zeroed is None or zeroed.numel() < m * n:
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
