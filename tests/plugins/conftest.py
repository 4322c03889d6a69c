"""The plugin's kernels run on CPU under Triton's interpreter when no CUDA device is present; the
variable must be set before any kernel module is imported (@triton.jit reads it then)."""

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
