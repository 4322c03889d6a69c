"""What a tuning run works on and what it yields: a (shape, M) work item, the result of tuning
one, and the summary of a run. Records for the result cache (kernels_tuning.result_cache) are
built here (`ItemResult.to_record`) and read back (`ItemResult.from_record`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernels_tuning.kernel_config import KernelConfig, KernelKind


@dataclass(frozen=True)
class WorkItem:
    kind: KernelKind
    n: int
    k: int
    m: int
    label: str = ""
    packing: str = "awq"  # int4 only
    # "sglang==0.5.23": timed on that release's own kernel (kernels_tuning.engine_kernel),
    # searched in its space (kernels_tuning.engine_space); "": our own kernels.
    engine: str = ""

    def key(self) -> str:
        extra = f",packing={self.packing}" if self.kind == "int4" else ""
        if self.engine:
            extra += f",engine={self.engine}"
        return f"{self.kind}:N={self.n},K={self.k},M={self.m}{extra}"

    @property
    def shape_key(self) -> tuple[str, int, int, str]:
        tag = self.packing if self.kind == "int4" else ""
        return (self.kind, self.n, self.k, f"{tag}{self.engine}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "n": self.n,
            "k": self.k,
            "m": self.m,
            "label": self.label,
            "packing": self.packing,
            **({"engine": self.engine} if self.engine else {}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WorkItem:
        return cls(
            d["kind"],
            int(d["n"]),
            int(d["k"]),
            int(d["m"]),
            str(d.get("label", "")),
            str(d.get("packing", "awq")),
            str(d.get("engine", "")),
        )


def make_items(
    kind: KernelKind,
    shapes: Iterable[Any],
    batch_sizes: Iterable[int],
    packing: str = "awq",
    engine: str = "",
) -> list[WorkItem]:
    """Shape-major, M ascending (neighbouring M seeds the next)."""
    ms = sorted(set(batch_sizes))
    return [WorkItem(kind, s.n, s.k, m, s.label, packing, engine) for s in shapes for m in ms]


@dataclass
class ItemResult:
    item: WorkItem
    best: KernelConfig | None  # for our own files (FP8: SPLIT_K allowed)
    best_us: float
    engine_best: KernelConfig | None  # SPLIT_K=1 (the engine files); INT4: same as best
    engine_best_us: float
    evaluations: int
    space_size: int
    wall_s: float
    phases: dict[str, int] = field(default_factory=dict)
    default_us: float | None = None  # the engine default config, when the search timed it

    def to_record(self) -> dict[str, Any]:
        def cfg(c: KernelConfig | None) -> dict[str, int] | None:
            return c.as_dict() if c is not None else None

        return {
            "t": "item",
            "item": self.item.to_dict(),
            "best": cfg(self.best),
            "best_us": us_or_none(self.best_us),
            "engine_best": cfg(self.engine_best),
            "engine_best_us": us_or_none(self.engine_best_us),
            "evaluations": self.evaluations,
            "space_size": self.space_size,
            "wall_s": round(self.wall_s, 3),
            "phases": self.phases,
            "default_us": self.default_us,
        }

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> ItemResult:
        def cfg(d: Any) -> KernelConfig | None:
            return KernelConfig.from_dict(d) if d else None

        return cls(
            WorkItem.from_dict(r["item"]),
            cfg(r.get("best")),
            us_or_inf(r.get("best_us")),
            cfg(r.get("engine_best")),
            us_or_inf(r.get("engine_best_us")),
            int(r.get("evaluations", 0)),
            int(r.get("space_size", 0)),
            float(r.get("wall_s", 0.0)),
            dict(r.get("phases", {})),
            r.get("default_us"),
        )


def us_or_none(x: float) -> float | None:
    """A time as records and sidecars hold it: rounded, None when infinite (no valid config)."""
    return None if not math.isfinite(x) else round(x, 4)


def us_or_inf(x: Any) -> float:
    """A time read back from a record: None (written for an infinite time) is inf."""
    return math.inf if x is None else float(x)


@dataclass
class TuneSummary:
    results: dict[str, ItemResult]
    wall_s: float
    evaluations: int
    skipped: list[WorkItem]
    files: list[Path] = field(default_factory=list)
