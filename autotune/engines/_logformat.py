"""What the SGLang and vLLM log formatters share: PyTorch's own out-of-memory text (both engines
print torch.OutOfMemoryError as the CUDA caching allocator words it), a Python traceback as the
interpreter prints it, and the failure texts' table: the text for a kind, and the check that a
failure kind got the values its text needs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from autotune.errors import ConfigError

T = TypeVar("T")


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


def required(values: Mapping[str, object], key: str, kind: str) -> Any:
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


def failure_text(texts: Mapping[str, T], kind: str, kinds: Iterable[str]) -> T:
    """What an engine's table of failure texts holds for `kind`.

    Raises:
        ConfigError: an unknown kind, naming the valid `kinds`.
    """
    if kind not in texts:
        raise ConfigError(f"unknown failure kind {kind!r}; valid: {', '.join(kinds)}")
    return texts[kind]


def traceback_lines(frames: Iterable[tuple[str, int, str, str]], exception: str) -> list[str]:
    """A Python traceback as the interpreter prints it: the header, each (path, line, function,
    code) frame innermost last, then the exception's text (one line each)."""
    out = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        out += [f'  File "{path}", line {line}, in {func}', f"    {code}"]
    return out + exception.rstrip("\n").split("\n")
