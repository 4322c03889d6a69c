"""The SGLang release number the planner's per-release rules compare: sglang_history.release's
form, (minor, patch, post) of a 0.x.y[.postN] version, post -1 for a pre-release (0.5.3rc0 ->
(5, 3, -1)). One definition, imported by every module that takes one."""

from __future__ import annotations

Release = tuple[int, int, int]
