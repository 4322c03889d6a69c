"""PNG plots of a report (matplotlib's Agg canvas, no pyplot: no GUI backend, no global state).

Each plot returns a PlotResult: the file it wrote, or None and the reason it could not be drawn
(too little data), so report.md can say why a picture is missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    from autotune.report.collect import ReportData, TrialInfo

DPI = 110
SIZE = (8.0, 4.6)
C_TRIAL = "#9aa5b1"
C_BEST = "#1f6feb"
C_BASE = "#6e7781"
C_WIN = "#d1242f"
C_FRONT = "#bf8700"
THROUGHPUT_KINDS = ("throughput", "decode", "agent")


class PlotResult(BaseModel):
    name: str
    title: str
    path: str | None = None
    note: str = ""


def _figure() -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=SIZE, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.grid(True, alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    return fig, ax


def _save(fig: Any, path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    return str(path)


def _banner(fig: Any, data: ReportData) -> None:
    if data.simulated:
        fig.text(
            0.005,
            0.005,
            "SIMULATED engine, not a real GPU",
            ha="left",
            va="bottom",
            color=C_WIN,
            fontsize=8,
            fontweight="bold",
        )


def best_so_far(data: ReportData, path: Path) -> PlotResult:
    title = "Objective per trial and best so far"
    done = [t for t in data.trials if t.status == "complete" and t.value is not None]
    res = PlotResult(name="best_so_far", title=title)
    if not done:
        res.note = "no completed trial to plot"
        return res
    done.sort(key=lambda t: t.number if t.number is not None else t.id)
    xs = [t.number if t.number is not None else t.id for t in done]
    ys = [float(t.value or 0.0) for t in done]
    maximize = data.objective_direction == "maximize"
    best: list[float] = []
    for y in ys:
        best.append(y if not best else (max(best[-1], y) if maximize else min(best[-1], y)))
    fig, ax = _figure()
    ax.scatter(xs, ys, s=22, color=C_TRIAL, label="completed trial", zorder=2)
    ax.step(xs, best, where="post", color=C_BEST, lw=2, label="best so far", zorder=3)
    if data.baseline is not None and data.baseline.value is not None:
        ax.axhline(
            data.baseline.value,
            color=C_BASE,
            ls="--",
            lw=1.2,
            label=f"baseline (trial {data.baseline.label})",
        )
    if data.winner is not None and data.winner.value is not None:
        wx = data.winner.number if data.winner.number is not None else data.winner.id
        ax.scatter(
            [wx],
            [data.winner.value],
            marker="*",
            s=180,
            color=C_WIN,
            zorder=4,
            label=f"winner (trial {data.winner.label})",
        )
    others = [t for t in data.trials if t.status in ("failed", "pruned")]
    if others:
        ox = [t.number if t.number is not None else t.id for t in others]
        ax.plot(
            ox,
            [0] * len(ox),
            "|",
            color=C_WIN,
            ms=10,
            mew=1.2,
            transform=ax.get_xaxis_transform(),
            label=f"failed or pruned ({len(others)})",
        )
    ax.set_xlabel("trial number")
    ax.set_ylabel(_metric_label(data.objective_metric))
    ax.set_title(f"{title} ({'higher' if maximize else 'lower'} is better)")
    ax.legend(loc="best", fontsize=8, frameon=False)
    _banner(fig, data)
    res.path = _save(fig, path)
    return res


def _metric_label(metric: str) -> str:
    """tput8.output_tok_s -> "tput8: output tok/s"."""
    from autotune.report.render import figure_name

    owner, _, fig = metric.rpartition(".")
    return f"{owner}: {figure_name(fig)}" if owner else figure_name(metric)


# (concurrency, output tok/s, min, max, scenario)
_TputPoint = tuple[int, float, float | None, float | None, str]


def _tput_points(t: TrialInfo | None) -> list[_TputPoint]:
    """(concurrency, output tok/s, min, max, scenario) of a trial's throughput-like scenarios."""
    if t is None:
        return []
    pts = []
    for name, s in t.scenarios.items():
        if s.kind not in THROUGHPUT_KINDS:
            continue
        tput = s.figures.get("output_tok_s")
        if tput is None:
            continue
        lo = hi = None
        if s.main.figure == "output_tok_s" and s.main.mean is not None:
            tput, lo, hi = s.main.mean, s.main.min, s.main.max
        pts.append((s.concurrency or 1, float(tput), lo, hi, name))
    return sorted(pts)


def throughput_vs_concurrency(data: ReportData, path: Path) -> PlotResult:
    title = "Output throughput vs concurrency: winner and baseline"
    res = PlotResult(name="throughput_vs_concurrency", title=title)
    series = [("winner", data.winner, C_WIN), ("baseline", data.baseline, C_BASE)]
    pts = {label: _tput_points(t) for label, t, _ in series}
    if not any(pts.values()):
        res.note = "no throughput, decode or agent scenario reported output tok/s"
        return res
    levels = sorted({p[0] for ps in pts.values() for p in ps})
    fig, ax = _figure()
    for label, t, color in series:
        ps = pts[label]
        if not ps or t is None:
            continue
        _throughput_series(ax, ps, color, f"{label} (trial {t.label})")
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(c) for c in levels])
    ax.set_xlabel("concurrent requests (streams)")
    ax.set_ylabel("output tok/s (mean over repeats; bars: min-max)")
    ax.set_ylim(bottom=0)
    if len(levels) == 1:
        res.note = (
            f"the workload ran at one concurrency only ({levels[0]}), so this is one point per "
            "configuration, not a curve; add throughput scenarios at other concurrencies to see "
            "how it scales"
        )
        ax.set_xlim(levels[0] / 2, levels[0] * 2)
        ax.text(
            0.5,
            0.04,
            "one concurrency level in the workload",
            transform=ax.transAxes,
            ha="center",
            fontsize=8,
            color=C_BASE,
        )
    ax.set_title(title)
    ax.legend(loc="best", fontsize=8, frameon=False)
    _banner(fig, data)
    res.path = _save(fig, path)
    return res


