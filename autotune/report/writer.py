"""write_report: one folder with report.md, launch.sh, the systemd unit, winner.json and plots."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from autotune.errors import AutotuneError
from autotune.report.collect import (
    ReportData,
    Selection,
    TrialInfo,
    change_pct,
    collect,
    config_changes,
    jsonable,
)
from autotune.report.launch import (
    REDACTED,
    LaunchSpec,
    Redactor,
    build_launch,
    launch_differs,
    redact_mapping,
    render_launch_sh,
    render_unit,
    safe_name,
    unit_name,
)

if TYPE_CHECKING:
    from autotune.report.plots import PlotResult
    from autotune.store.db import Store

REPORTS_DIR = Path("reports")


class ReportPaths(BaseModel):
    """What write_report wrote (absolute paths; None where a file could not be made)."""

    out_dir: str
    report_md: str
    winner_json: str
    launch_sh: str | None = None
    systemd_unit: str | None = None
    plots: dict[str, str] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list, description="what is missing and why")
    simulated: bool = False
    winner_trial: int | None = None

    def __fspath__(self) -> str:
        """Path-like: `Path(write_report(...))` is report.md."""
        return self.report_md


def default_out_dir(sweep_name: str) -> Path:
    return REPORTS_DIR / safe_name(sweep_name)


def write_report(
    store: Store,
    sweep_name: str,
    out_dir: Path | str | None = None,
    *,
    plots: bool = True,
) -> ReportPaths:
    """Write the report of sweep `sweep_name` into `out_dir` (default reports/<sweep-name>/).

    Raises StorageError when the sweep does not exist; anything missing inside it (no winner,
    no baseline, too few trials for importances, a flag the engine lacks) becomes a note.
    """
    red = Redactor()
    data = collect(store, sweep_name, redactor=red)
    out = Path(out_dir) if out_dir is not None else default_out_dir(data.sweep)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AutotuneError(f"cannot create the report folder {out}: {exc}") from exc
    out = out.resolve()
    generated = data.provenance.generated_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    notes: list[str] = []

    launch, launch_error = _launch(data)
    paths = ReportPaths(
        out_dir=str(out),
        report_md=str(out / "report.md"),
        winner_json=str(out / "winner.json"),
        simulated=data.simulated,
        winner_trial=data.winner.number if data.winner is not None else None,
    )
    if launch is not None:
        script = out / "launch.sh"
        _write(script, render_launch_sh(launch, generated_at=generated), red, verbatim=True)
        os.chmod(script, 0o755)
        unit = out / unit_name(data.sweep)
        _write(unit, render_unit(launch, script), red, verbatim=True)
        paths.launch_sh, paths.systemd_unit = str(script), str(unit)
    elif launch_error:
        notes.append(f"launch.sh not written: {launch_error}")

    plot_results: dict[str, PlotResult] = {}
    if plots:
        from autotune.report.plots import draw_all

        for r in draw_all(data, out):
            plot_results[r.name] = r
            if r.path:
                paths.plots[r.name] = r.path
    _write(out / "winner.json", _winner_json(data, launch, launch_error), red)
    _write(
        out / "report.md",
        _report_md(data, launch, launch_error, plot_results, generated, plots_enabled=plots),
        red,
    )
    paths.notes = notes + [n for n in data.notes if n not in notes]
    return paths


def _write(path: Path, text: str, red: Redactor, *, verbatim: bool = False) -> None:
    """Write one output. Free text is scrubbed of known secret values and NAME=value pairs.
    Scripts are written as rendered: secrets never reach them (build_launch turns them into
    required variables), and rewriting a script could change what it runs."""
    path.write_text(text if verbatim else red.text(text))


def _launch(data: ReportData) -> tuple[LaunchSpec | None, str]:
    w = data.winner
    if w is None:
        return None, "no trial completed" if data.feasible else "no trial met the constraints"
    # What the winning trial started (a real sweep's trials keep it), as it is: its launcher
    # (the default one with its program resolved), release, TP, model and variables. A sweep
    # recorded before that, or a simulated one, is launched as its spec says.
    ran = w.command or {}
    launcher = (ran.get("launcher") or None) if ran else data.launcher
    try:
        spec = build_launch(
            w.config,
            engine=data.provenance.engine,
            engine_version=ran.get("engine_version") or data.provenance.engine_version or "",
            sweep=data.sweep,
            model_path=ran.get("model") or data.model_path,
            env=ran["env"] if isinstance(ran.get("env"), dict) else data.env,
            tp=int(ran.get("tp") or data.tp),
            host=data.host,
            port=data.port,  # None: the engine's default (report.launch.default_port)
            simulated_sweep=data.simulated,
            launcher=launcher,
            inherited=ran.get("inherited") or None,
            gpus=ran.get("gpus") or None,
            gpu_order=ran.get("gpu_order") or None,
        )
    except (AutotuneError, ImportError) as exc:
        return None, str(exc)
    if isinstance(ran.get("argv"), list):
        differs = launch_differs(spec, ran["argv"])
        if differs:
            spec.notes.append(differs)
    elif not ran and not data.simulated:
        spec.notes.append(
            "the winning trial's own command was not recorded (a sweep run by an earlier "
            "autotune): this script follows the spec and finds the engine as this machine does "
            "now"
        )
    return spec, ""


def _headline(data: ReportData) -> str:
    """ "+17.2 % over the engine's defaults (200.0 → 234.4 ...)": on the objective's scenario
    means over every repeat and run when the objective is that scenario's main figure."""
    w, b = data.winner, data.baseline
    if w is None or w.value is None:
        return ""
    from autotune.report.render import figure_value

    metric = data.objective_metric
    if b is None or b.value is None or b.id == w.id:
        text = figure_value(w.value, metric)
        if b is not None and b.id == w.id:
            text += " (the engine's defaults were best)"
        elif b is not None:
            text += " (no value for the engine's defaults to compare with: see the baseline trial)"
        return text
    base, win, how = b.value, w.value, ""
    owner, _, fig = metric.rpartition(".")
    row = next((c for c in data.comparison if c.scenario == owner and c.figure == fig), None)
    if row is not None and row.baseline and row.winner and row.baseline.mean and row.winner.mean:
        base, win = row.baseline.mean, row.winner.mean
        how = f", means over {len(row.baseline.values)} and {len(row.winner.values)} repeats"
    pct = change_pct(base, win)
    sign = "" if pct is None else f"{pct:+.1f} % "
    return (
        f"{sign}over the engine's defaults ({figure_value(base, metric)} → "
        f"{figure_value(win, metric)}{how})"
    )


