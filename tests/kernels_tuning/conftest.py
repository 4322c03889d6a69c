"""Kernel tests run on CPU under Triton's interpreter when no CUDA device is present
(scripts/test exports TRITON_INTERPRET=1 too); the variable must be set before any kernel module
is imported, because @triton.jit reads it when the kernels are defined."""

from __future__ import annotations

import os


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


if not _cuda():
    os.environ.setdefault("TRITON_INTERPRET", "1")
