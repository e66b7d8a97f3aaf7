"""Report figures (matplotlib, Agg): forgetting curves (per run, and per configuration with a band across
seeds), step x set heatmaps, paired metrics, training loss.

Every ``plot_*`` function saves one PNG and returns what it drew, read back from the figure's lines or
image (``{panel: {run_label: (xs, ys)}}`` or the matrix), so tests can check the points against the data.
Missing values (n = 0 sets) are NaN: matplotlib leaves a gap.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from evolve_train.evaluation.metrics.directions import (  # noqa: E402
    LOG_SCALE,
    canonical,
    higher_is_better,
    is_metric,
    leaf,
    mark,
)
from evolve_train.evaluation.rows import ALL, ROW_META, SPLIT_ORDER, Run, checkpoint_label, column_key  # noqa: E402

HIDDEN = ROW_META | {"n"}  # not drawn: a row's identity, its run, and its item count
Series = dict[str, dict[str, tuple[list[float], list[float]]]]
KIND_COLUMNS = ("new", "updated", "outdated")
BAND = "seed-band"  # gid of the drawn 95% bands across seeds
INITIAL = "_initial model"  # label of the dashed line of the model before training (hidden from legends)


def _value(value) -> float:
    return math.nan if value is None else float(value)


def _read_back(axes_by_panel: dict) -> Series:
    """The points actually drawn: ``{panel: {line label: (xs, ys)}}``."""
    return {
        panel: {
            line.get_label(): ([float(x) for x in line.get_xdata()], [float(y) for y in line.get_ydata()])
            for line in ax.get_lines()
        }
        for panel, ax in axes_by_panel.items()
    }


def _save(fig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def forgetting_layout(columns: list[str]) -> list[list[str | None]]:
    """Panel grid: row 0 ``unchanged``; row k: ``new_k``, ``updated_k``, ``outdated_k``; other sets after."""
    rows: list[list[str | None]] = []
    plain = [c for c in columns if "_" not in c]
    if plain:
        rows.append(plain[:3] + [None] * (3 - len(plain[:3])))
        for start in range(3, len(plain), 3):
            chunk = plain[start : start + 3]
            rows.append(chunk + [None] * (3 - len(chunk)))
    steps = sorted({int(c.rpartition("_")[2]) for c in columns if c.rpartition("_")[2].isdigit()})
    for step in steps:
        rows.append([f"{kind}_{step}" if f"{kind}_{step}" in columns else None for kind in KIND_COLUMNS])
    known = {c for row in rows for c in row if c}
    extra = [c for c in columns if c not in known]
    for start in range(0, len(extra), 3):
        chunk = extra[start : start + 3]
        rows.append(chunk + [None] * (3 - len(chunk)))
    return rows


def _forgetting_panels(columns: list[str], checkpoints: list[int], metric: str):
    """The figure and ``{column: axes}`` of the forgetting-curve grid (:func:`forgetting_layout`), styled."""
    layout = forgetting_layout(columns)
    fig, axes = plt.subplots(len(layout), 3, figsize=(12, 2.8 * len(layout)), squeeze=False)
    panels = {}
    for r, row in enumerate(layout):
        for c, column in enumerate(row):
            ax = axes[r][c]
            if column is None:
                ax.axis("off")
                continue
            kind = column.rpartition("_")[0] if column.rpartition("_")[2].isdigit() else column
            hint = " (stale answer: lower is better)" if higher_is_better(metric, kind) is False else ""
            ax.set_title(f"{column}{hint}", fontsize=10)
            ax.set_ylim(-0.05, 1.05)
            ax.set_xticks(checkpoints, [checkpoint_label(k) for k in checkpoints])
            ax.set_xlabel("checkpoint (time step)")
            ax.set_ylabel(metric.upper())
            ax.grid(alpha=0.3)
            panels[column] = ax
    return fig, panels


def _legend_and_title(fig, panels: dict, title: str) -> None:
    first = next(iter(panels.values()), None)
    if first is not None:
        lines = first.get_lines()
        fig.legend(
            lines,
            [line.get_label() for line in lines],
            loc="upper center",
            ncol=min(4, len(lines)),
            bbox_to_anchor=(0.5, 1.0),
        )
    fig.suptitle(title, y=1.03)
    fig.tight_layout()


def plot_forgetting_curves(runs: list[Run], path: Path, metric: str = "em") -> Series:
    """EM per eval set over checkpoints (time steps), one line per run, one panel per set."""
    columns = sorted({c for run in runs for c in run.columns}, key=column_key)
    fig, panels = _forgetting_panels(columns, sorted({k for run in runs for k in run.checkpoints}), metric)
    for column, ax in panels.items():
        for run in runs:
            points = run.series(column, metric)
            ax.plot([k for k, _ in points], [_value(v) for _, v in points], marker="o", label=run.label)
    _legend_and_title(fig, panels, f"{metric.upper()} per eval set over time steps")
    series = _read_back(panels)
    _save(fig, path)
    return series


def _read_back_bands(panels: dict) -> dict:
    """The bands actually drawn: ``{panel: {band label: (xs, lows, highs)}}`` from the filled polygons."""
    out: dict = {}
    for panel, ax in panels.items():
        for band in [c for c in ax.collections if c.get_gid() == BAND]:
            vertices = np.concatenate([path.vertices for path in band.get_paths()])
            xs = sorted({float(x) for x in vertices[:, 0]})
            low = [float(vertices[vertices[:, 0] == x, 1].min()) for x in xs]
            high = [float(vertices[vertices[:, 0] == x, 1].max()) for x in xs]
            out.setdefault(panel, {})[band.get_label()] = (xs, low, high)
    return out


def _band(ax, cells: list, color, label: str) -> None:
    """A shaded 95% band over ``cells`` [(checkpoint, SeedStats)]; at a single checkpoint a wide translucent bar."""
    if len(cells) == 1:
        k, s = cells[0]
        ax.vlines([k], [s.low], [s.high], colors=[color], linewidth=10, alpha=0.25, label=label, gid=BAND)
    elif cells:
        ax.fill_between(
            [k for k, _ in cells],
            [s.low for _, s in cells],
            [s.high for _, s in cells],
            color=color,
            alpha=0.2,
            linewidth=0,
            label=label,
            gid=BAND,
        )


def plot_seed_bands(groups, path: Path, metric: str = "em") -> dict:
    """Mean EM across seeds per configuration (a line) with its 95% t-interval (a shaded band), one panel per
    eval set. ``groups``: :class:`~evolve_train.reporting.seeds.RunGroup`. Returns ``{"lines": Series,
    "bands": {panel: {group name: (xs, lows, highs)}}}`` read back from the figure."""
    columns = sorted({c for group in groups for c in group.columns}, key=column_key)
    fig, panels = _forgetting_panels(columns, sorted({k for g in groups for k in g.checkpoints}), metric)
    for column, ax in panels.items():
        for group in groups:
            cells = [(k, group.stats(k, column, metric)) for k in group.checkpoints]
            cells = [(k, s) for k, s in cells if s.n]
            (line,) = ax.plot([k for k, _ in cells], [s.mean for _, s in cells], marker="o", label=group.name)
            _band(ax, [(k, s) for k, s in cells if s.low is not None], line.get_color(), group.name)
    _legend_and_title(fig, panels, f"{metric.upper()} per eval set: mean across seeds, band = 95% t-interval")
    drawn = {"lines": _read_back(panels), "bands": _read_back_bands(panels)}
    _save(fig, path)
    return drawn


def em_matrix(run: Run, metric: str = "em") -> tuple[list[int], list[str], np.ndarray]:
    """(checkpoints, columns, values) with NaN where a set was not evaluated."""
    ckpts, columns = run.checkpoints, run.columns
    values = np.array([[_value(run.cell(k, c, metric)) for c in columns] for k in ckpts], dtype=float)
    return ckpts, columns, values


def plot_matrix_heatmap(run: Run, path: Path, metric: str = "em") -> np.ndarray:
    """The checkpoint x eval-set matrix of one run as an annotated heatmap; returns the drawn array."""
    ckpts, columns, values = em_matrix(run, metric)
    fig, ax = plt.subplots(figsize=(1.0 + 1.1 * len(columns), 1.0 + 0.6 * len(ckpts)))
    image = ax.imshow(np.ma.masked_invalid(values), vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(columns)), columns, rotation=45, ha="right")
    ax.set_yticks(range(len(ckpts)), [checkpoint_label(k) for k in ckpts])
    ax.set_xlabel("eval set")
    ax.set_ylabel("checkpoint")
    for i in range(len(ckpts)):
        for j in range(len(columns)):
            if not math.isnan(values[i, j]):
                ax.text(
                    j,
                    i,
                    f"{values[i, j]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if values[i, j] < 0.5 else "black",
                )
    fig.colorbar(image, ax=ax, label=metric.upper())
    ax.set_title(f"{run.label}: {metric.upper()} by checkpoint and eval set", fontsize=10)
    drawn = np.ma.filled(image.get_array().astype(float), np.nan)
    _save(fig, path)
    return drawn


def flat_metrics(row: dict) -> dict[str, float]:
    """A row's numeric metrics under their current names (``directions.canonical``), nested dicts flattened to
    ``a/b``; counts, timings, intervals and settings (``directions.is_metric``) left out."""
    out: dict[str, float] = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}/{key}" if prefix else str(key), inner)
        elif value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            if is_metric(prefix):
                out[canonical(prefix)] = _value(value)

    walk("", {k: v for k, v in row.items() if k not in HIDDEN})
    return out


def _group_rows(run: Run, group: str) -> list[dict]:
    rows = run.group_rows(group)
    if any(r.get("set_name") == ALL for r in rows):  # the row over all sets stands for the group
        rows = [r for r in rows if r.get("set_name") == ALL]
    return rows


def group_metric_names(runs: list[Run], group: str) -> list[str]:
    """Metrics of a group with at least one number (all-None metrics are not drawn)."""
    names = {
        k for run in runs for row in _group_rows(run, group) for k, v in flat_metrics(row).items() if not math.isnan(v)
    }
    return sorted(names)


def plot_group_metrics(runs: list[Run], group: str, path: Path) -> Series:
    """Numeric metrics of a row group (e.g. ``paired``) per checkpoint: a panel per metric, a line per run
    (and per ``set_name`` when the group has several and no row over all sets)."""
    names = group_metric_names(runs, group)
    if not names:
        return {}
    cols = min(3, len(names))
    nrows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.0 * nrows), squeeze=False)
    ckpts = sorted({int(r["checkpoint"]) for run in runs for r in run.group_rows(group)})
    panels = {}
    for index, name in enumerate(names):
        ax = axes[index // cols][index % cols]
        values = []
        for run in runs:
            rows = _group_rows(run, group)
            set_names = sorted({str(r.get("set_name") or "") for r in rows}, key=column_key)
            for set_name in set_names:
                points = sorted(
                    (int(r["checkpoint"]), flat_metrics(r)[name])
                    for r in rows
                    if str(r.get("set_name") or "") == set_name and name in flat_metrics(r)
                )
                if points:
                    label = run.label if len(set_names) == 1 else f"{run.label} {set_name}"
                    ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
                    values += [p[1] for p in points if not math.isnan(p[1])]
        _initial_line(ax, runs, group, name)
        if leaf(name) in LOG_SCALE and values and min(values) > 0:
            ax.set_yscale("log")
        elif values and all(0 <= v <= 1 for v in values):
            ax.set_ylim(-0.05, 1.05)
        ax.set_xticks(ckpts, [checkpoint_label(k) for k in ckpts])
        ax.set_title(f"{name}{mark(name)}", fontsize=10)
        ax.set_xlabel("checkpoint (time step)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        panels[name] = ax
    for index in range(len(names), nrows * cols):
        axes[index // cols][index % cols].axis("off")
    fig.suptitle(f"{group} metrics per time step")
    fig.tight_layout()
    series = _read_back(panels)
    _save(fig, path)
    return series


def _initial_line(ax, runs: list[Run], group: str, name: str) -> None:
    """A dashed line at the initial model's value (checkpoint -1) of a metric with a single such value."""
    values = {
        flat_metrics(r).get(name) for run in runs for r in _group_rows(run, group) if int(r["checkpoint"]) < 0
    } - {None}
    values = {v for v in values if not math.isnan(v)}
    if len(values) == 1:
        ax.axhline(values.pop(), color="grey", lw=0.8, ls="--", label=INITIAL)


