"""Every metric the evaluators computed, per row group and set, with its n and interval where the row has one.

Nothing here knows an evaluator: each group of ``metrics.jsonl`` other than ``splits`` (the EM tables) and
``timing`` gets one table, with one line per (run, set, metric) at the final checkpoint, the initial model's
value beside it where it was evaluated. A metric is any numeric key that ``directions.is_metric`` accepts,
nested dicts flattened to ``a/b``; its n is the count next to it (``n`` in the same dict, ``n_pairs`` for the
pair metrics), its interval the ``<name>_ci`` next to it. Directions (↑ higher is better, ↓ lower) come from
``evaluation/metrics/directions.py``; metric definitions: docs/metrics.md.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from evolve_train.evaluation.metrics.directions import canonical, is_metric, mark
from evolve_train.evaluation.rows import ROW_META, SPLITS, Run, column_key

SKIPPED_GROUPS = frozenset({SPLITS, "timing"})
"""Groups without a table here: the split EM (the per-step and final tables) and the evaluators' timings."""

COUNTED_BY = {"update_adoption": "n_pairs", "confusion_index": "n_pairs", "pair_asymmetry": "n_pairs"}
"""Metrics whose n is another count of their row than ``n``."""

GROUP_TITLES = {"flip_rate": "flip rate", "heldout": "held-out perplexity"}
"""Readable titles of groups whose name says less than the metric (the group name follows in brackets)."""

Entry = tuple[str, float, Optional[int], Optional[list]]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def row_metrics(row: dict) -> list[Entry]:
    """``[(name, value, n, ci)]`` of one row: every metric under its current name, with the count and the
    interval stored next to it."""
    out: list[Entry] = []

    def walk(prefix: str, body: dict) -> None:
        for key, value in body.items():
            name = f"{prefix}{key}"
            if isinstance(value, dict):
                walk(f"{name}/", value)
            elif _number(value) and not (isinstance(value, float) and math.isnan(value)) and is_metric(name):
                count = body.get(COUNTED_BY.get(key, "n"))
                ci = body.get(f"{key}_ci")
                out.append((canonical(name), float(value), count if _number(count) else None, ci or None))

    walk("", {k: v for k, v in row.items() if k not in ROW_META})
    return out


def metric_groups(runs: list[Run]) -> list[str]:
    """Groups with at least one metric, in the order they first appear."""
    groups = dict.fromkeys(
        r["group"] for run in runs for r in run.rows if r.get("group") not in SKIPPED_GROUPS and row_metrics(r)
    )
    return list(groups)


def _fmt(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if abs(value) >= 1000 else f"{value:.3f}"


def _cell(value: float, ci: Optional[list]) -> str:
    if ci and len(ci) == 2 and all(_number(c) for c in ci):
        return f"{_fmt(value)} [{_fmt(ci[0])}, {_fmt(ci[1])}]"
    return _fmt(value)


def group_table(runs: list[Run], group: str) -> tuple[list[str], list[list[str]]]:
    """One group's table: run, set, metric (with its direction), n, the initial model's value (where evaluated)
    and the value at the run's final checkpoint with its 95 % interval where the row has one."""
    with_initial = any(int(r["checkpoint"]) < 0 for run in runs for r in run.group_rows(group))
    header = ["run", "set", "metric", "n"] + (["initial"] if with_initial else []) + ["final [95% CI]"]
    rows = []
    for run in runs:
        final = run.final_checkpoint
        by_set: dict[str, dict[int, dict[str, Entry]]] = {}
        for row in run.group_rows(group):
            cells = {e[0]: e for e in row_metrics(row)}
            by_set.setdefault(str(row.get("set_name") or ""), {})[int(row["checkpoint"])] = cells
        for set_name in sorted(by_set, key=column_key):
            per_ckpt = by_set[set_name]
            last = per_ckpt.get(final) or per_ckpt[max(per_ckpt)]
            initial = per_ckpt.get(-1, {})
            kind = set_name.rpartition("_")[0] if set_name.rpartition("_")[2].isdigit() else set_name
            for name, (_, value, count, ci) in last.items():
                start = initial.get(name)
                rows.append(
                    [run.label, set_name or "-", f"{name}{mark(name, kind)}", "-" if count is None else str(count)]
                    + ([_fmt(start[1]) if start else "-"] if with_initial else [])
                    + [_cell(value, ci)]
                )
    return header, rows


def metric_sections(runs: list[Run]) -> list[tuple[str, str, tuple[list[str], list[list[str]]]]]:
    """(title, intro, table) per group with metrics: the report's every-metric tables."""
    sections = []
    for group in metric_groups(runs):
        title = f"{GROUP_TITLES[group]} ({group})" if group in GROUP_TITLES else group
        intro = (
            f"Every metric of the `{group}` rows at each run's final checkpoint, per set (docs/metrics.md); "
            "↑ higher is better, ↓ lower is better, no mark: a diagnostic; n: the items (or tokens) it counts."
        )
        sections.append((f"Metrics: {title}", intro, group_table(runs, group)))
    return sections


__all__ = ["COUNTED_BY", "GROUP_TITLES", "SKIPPED_GROUPS", "group_table", "metric_groups", "metric_sections"]
