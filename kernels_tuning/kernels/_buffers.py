"""Workspace and arrival counters for the in-kernel split-K epilogue (kernels/_common.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.errors import ConfigError

if TYPE_CHECKING:
    import torch

# Counters are self-resetting (the last arriver zeroes its tile's counter), so one zeroed buffer
# per device serves every launch in stream order. It is per device, not per stream, so a launch
# inside CUDA-graph capture reuses it instead of capturing a memset. So split-K launches must not
# run concurrently on two streams of one device: they would share counters (and atomic sums).
_LOCKS: dict[str, torch.Tensor] = {}
_MIN_LOCKS = 4096


_DUMMY: dict[str, torch.Tensor] = {}
# The atomic reduction's fp32 [M, N] sums (kernels/_atomic.py), zeroed: the last arriver of each
# tile zeroes its part again, so like the counters one buffer per device serves every launch.
_ZEROED: dict[str, torch.Tensor] = {}
# Counters and sums a larger launch replaced: a CUDA graph captured earlier still points at them,
# so they stay allocated (and stay zeroed: only that graph's launches touch them).
_RETIRED: list[torch.Tensor] = []


def split_k_buffers(
    device: torch.device | str,
    split_k: int,
    m: int,
    n: int,
    tiles: int,
    workspace: torch.Tensor | None = None,
    *,
    atomic: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
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
    if split_k == 1:
        locks = _counters(key, device, 0)
        return _dummy(key, device), locks
    _check_size(split_k, m, n, atomic=atomic)
    locks = _counters(key, device, tiles)
    if atomic:
        return _zeroed(key, device, m * n), locks
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


def _check_size(split_k: int, m: int, n: int, *, atomic: bool) -> None:
    """Refuse sums and workspaces of 2^31 elements or more (the kernels index them in int32)."""
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


def _dummy(key: str, device: torch.device | str) -> torch.Tensor:
    """The device's 1-element stand-in workspace of split_k == 1 launches."""
    import torch

    dummy = _DUMMY.get(key)
    if dummy is None:
        dummy = torch.empty(1, dtype=torch.float32, device=device)
        _DUMMY[key] = dummy
    return dummy


def _counters(key: str, device: torch.device | str, tiles: int) -> torch.Tensor:
    """The device's zeroed arrival counters, at least `tiles` of them (a smaller buffer is
    replaced and retired)."""
    import torch

    locks = _LOCKS.get(key)
    if locks is None or locks.numel() < tiles:
        if locks is not None:
            _RETIRED.append(locks)
        locks = torch.zeros(max(tiles, _MIN_LOCKS), dtype=torch.int32, device=device)
        _LOCKS[key] = locks
    return locks


def _zeroed(key: str, device: torch.device | str, size: int) -> torch.Tensor:
    """The device's zeroed fp32 sums of at least `size` elements (a smaller buffer is replaced
    and retired)."""
    import torch

    zeroed = _ZEROED.get(key)
    if zeroed is None or zeroed.numel() < size:
        if zeroed is not None:
            _RETIRED.append(zeroed)
        zeroed = torch.zeros(size, dtype=torch.float32, device=device)
        _ZEROED[key] = zeroed
    return zeroed