def plot_training_loss(runs: list[Run], path: Path) -> Series:
    """Training loss against optimizer steps counted across time steps (from ``train_log.jsonl``); a dotted
    vertical line where each time step after the first begins (of the first run; labelled ``_time step k``)."""
    runs = [r for r in runs if r.train_rows]
    if not runs:
        return {}
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for run in runs:
        offset, done, xs, ys = 0, {}, [], []
        for row in run.train_rows:
            if "loss" not in row:  # a step's group: mix row (methods/mixing.py) carries counts, no loss
                continue
            ts = row["time_step"]
            offset = sum(v for k, v in done.items() if k < ts)
            done[ts] = max(done.get(ts, 0), row["optimizer_step"])
            xs.append(offset + row["optimizer_step"])
            ys.append(_value(row.get("loss")))
        ax.plot(xs, ys, label=run.label)
        if run is runs[0]:
            starts = sorted(done)
            for ts in starts[1:]:
                x = sum(v for k, v in done.items() if k < ts)
                ax.axvline(x, color="grey", lw=0.7, ls=":", label=f"_time step {ts}")
                ax.annotate(f"time step {ts}", (x, 1.0), xycoords=("data", "axes fraction"), fontsize=7, color="grey")
    ax.set_xlabel("optimizer step (counted over all time steps)")
    ax.set_ylabel("training loss")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    series = _read_back({"loss": ax})
    _save(fig, path)
    return series