def _throughput_series(ax: Any, ps: list[_TputPoint], color: str, label: str) -> None:
    """One configuration's throughput per concurrency level, min-max bars and scenario names."""
    xs = [p[0] for p in ps]
    ys = [p[1] for p in ps]
    err = [
        [y - (p[2] if p[2] is not None else y) for p, y in zip(ps, ys, strict=True)],
        [(p[3] if p[3] is not None else y) - y for p, y in zip(ps, ys, strict=True)],
    ]
    ax.errorbar(
        xs,
        ys,
        yerr=err,
        fmt="o-" if len(xs) > 1 else "o",
        color=color,
        capsize=4,
        lw=2,
        ms=7,
        label=label,
    )
    for x, y, *_, name in ps:
        ax.annotate(
            name, (x, y), textcoords="offset points", xytext=(6, 4), fontsize=7, color=color
        )


def pareto(data: ReportData, path: Path) -> PlotResult:
    title = "Trade-off: throughput vs TTFT p95, Pareto front highlighted"
    if data.multi_objective:
        title = "Objectives of every completed trial, Pareto front highlighted"
    res = PlotResult(name="pareto", title=title)
    pts = data.pareto
    if len(pts) < 2:
        res.note = "fewer than two completed trials with both figures: no trade-off to show"
        return res
    if data.multi_objective and len(data.objectives) < 2:
        res.note = "one objective only: no front to draw"
        return res
    xs = [p.values[1] for p in pts]
    ys = [p.values[0] for p in pts]
    fig, ax = _figure()
    ax.scatter(xs, ys, s=24, color=C_TRIAL, label="completed trial", zorder=2)
    front = sorted((p.values[1], p.values[0], p.number) for p in pts if p.on_front)
    ax.plot(
        [f[0] for f in front],
        [f[1] for f in front],
        "o-",
        color=C_FRONT,
        lw=1.8,
        ms=7,
        label=f"Pareto front ({len(front)})",
        zorder=3,
    )
    for fx, fy, num in front:
        ax.annotate(f"#{num}", (fx, fy), textcoords="offset points", xytext=(5, 5), fontsize=7)
    for t, color, label in ((data.winner, C_WIN, "winner"), (data.baseline, C_BASE, "baseline")):
        hit = next((p for p in pts if t is not None and p.number == t.number), None)
        if hit is not None and t is not None:
            ax.scatter(
                [hit.values[1]],
                [hit.values[0]],
                marker="*" if label == "winner" else "D",
                s=160 if label == "winner" else 60,
                color=color,
                zorder=4,
                label=f"{label} (trial {t.label})",
            )
    ax.set_xlabel(_axis_label(data.pareto_axes[0]))
    ax.set_ylabel(_axis_label(data.pareto_axes[1]))
    ax.set_title(title)
    ax.legend(loc="best", fontsize=8, frameon=False)
    _banner(fig, data)
    res.path = _save(fig, path)
    return res


def _axis_label(text: str) -> str:
    return _metric_label(text) if "." in text and ":" not in text else text


def importances(data: ReportData, path: Path) -> PlotResult:
    title = "Parameter importances"
    res = PlotResult(name="importances", title=title)
    imp = data.importances.values
    if not imp:
        res.note = data.importances.note or "no importances"
        return res
    items = sorted(imp.items(), key=lambda kv: kv[1])
    fig, ax = _figure()
    fig.set_size_inches(SIZE[0], max(2.2, 0.42 * len(items) + 1.2))
    ax.barh([k for k, _ in items], [v for _, v in items], color=C_BEST)
    for i, (_, v) in enumerate(items):
        ax.text(v, i, f" {v:.2f}", va="center", fontsize=8)
    ax.set_xlabel(f"importance ({data.importances.method.split(' ')[0]}, normalised to sum 1)")
    ax.set_xlim(0, max(v for _, v in items) * 1.18)
    ax.grid(True, axis="x", alpha=0.3)
    ax.grid(False, axis="y")
    ax.set_title(f"{title}: {_metric_label(data.objective_metric)}")
    _banner(fig, data)
    res.path = _save(fig, path)
    return res


PLOTS = {
    "best_so_far": best_so_far,
    "throughput_vs_concurrency": throughput_vs_concurrency,
    "pareto": pareto,
    "importances": importances,
}


def draw_all(
    data: ReportData, out_dir: Path, names: Sequence[str] = tuple(PLOTS)
) -> list[PlotResult]:
    """Every plot into out_dir/<name>.png."""
    return [PLOTS[n](data, out_dir / f"{n}.png") for n in names]
