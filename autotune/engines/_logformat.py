"""What the SGLang and vLLM log formatters share: PyTorch's own out-of-memory text (both engines
print torch.OutOfMemoryError as the CUDA caching allocator words it) and the check that a
failure kind got the values its text needs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.errors import ConfigError


def format_size(num_bytes: float) -> str:
    """PyTorch's c10 format_size (CUDACachingAllocator): bytes, KiB, MiB or GiB."""
    if num_bytes <= 1024:
        return f"{int(num_bytes)} bytes"
    if num_bytes <= 1048576:
        return f"{num_bytes / 1024:.2f} KiB"
    if num_bytes <= 1073741824:
        return f"{num_bytes / 1048576:.2f} MiB"
    return f"{num_bytes / 1073741824:.2f} GiB"


def torch_oom_message(
    *,
    tried_gib: float,
    total_gib: float,
    free_gib: float,
    in_use_gib: float,
    allocated_gib: float,
    reserved_unallocated_gib: float = 0.0,
    gpu: int = 0,
) -> str:
    """torch.OutOfMemoryError's text (one line), as the CUDA caching allocator words it."""
    g = 1 << 30
    return (
        f"CUDA out of memory. Tried to allocate {format_size(tried_gib * g)}. GPU {gpu} has a "
        f"total capacity of {format_size(total_gib * g)} of which {format_size(free_gib * g)} "
        f"is free. Including non-PyTorch memory, this process has {format_size(in_use_gib * g)} "
        f"memory in use. Of the allocated memory {format_size(allocated_gib * g)} is allocated "
        f"by PyTorch, and {format_size(reserved_unallocated_gib * g)} is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def required(values: Mapping[str, Any], key: str, kind: str) -> Any:
    """`values[key]`, which format_failure(`kind`) needs.

    Raises:
        ConfigError: the value is missing.
    """
    if key not in values:
        raise ConfigError(f"format_failure({kind!r}) needs {key}=...", field=key)
    return values[key]


def oom_from_values(values: Mapping[str, Any], kind: str) -> str:
    """torch_oom_message from a failure's values (tried_gib, total_gib, free_gib, in_use_gib,
    allocated_gib, optional reserved_unallocated_gib).

    Raises:
        ConfigError: a required value is missing.
    """
    return torch_oom_message(
        tried_gib=required(values, "tried_gib", kind),
        total_gib=required(values, "total_gib", kind),
        free_gib=required(values, "free_gib", kind),
        in_use_gib=required(values, "in_use_gib", kind),
        allocated_gib=required(values, "allocated_gib", kind),
        reserved_unallocated_gib=values.get("reserved_unallocated_gib", 0.0),
    )