def _side_rows(data: ReportData) -> list[dict[str, Any]]:
    rows = []
    for c in data.comparison:
        for fig, (base, win) in c.side.items():
            rows.append(
                {
                    "scenario": c.scenario,
                    "figure": fig,
                    "base": base,
                    "win": win,
                    "change": change_pct(base, win),
                }
            )
    return rows


def _report_md(
    data: ReportData,
    launch: LaunchSpec | None,
    launch_error: str,
    plots: dict[str, PlotResult],
    generated: str,
    *,
    plots_enabled: bool,
) -> str:
    import yaml

    from autotune.report.render import environment

    def plot(name: str) -> str:
        r = plots.get(name)
        if r is None:
            return "" if not plots_enabled else f"_(plot {name} not drawn)_"
        if r.path is None:
            return f"_{r.title}: not drawn, {r.note}._"
        text = f"![{r.title}]({Path(r.path).name})"
        return text + (f"\n\n{r.note[0].upper()}{r.note[1:]}." if r.note else "")

    base_cfg = data.baseline.config if data.baseline is not None else None
    changes = config_changes(base_cfg, data.winner.config) if data.winner is not None else {}
    spec_yaml = yaml.safe_dump(data.spec, sort_keys=False, allow_unicode=True) if data.spec else ""
    command = ""
    if launch is not None:
        command = " \\\n  ".join(launch.command_lines())
    env = environment()
    text = env.get_template("report.md.j2").render(
        data=data,
        launch=launch,
        launch_error=launch_error,
        launch_command=command,
        unit_file=unit_name(data.sweep),
        changes=changes,
        headline=_headline(data),
        side_rows=_side_rows(data),
        plot=plot,
        spec_yaml=spec_yaml,
        generated=generated,
    )
    return _tidy(str(text))


