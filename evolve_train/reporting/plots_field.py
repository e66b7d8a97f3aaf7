"""Report figures of the field's per-checkpoint measures: lm-eval task curves and year-resolved heatmaps.

:func:`add_plots` appends to the report's figures: ``lm_eval_tasks.png`` (a panel per metric, a curve per task
and run over the checkpoints, the model before training first as ``initial``) where runs have ``lm_eval`` rows,
and ``years_<run>.png`` (checkpoint x year: the share of undated questions answered with that year's value,
docs/metrics.md "Year-resolved answers") per run with ``year_resolved`` rows. Each returns what it drew."""

from __future__ import annotations

import math
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from evolve_train.evaluation.rows import Run  # noqa: E402
from evolve_train.reporting.plots import _read_back, _save, checkpoint_label  # noqa: E402

LM_EVAL = "lm_eval"
YEARS = "year_resolved"


def plot_lm_eval(runs: list[Run], path: Path) -> dict:
    """``{metric: {label: (checkpoints, values)}}``: a panel per metric, a line per task (and run)."""
    rows = [(run, r) for run in runs for r in run.group_rows(LM_EVAL) if r.get("value") is not None]
    if not rows:
        return {}
    metrics = sorted({r["metric"] for _, r in rows})
    checkpoints = sorted({int(r["checkpoint"]) for _, r in rows})
    cols = min(3, len(metrics))
    fig, axes = plt.subplots(
        math.ceil(len(metrics) / cols), cols, figsize=(4.4 * cols, 3.2 * math.ceil(len(metrics) / cols)), squeeze=False
    )
    panels = {}
    for index, metric in enumerate(metrics):
        ax = panels[metric] = axes[index // cols][index % cols]
        for run in runs:
            tasks = sorted({r["task"] for r in run.group_rows(LM_EVAL) if r["metric"] == metric})
            for task in tasks:
                points = sorted(
                    (int(r["checkpoint"]), float(r["value"]))
                    for r in run.group_rows(LM_EVAL)
                    if r["metric"] == metric and r["task"] == task and r.get("value") is not None
                )
                label = task if len(runs) == 1 else f"{run.label} {task}"
                ax.plot([k for k, _ in points], [v for _, v in points], marker="o", label=label)
        ax.set_xticks(checkpoints, [checkpoint_label(k) for k in checkpoints])
        ax.set_title(metric, fontsize=10)
        ax.set_xlabel("checkpoint")
        ax.legend(fontsize=7)
    for index in range(len(metrics), axes.size):
        axes[index // cols][index % cols].axis("off")
    fig.suptitle("lm-eval tasks per checkpoint")
    series = _read_back(panels)
    _save(fig, path)
    return series


def year_matrix(run: Run) -> tuple[list[int], list[str], list[list[float]]]:
    """Checkpoints, years and the share of undated questions answered with each year's value (NaN: no fact)."""
    rows = [r for r in run.group_rows(YEARS) if r.get("year") is not None]
    checkpoints = sorted({int(r["checkpoint"]) for r in rows})
    years = sorted({str(r["year"]) for r in rows})
    cells = {(int(r["checkpoint"]), str(r["year"])): r.get("share_undated") for r in rows}
    matrix = [[math.nan if cells.get((k, y)) is None else float(cells[(k, y)]) for y in years] for k in checkpoints]
    return checkpoints, years, matrix


def plot_year_heatmap(run: Run, path: Path) -> dict | None:
    """The checkpoint x year heatmap of one run (``None`` without ``year_resolved`` rows)."""
    checkpoints, years, matrix = year_matrix(run)
    if not checkpoints:
        return None
    fig, ax = plt.subplots(figsize=(1.0 + 0.8 * len(years), 1.0 + 0.5 * len(checkpoints)))
    image = ax.imshow(matrix, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
    for i, values in enumerate(matrix):
        for j, value in enumerate(values):
            if not math.isnan(value):
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8, color="w" if value < 0.6 else "k")
    ax.set_xticks(range(len(years)), years)
    ax.set_yticks(range(len(checkpoints)), [checkpoint_label(k) for k in checkpoints])
    ax.set_xlabel("year whose value is picked")
    ax.set_ylabel("checkpoint")
    ax.set_title(f"Year-resolved answers (undated): {run.label}", fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.05)
    _save(fig, path)
    return {"checkpoints": checkpoints, "years": years, "share": matrix}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "run"


def add_plots(runs: list[Run], out_dir: Path, figures: list, series: dict) -> None:
    """Append the lm-eval curves and the year heatmaps to ``figures`` / ``series`` (the report's)."""
    drawn = plot_lm_eval(runs, out_dir / "lm_eval_tasks.png")
    if drawn:
        series[LM_EVAL] = drawn
        figures.append(
            ("lm-eval tasks per checkpoint (one curve per task; initial = before training)", "lm_eval_tasks.png")
        )
    for run in runs:
        name = f"years_{_slug(run.label)}.png"
        heat = plot_year_heatmap(run, out_dir / name)
        if heat is not None:
            series[f"{YEARS}/{run.label}"] = heat
            figures.append((f"Year-resolved answers: checkpoint x year (docs/metrics.md): {run.label}", name))
