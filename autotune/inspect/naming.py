"""How findings name what they point at: the first few names, layer ranges, a module's name
in its layer, and modules grouped by that name and their widths."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from autotune.inspect.modules import LAYER_PREFIX_RE, Module
from autotune.inspect.report import MAX_LISTED


def first_names(names: Iterable[str]) -> list[str]:
    return sorted(names)[:MAX_LISTED]


def ranges(ids: Iterable[int]) -> str:
    """[0, 1, 2, 4, 6, 7] -> '0-2, 4, 6-7'."""
    out: list[str] = []
    ids = sorted(ids)
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ", ".join(out)


def short_name(m: Module) -> str:
    """`model.layers.3.self_attn.q_proj` -> `self_attn.q_proj` (the module's name in its layer)."""
    hit = LAYER_PREFIX_RE.match(m.name)
    return hit.group(3) if hit and m.layer is not None else m.name


def describe(mods: list[Module]) -> str:
    """'linear_attn.in_proj_a (n=48, k=128) in layers 0-2; ...' grouped by short name."""
    by: dict[tuple[str, int | None, int | None], list[int]] = defaultdict(list)
    loose: list[str] = []
    for m in mods:
        if m.layer is None:
            loose.append(m.name)
        else:
            by[(short_name(m), m.n, m.k)].append(m.layer)
    parts = [
        f"{name} (n={n}, k={k}) in layers {ranges(ids)}"
        for (name, n, k), ids in sorted(by.items(), key=lambda kv: (kv[0][0], min(kv[1])))
    ]
    return "; ".join(parts + loose)