def _tidy(text: str) -> str:
    """Markdown spacing: a blank line around headings and images, at most one blank line in a
    row, one trailing newline; code blocks untouched."""
    out: list[str] = []
    fence: str | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.lstrip()
        if fence is not None:
            out.append(line)
            if stripped.startswith(fence) and stripped.strip("`") == "":
                fence = None
            continue
        if stripped.startswith("```"):
            fence = stripped[: len(stripped) - len(stripped.lstrip("`"))]
        block = stripped.startswith(("#", "![")) or fence is not None
        if block and out and out[-1]:
            out.append("")
        if not line and out and not out[-1]:
            continue
        if out and out[-1].lstrip().startswith(("#", "![")) and line and fence is None:
            out.append("")
        out.append(line)
    return "\n".join(out).strip() + "\n"


def _winner_json(data: ReportData, launch: LaunchSpec | None, launch_error: str) -> str:
    w, b = data.winner, data.baseline
    doc: dict[str, Any] = {
        "schema": "autotune.winner/1",
        "sweep": data.sweep,
        "simulated": data.simulated,
        "engine": data.provenance.engine,
        "engine_version": data.provenance.engine_version,
        "model": data.provenance.model,
        "gpu": data.provenance.gpu,
        "tp": data.tp,
        "objective": {
            "metric": data.objective_metric,
            "direction": data.objective_direction,
            "objectives": [{"metric": m, "direction": d} for m, d in data.objectives],
        },
        "feasible": data.feasible,
        "winner": None,
        "baseline": None,
        "launch": None,
        "comparison": [jsonable(c) for c in data.comparison],
        "capacity": jsonable(data.capacity) if data.capacity else None,
        "decode_ceiling": jsonable(data.decode) if data.decode else None,
        "provenance": jsonable(data.provenance),
        "notes": data.notes,
    }
    if w is not None:
        doc["winner"] = _winner_doc(w, b, data.selection)
    if b is not None:
        doc["baseline"] = _baseline_doc(b)
    if launch is not None:
        doc["launch"] = _launch_doc(data, launch)
    else:
        doc["launch_error"] = launch_error
    doc["generated_at"] = datetime.now(UTC).isoformat()
    return json.dumps(doc, indent=2, default=str) + "\n"


def _winner_doc(w: TrialInfo, b: TrialInfo | None, sel: Selection | None) -> dict[str, Any]:
    """winner.json's winner: its config, the changes from the baseline, measurements, the
    startup facts and the planner's prediction. `value` is its search run; `estimate` and
    `ci95` are over every run of it, the figures it was chosen on (the report's)."""
    chosen = sel is not None and sel.winner == w.number
    return {
        "trial": w.number,
        "value": w.value,
        "values": w.values,
        "estimate": sel.estimate if chosen and sel else None,
        "ci95": list(sel.ci95) if chosen and sel and sel.ci95 else None,
        "runs": sel.values if chosen and sel else None,
        "config": redact_mapping(w.config),
        "params": redact_mapping(w.params),
        "changes_from_baseline": {
            k: {"baseline": v[0], "winner": v[1]}
            for k, v in config_changes(b.config if b else None, w.config).items()
        },
        "measurements": {k: jsonable(s) for k, s in w.scenarios.items()},
        "startup": w.launch,
        "predicted": _plan_summary(w.plan),
    }


def _baseline_doc(b: TrialInfo) -> dict[str, Any]:
    return {
        "trial": b.number,
        "status": b.status,
        "value": b.value,
        "config": redact_mapping(b.config),
        "measurements": {k: jsonable(s) for k, s in b.scenarios.items()},
    }


def _launch_doc(data: ReportData, launch: LaunchSpec) -> dict[str, Any]:
    """winner.json's launch: the command, its env (secrets redacted) and script variables."""
    return {
        "script": "launch.sh",
        "systemd_unit": unit_name(data.sweep),
        "argv": launch.argv(),
        "env": {e.name: REDACTED if e.secret else e.value for e in launch.env},
        "required_env": launch.secret_names(),
        "variables": {
            "MODEL_PATH": launch.model_path,
            "HOST": launch.host,
            "PORT": launch.port,
            "PYTHON": launch.python,
        },
    }


_PLAN_KEYS = (
    "fits",
    "weights_gib",
    "kv_pool_tokens",
    "mamba_slots",
    "max_running_requests",
    "bound_by",
    "kv_pool_gib",
    "mamba_pool_gib",
    "slack_gib",
    "slack_needed_gib",
    "host_pool_tokens",
    "host_pool_gb",
    "host_mamba_gb",
)


def _plan_summary(plan: dict[str, Any] | None) -> dict[str, Any] | None:
    if not plan:
        return None
    return {k: plan.get(k) for k in _PLAN_KEYS if k in plan}
