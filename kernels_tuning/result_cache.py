"""The result cache of a tuning run, and the driver that owns it.

The cache is an append-only JSONL file: one line per evaluated config ("eval") and one per
finished item ("item"); a "retune" line makes the items it names count as never tuned
(`ResultCache.mark_retune`). A killed run resumes: finished items are skipped, and the
evaluations of an unfinished one are reused without re-timing. Only the driver writes it, so
several GPUs cannot race on it (the engines' tuners lost results to exactly that race).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from kernels_tuning.kernel_config import KernelConfig
from kernels_tuning.strategies import Trial
from kernels_tuning.work_items import ItemResult, WorkItem, us_or_inf, us_or_none

Log = Callable[[str], None]


class ResultCache:
    """Append-only JSONL of evaluations and finished items (module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def append(self, record: Mapping[str, Any], *, sync: bool = False) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(record, separators=(",", ":")) + "\n")
            f.flush()
            if sync:
                os.fsync(f.fileno())

    def load(self) -> tuple[dict[str, dict[KernelConfig, float]], dict[str, ItemResult]]:
        """(evaluations by item key, finished results by item key). A torn last line (killed
        mid-write) is skipped."""
        evals: dict[str, dict[KernelConfig, float]] = {}
        done: dict[str, ItemResult] = {}
        for lineno, r in self.records():
            try:
                if r.get("t") == "eval":
                    cfg = KernelConfig.from_dict(r["cfg"])
                    evals.setdefault(r["item"], {})[cfg] = (
                        us_or_inf(r.get("us")) if r.get("ok") else math.inf
                    )
                elif r.get("t") == "item":
                    res = ItemResult.from_record(r)
                    done[res.item.key()] = res
                elif r.get("t") == "retune":
                    # Forget what came before for these items: they are searched afresh (a
                    # changed space or kernel); records after this line count again.
                    for key in r["items"]:
                        evals.pop(str(key), None)
                        done.pop(str(key), None)
            except (KeyError, TypeError, ValueError, ConfigError) as exc:
                raise ConfigError(
                    f"line {lineno}: malformed record ({exc})", source=str(self.path)
                ) from None
        return evals, done

    def records(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """(line number, record) of each line; a torn last line (killed mid-write) is skipped
        and that evaluation simply redone."""
        if not self.path.exists():
            return
        for lineno, line in enumerate(self.path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError:
                continue

    def superseded(self) -> dict[str, list[ItemResult]]:
        """Per item, the finished results that retune records set aside, oldest first (what was
        shipped before each re-tune; also what an interrupted re-tune had finished when it was
        marked again): `polish(prior=...)` times them against the new winners, so a re-tune
        whose search missed a config found earlier keeps the faster one."""
        done: dict[str, ItemResult] = {}
        out: dict[str, list[ItemResult]] = {}
        for _, r in self.records():
            if r.get("t") == "item":
                res = ItemResult.from_record(r)
                done[res.item.key()] = res
            elif r.get("t") == "retune":
                for key in r["items"]:
                    if str(key) in done:
                        out.setdefault(str(key), []).append(done.pop(str(key)))
        return out

    def mark_retune(self, items: Iterable[WorkItem]) -> int:
        """Append a record that makes `load` forget the earlier evaluations and results of
        `items`, so the next run searches them again (e.g. after the space gained SWAP_AB).
        Returns how many items were marked."""
        keys = sorted({i.key() for i in items})
        if keys:
            self.append({"t": "retune", "items": keys}, sync=True)
        return len(keys)


def eval_record(item: WorkItem, trial: Trial) -> dict[str, Any]:
    r = trial.result
    rec: dict[str, Any] = {
        "t": "eval",
        "item": item.key(),
        "cfg": trial.config.as_dict(),
        "us": us_or_none(trial.cost),
        "ok": math.isfinite(trial.cost),
        "phase": trial.phase,
    }
    for attr in ("error", "rel_err", "early", "launch_s", "wall_s"):
        v = getattr(r, attr, None)
        if v not in (None, False):
            rec[attr] = round(v, 6) if isinstance(v, float) else v
    return rec


class Driver:
    """Owns the cache and the finished results; hands out seeds."""

    def __init__(self, cache: ResultCache, log: Log) -> None:
        self.cache = cache
        self.log = log
        self.evals, self.done = cache.load()

    def finish(self, res: ItemResult) -> None:
        self.done[res.item.key()] = res
        self.cache.append(res.to_record(), sync=True)
        self.log(
            f"{res.item.key():48s} best {res.best_us:9.2f} us {res.best.key() if res.best else '-'}"
            f"  evals {res.evaluations}/{res.space_size}  {res.wall_s:.1f}s"
        )
