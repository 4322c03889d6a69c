"""Compatibility for Triton's CPU interpreter (TRITON_INTERPRET=1) with NumPy >= 2.4.

Triton 3.6's interpreter holds every scalar as a 1-element array and converts it for `range()`
with `int(array)`, which NumPy 2.4 refuses for arrays with ndim > 0 ("only 0-dimensional arrays
can be converted to Python scalars"). Any kernel whose loop bound comes from an argument or a
program id then fails on CPU. This patch converts through `.reshape(-1)[0]` instead; it touches
nothing when the interpreter is off.
"""

from __future__ import annotations

import os
from typing import Any


def patch_interpreter() -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    from triton.runtime import interpreter as it

    if getattr(it, "_kernels_tuning_patched", False):
        return
    original = it._patch_lang_tensor

    def patched(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    it._patch_lang_tensor = patched
    it._kernels_tuning_patched = True
