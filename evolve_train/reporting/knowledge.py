"""Which year each checkpoint knows (docs/metrics.md#14-knowledge-cutoff), from what the evaluation already wrote.

Two kinds of evidence, each shown when the run has it:

* the ``year_resolved`` rows (docs/metrics.md "Year-resolved answers"): ``knowledge_year`` with
  ``knowledge_year_ci``, its 95 % bootstrap interval over facts (``summary.json`` ``knowledge``);
* the time-sliced NLL (docs/metrics.md#9-time-sliced-perplexity): the cutoff slice of each checkpoint against the
  last checkpoint, with the paired bootstrap over the slices' examples (``summary.json``
  ``timesliced.nll.cutoff``; recomputed from ``P`` alone, without an interval, for a summary written before it
  was kept). A slice is named by its time step's name (``summary.json`` ``steps``).

Each estimate reads "YEAR [LOW, HIGH]" or "no cutoff found (why)". :func:`format_knowledge` gives the lines
``evolve-eval`` prints after its table (:func:`run_knowledge`: of a run dir); :func:`knowledge_table` the
report's table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from evolve_train.evaluation.metrics.cutoff import timesliced_rows
from evolve_train.evaluation.rows import METRICS_FILE, Run, checkpoint_label, read_metrics

YEARS = "year_resolved"
NO_CUTOFF = "no cutoff found"


def resolved_entries(rows: list[dict]) -> dict[str, dict]:
    """``{checkpoint: {"year", "ci", "n"}}`` of the ``year_resolved`` summary rows (set ``all``)."""
    out = {}
    for r in rows:
        if r.get("group") == YEARS and r.get("set_name") == "all":
            out[str(r["checkpoint"])] = {
                "year": r.get("knowledge_year"),
                "ci": r.get("knowledge_year_ci"),
                "n": r.get("n"),
            }
    return out


def slice_entries(summary: dict) -> dict[str, dict]:
    """``{checkpoint: timesliced cutoff row}`` of the summary (from ``P`` when the rows were not kept)."""
    nll = (summary.get("timesliced") or {}).get("nll") or {}
    rows = nll.get("cutoff")
    if rows is None and nll.get("P"):
        rows = timesliced_rows(nll["P"])
    return {str(r["checkpoint"]): r for r in rows or []}


def _slice_name(steps: list, j: Any) -> str:
    return str(steps[j]) if isinstance(j, int) and 0 <= j < len(steps) else f"slice {j}"


def describe_resolved(entry: dict) -> str:
    """``2019 [2018, 2020] (12 facts)`` or ``no cutoff found (...)``."""
    if entry.get("year") is None:
        return f"{NO_CUTOFF} (no fact with two values)"
    ci = entry.get("ci")
    interval = f" [{ci[0]}, {ci[1]}]" if ci else " (no interval)"
    return f"{entry['year']}{interval} ({entry.get('n')} facts)"


def describe_slice(entry: dict, steps: list, last: str) -> str:
    """``2019 [2018, 2020] (slice NLL against checkpoint 2)`` or ``no cutoff found (...)``."""
    against = f"slice NLL against checkpoint {last}"
    if entry.get("cutoff_slice") is None:
        return f"{NO_CUTOFF} ({entry.get('reason') or 'no rise of the slice NLL'}; {against})"
    lo, hi = entry.get("lo"), entry.get("hi")
    interval = f" [{_slice_name(steps, lo)}, {_slice_name(steps, hi)}]" if lo is not None else " (no interval)"
    return f"{_slice_name(steps, entry['cutoff_slice'])}{interval} ({against})"


def knowledge_rows(summary: dict, rows: Optional[list[dict]] = None) -> list[tuple[str, Optional[str], Optional[str]]]:
    """Per checkpoint (in order): (checkpoint, the year_resolved estimate, the slice estimate); None where the
    run has no such evidence. ``rows``: the run's rows (else ``summary["knowledge"]``)."""
    resolved = resolved_entries(rows) if rows is not None else dict(summary.get("knowledge") or {})
    sliced = slice_entries(summary)
    steps, last = list(summary.get("steps") or []), max(sliced, key=int, default="")
    out = []
    for k in sorted(set(resolved) | set(sliced), key=int):
        year = describe_resolved(resolved[k]) if k in resolved else None
        cut = describe_slice(sliced[k], steps, last) if k in sliced else None
        out.append((k, year, cut))
    return out


def format_knowledge(summary: dict, rows: Optional[list[dict]] = None) -> str:
    """One ``knowledge year @ checkpoint K: ...`` line per checkpoint ("" without evidence)."""
    lines = []
    for k, year, cut in knowledge_rows(summary, rows):
        parts = ([f"year_resolved {year}"] if year else []) + ([f"cutoff slice {cut}"] if cut else [])
        lines.append(f"knowledge year @ checkpoint {k}: " + "; ".join(parts))
    return "\n".join(lines)


def run_knowledge(run_dir: Path) -> str:
    """:func:`format_knowledge` of a run dir's ``summary.json`` and ``metrics.jsonl`` ("" when either is missing)."""
    summary, metrics = Path(run_dir) / "summary.json", Path(run_dir) / METRICS_FILE
    if not summary.is_file() or not metrics.is_file():
        return ""
    return format_knowledge(json.loads(summary.read_text(encoding="utf-8")), read_metrics(metrics))


def knowledge_table(runs: list[Run]) -> Optional[tuple[list[str], list[list[str]]]]:
    """Per run and checkpoint: the knowledge year from ``year_resolved`` and the cutoff slice of the slice NLL."""
    rows = []
    for run in runs:
        for k, year, cut in knowledge_rows(run.summary, run.rows):
            rows.append([run.label, checkpoint_label(int(k)), year or "-", cut or "-"])
    header = ["run", "checkpoint", "knowledge year (year_resolved) [95% CI]", "cutoff slice (slice NLL) [95% CI]"]
    return (header, rows) if rows else None