def updated_em(run: Run, checkpoint: int) -> float | None:
    """EM over every Updated set of ``checkpoint`` pooled by question (sets weighted by their ``n``)."""
    rows = [
        r
        for r in run.split_rows
        if int(r["checkpoint"]) == checkpoint and r.get("set") == "updated" and r.get("em") is not None and r.get("n")
    ]
    count = sum(int(r["n"]) for r in rows)
    return sum(float(r["em"]) * int(r["n"]) for r in rows) / count if count else None


def tradeoff_points(runs: list[Run]) -> dict[str, list[tuple[str, float, float]]]:
    """``{held-out text: [(run, Updated EM, perplexity)]}`` at each run's final checkpoint (runs with both), and
    ``{held-out text + " (initial)": [(run, nan, perplexity)]}`` of the model before training where evaluated."""
    out: dict[str, list[tuple[str, float, float]]] = {}
    for run in runs:
        final = run.final_checkpoint
        em = updated_em(run, final)
        for row in run.group_rows("heldout"):
            name, ppl = str(row.get("set_name")), row.get("perplexity")
            if ppl is None:
                continue
            if int(row["checkpoint"]) == final and em is not None:
                out.setdefault(name, []).append((run.label, float(em), float(ppl)))
            elif int(row["checkpoint"]) < 0:
                out.setdefault(f"{name} (initial)", []).append((run.label, math.nan, float(ppl)))
    return out


