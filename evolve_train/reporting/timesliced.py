"""The report's time-slice, within-step and compute parts (docs/metrics.md#9-time-sliced-perplexity, docs/metrics.md#11-compute).

Figures: a heatmap of each run's held-out slice NLL ``P[i][j]`` (``summary.json`` ``timesliced.nll``), the
within-step probe's EM per split set against optimizer steps (``train_log.jsonl`` rows ``group=within_step``,
a vertical line where a time step begins), and retention against cumulative training FLOPs (one point per run:
Unchanged EM and backward slice NLL at the final checkpoint). Tables: the aggregates (backward / in_dist /
forward of slice NLL with their perplexities and 95 % bootstrap intervals over the slices' examples, of
learned-knowledge EM, and regret against an oracle when one was named) and compute per run (docs/metrics.md#11-compute).
Every ``plot_*`` returns what it drew, like ``reporting/plots.py``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import numpy as np

from evolve_train.evaluation.rows import Run
from evolve_train.reporting.plots import _read_back, _save, _value, checkpoint_label, plt

Table = tuple[list[str], list[list[str]]]


def _fmt(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def slice_nll(run: Run) -> dict:
    return (run.summary.get("timesliced") or {}).get("nll") or {}


def plot_slice_heatmap(run: Run, path: Path) -> Optional[np.ndarray]:
    """P[i][j] of one run (rows: checkpoints, ``initial`` first when evaluated; columns: slices); the drawn array."""
    entry = slice_nll(run)
    if not entry.get("P"):
        return None
    rows = ([("-1", entry["P_init"])] if entry.get("P_init") else []) + [
        (i, entry["P"][i]) for i in sorted(entry["P"], key=int)
    ]
    columns = sorted({int(j) for _, row in rows for j in row})
    values = np.array([[_value(row.get(str(j))) for j in columns] for _, row in rows], dtype=float)
    fig, ax = plt.subplots(figsize=(1.5 + 1.1 * len(columns), 1.0 + 0.6 * len(rows)))
    image = ax.imshow(np.ma.masked_invalid(values), cmap="magma_r", aspect="auto")
    ax.set_xticks(range(len(columns)), [f"slice {j}" for j in columns])
    ax.set_yticks(range(len(rows)), [checkpoint_label(int(name)) for name, _ in rows])
    ax.set_xlabel("held-out slice of step j")
    ax.set_ylabel("checkpoint i")
    middle = np.nanmean(values)
    for r in range(len(rows)):
        for c in range(len(columns)):
            if not math.isnan(values[r, c]):
                ax.text(
                    c,
                    r,
                    f"{values[r, c]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if values[r, c] > middle else "black",
                )
    fig.colorbar(image, ax=ax, label="NLL (nats / loss token)")
    ax.set_title(f"{run.label}: held-out slice NLL P[i][j]", fontsize=10)
    drawn = np.ma.filled(image.get_array().astype(float), np.nan)
    _save(fig, path)
    return drawn


def within_step_points(run: Run) -> dict[str, tuple[list[float], list[float]]]:
    """``{set name: (global optimizer steps, EM)}`` of the within-step rows (steps counted across time steps)."""
    done: dict[int, int] = {}
    for row in run.train_rows:
        done[row["time_step"]] = max(done.get(row["time_step"], 0), row.get("optimizer_step", 0))
    curves: dict[str, tuple[list[float], list[float]]] = {}
    for row in run.within_step:
        offset = sum(v for k, v in done.items() if k < row["time_step"])
        for name, em in (row.get("em") or {}).items():
            xs, ys = curves.setdefault(name, ([], []))
            xs.append(float(offset + row["optimizer_step"]))
            ys.append(_value(em))
    return curves


def plot_within_step(runs: list[Run], path: Path):
    """EM of the within-step probe per split set over optimizer steps: one panel per run."""
    runs = [r for r in runs if r.within_step]
    if not runs:
        return {}
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 3.4 * len(runs)), squeeze=False, layout="constrained")
    panels = {}
    for ax, run in zip(axes[:, 0], runs):
        for name, (xs, ys) in sorted(within_step_points(run).items()):
            ax.plot(xs, ys, marker=".", label=name)
        done: dict[int, int] = {}
        for row in run.train_rows:
            done[row["time_step"]] = max(done.get(row["time_step"], 0), row.get("optimizer_step", 0))
        for step in sorted(done)[1:]:
            ax.axvline(sum(v for k, v in done.items() if k < step), color="grey", lw=0.8, ls="--")
        ax.set_title(f"{run.label}: within-step probe (dashed: a new time step begins)", fontsize=10)
        ax.set_xlabel("optimizer step (all time steps)")
        ax.set_ylabel("EM")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=4)
        panels[run.label] = ax
    series = _read_back(panels)
    _save(fig, path)
    return series


def retention_points(runs: list[Run]) -> dict[str, list[tuple[str, float, float]]]:
    """``{"unchanged_em" | "backward_nll": [(run, cumulative training FLOPs, value)]}`` at the final checkpoints."""
    out: dict[str, list[tuple[str, float, float]]] = {"unchanged_em": [], "backward_nll": []}
    for run in runs:
        flops = ((run.summary.get("compute") or {}).get("totals") or {}).get("train_flops")
        if not flops:
            continue
        em = run.cell(run.final_checkpoint, "unchanged")
        if em is not None:
            out["unchanged_em"].append((run.label, float(flops), float(em)))
        backward = slice_nll(run).get("backward")
        if backward is not None:
            out["backward_nll"].append((run.label, float(flops), float(backward)))
    return out


def plot_retention_vs_flops(runs: list[Run], path: Path):
    """Unchanged EM and backward slice NLL at the final checkpoint against cumulative training FLOPs."""
    points = retention_points(runs)
    if not any(points.values()):
        return {}
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    spent = [f for key in points for _, f, _ in points[key]]
    for ax, (key, label) in zip(
        axes,
        (("unchanged_em", "Unchanged EM (higher: retained)"), ("backward_nll", "backward slice NLL (lower: retained)")),
    ):
        for name, flops, value in points[key]:
            ax.plot([flops], [value], marker="o", ls="", label=name)
            ax.annotate(name, (flops, value), fontsize=7, xytext=(4, 4), textcoords="offset points")
        if max(spent) > 10 * min(spent):  # a log axis only when the runs' compute spans a decade
            ax.set_xscale("log")
        else:
            ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 0))
        ax.set_xlabel("cumulative training FLOPs (estimate, docs/metrics.md#11-compute)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    fig.suptitle("Retention against training compute, one point per run", fontsize=10)
    series = _read_back({"unchanged_em": axes[0], "backward_nll": axes[1]})
    _save(fig, path)
    return series


def _with_interval(value, interval) -> str:
    return _fmt(value) + (f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "")


def aggregates_table(runs: list[Run]) -> Optional[Table]:
    """Per run: slice NLL aggregates [95 % CI] (perplexity), learned-knowledge EM aggregates, regret."""
    rows = []
    for run in runs:
        timesliced = run.summary.get("timesliced") or {}
        nll, ci = timesliced.get("nll") or {}, (timesliced.get("nll") or {}).get("ci") or {}
        if nll:
            rows.append(
                [run.label, "slice NLL [95% CI] (ppl)"]
                + [
                    _with_interval(nll.get(k), ci.get(k)) + f" ({_fmt(nll.get(k + '_perplexity'), 1)})"
                    for k in ("backward", "in_dist", "forward")
                ]
            )
        for kind in ("learned", "unchanged"):
            entry = (timesliced.get("em") or {}).get(kind)
            if entry:
                rows.append(
                    [run.label, f"{kind} EM"] + [_fmt(entry.get(k)) for k in ("backward", "in_dist", "forward")]
                )
        regret = timesliced.get("regret") or {}
        if regret.get("nll"):
            rows.append(
                [run.label, "regret vs oracle (NLL)"]
                + [_fmt(regret["nll"].get(f"regret_{k}")) for k in ("backward", "in_dist", "forward")]
            )
        learned = (regret.get("em") or {}).get("learned")
        if learned:
            rows.append(
                [run.label, "regret vs oracle (learned EM)"]
                + [_fmt(learned.get(f"regret_{k}")) for k in ("backward", "in_dist", "forward")]
            )
    return (["run", "matrix", "backward (j < i)", "in_dist (j = i)", "forward (j > i)"], rows) if rows else None


def compute_table(runs: list[Run]) -> Optional[Table]:
    """Per run and trained step: tokens, loss tokens, optimizer steps, seconds, FLOPs, cumulative FLOPs, and
    the checkpoint's evaluation tokens and seconds; where a run mixed data in, the mix tokens and the
    generation's FLOPs and seconds (generative replay) too."""
    mixed = any(
        key in entry
        for run in runs
        for entry in ((run.summary.get("compute") or {}).get("steps") or {}).values()
        for key in ("mix_tokens", "generation_flops")
    )
    rows = []
    for run in runs:
        compute = run.summary.get("compute") or {}
        for i, entry in sorted((compute.get("steps") or {}).items(), key=lambda kv: int(kv[0])):
            evaluated = (compute.get("eval") or {}).get(i) or {}
            rows.append(
                [
                    run.label,
                    i,
                    str(entry.get("train_tokens")),
                    str(entry.get("loss_tokens")),
                    str(entry.get("optimizer_steps")),
                    _fmt(entry.get("train_seconds"), 1),
                    _sci(entry.get("train_flops")),
                    _sci(entry.get("cumulative_train_flops")),
                    str(evaluated.get("eval_tokens")),
                    _fmt(evaluated.get("eval_seconds"), 1),
                ]
                + (
                    [str(entry.get("mix_tokens", "-")), _sci(entry.get("generation_flops"))]
                    + [_fmt(entry.get("generation_seconds"), 1)]
                    if mixed
                    else []
                )
            )
    header = [
        "run",
        "step",
        "tokens",
        "loss tokens",
        "optimizer steps",
        "train s",
        "FLOPs",
        "cumulative FLOPs",
        "eval tokens",
        "eval s",
    ] + (["mix tokens", "generation FLOPs", "generation s"] if mixed else [])
    return (header, rows) if rows else None


def _sci(value) -> str:
    return "-" if value is None else f"{value:.3e}"