def plot_perplexity_vs_updated(runs: list[Run], path: Path) -> Series:
    """The trade-off in one picture: held-out perplexity (general text, lower: less forgetting of language)
    against Updated EM (higher: more updates learned) at the final checkpoint, one point per run (arm), one panel
    per held-out text; the initial model's perplexity, where evaluated, as a dashed line."""
    points = tradeoff_points(runs)
    names = sorted(name for name in points if not name.endswith(" (initial)"))
    if not names:
        return {}
    fig, axes = plt.subplots(1, len(names), figsize=(5.5 * len(names), 4.5), squeeze=False, layout="constrained")
    panels = {}
    markers = "osD^v<>ph*"
    for ax, name in zip(axes[0], names):
        for n, (label, em, ppl) in enumerate(points[name]):
            ax.plot([em], [ppl], marker=markers[n % len(markers)], ls="", ms=7, alpha=0.85, label=label)
        initial = sorted({ppl for _, _, ppl in points.get(f"{name} (initial)", [])})
        for ppl in initial[:1]:
            ax.axhline(ppl, color="grey", lw=0.8, ls="--", label="_initial model")
            ax.annotate(
                "initial model", (0.0, ppl), fontsize=7, color="grey", xytext=(2, 3), textcoords="offset points"
            )
        ax.set_xlim(-0.05, 1.05)
        ax.set_xlabel("Updated EM at the final checkpoint (higher: updates learned)")
        ax.set_ylabel(f"held-out perplexity: {name} (lower: language kept)")
        ax.grid(alpha=0.3)
        panels[name] = ax
    # one legend under the panels (labels name the arms; beside each point they would crowd it)
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside lower center", fontsize=7, ncols=1, frameon=False)
    fig.suptitle("Held-out perplexity against Updated EM, one point per run", fontsize=10)
    series = _read_back(panels)
    _save(fig, path)
    return series


__all__ = [
    "SPLIT_ORDER",
    "em_matrix",
    "forgetting_layout",
    "plot_forgetting_curves",
    "plot_group_metrics",
    "plot_matrix_heatmap",
    "plot_perplexity_vs_updated",
    "plot_seed_bands",
    "plot_training_loss",
    "tradeoff_points",
    "updated_em",
]
