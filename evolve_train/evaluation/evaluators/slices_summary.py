"""The ``timesliced`` part of ``summary.json`` and of the end-of-run table (docs/metrics.md#9-time-sliced-perplexity).

From the ``slices`` rows: the matrix ``P`` (``{"<i>": {"<j>": nll}}``, trained checkpoints), ``P_init`` (the
model before training, when evaluated), the aggregates ``backward`` / ``in_dist`` / ``forward`` with their
perplexities and per-row values, and 95 % bootstrap intervals over the slices' examples (from
``predictions/step_<i>/slices.jsonl``); ``cutoff``: each checkpoint's knowledge-cutoff slice against the last
checkpoint (``cutoff.timesliced_rows``, docs/metrics.md#14-knowledge-cutoff), paired over the examples when
their losses are there. The same aggregates on EM of every split matrix ``A`` (§3,
``matrix_summary``). With ``eval.oracle_run``: ``regret`` per aggregate, for NLL and for each EM matrix, over
the cells the run and the oracle share.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Optional

import numpy as np

from evolve_train.evaluation.evaluators.matrix import INITIAL, matrix_summary
from evolve_train.evaluation.evaluators.slices import GROUP, PREDICTIONS
from evolve_train.evaluation.metrics.continual import as_int_matrix
from evolve_train.evaluation.metrics.cutoff import timesliced_rows
from evolve_train.evaluation.metrics.timesliced import aggregate_intervals, aggregates, regret, with_perplexity
from evolve_train.evaluation.rows import METRICS_FILE, checkpoint_label, read_metrics

log = logging.getLogger(__name__)
BOOTSTRAP = 1000
"""Resamples of the aggregates' intervals."""


def slice_matrix(rows: list[dict]) -> dict[int, dict[int, Optional[float]]]:
    """``{checkpoint: {slice step: nll}}`` of the ``slices`` rows (later rows win; checkpoint -1 included)."""
    P: dict[int, dict[int, Optional[float]]] = {}
    for r in rows:
        if r.get("group") == GROUP and r.get("set_step") is not None:
            P.setdefault(int(r["checkpoint"]), {})[int(r["set_step"])] = r.get("nll")
    return P


def slice_items(run_dir: Path, checkpoints: list[int]) -> Optional[dict]:
    """``{i: {j: (nll sums, tokens)}}`` from ``predictions/step_<i>/slices.jsonl``; None when one is missing."""
    items: dict[int, dict[int, tuple[list, list]]] = {}
    for i in checkpoints:
        path = Path(run_dir) / "predictions" / f"step_{i}" / f"{PREDICTIONS}.jsonl"
        if not path.is_file():
            return None
        row: dict[int, tuple[list, list]] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            sums, tokens = row.setdefault(int(record["slice"]), ([], []))
            sums.append(record["nll_sum"])
            tokens.append(record["tokens"])
        items[i] = {j: (np.asarray(s, dtype=float), np.asarray(t, dtype=float)) for j, (s, t) in row.items()}
    return items


def _string_keys(M: dict) -> dict:
    return {str(i): {str(j): v for j, v in row.items()} for i, row in sorted(M.items())}


def em_matrices(rows: list[dict]) -> dict[str, dict[int, dict[int, Optional[float]]]]:
    """``{kind: A}`` of the trained checkpoints (docs/metrics.md#3-continual-learning-matrix)."""
    return {
        kind: {i: row for i, row in as_int_matrix(entry["A"]).items() if i != INITIAL}
        for kind, entry in matrix_summary(rows)["matrices"].items()
    }


def timesliced_summary(
    rows: list[dict], run_dir: Optional[Path] = None, oracle_run: Optional[str] = None
) -> dict[str, Any]:
    """The ``timesliced`` key of ``summary.json`` (see the module docstring); ``{}`` without slice rows."""
    P_all = slice_matrix(rows)
    P = {i: row for i, row in P_all.items() if i != INITIAL}
    out: dict[str, Any] = {}
    if P:
        nll = aggregates(P)
        out["nll"] = {
            "P": _string_keys(P),
            "P_init": _string_keys({0: P_all[INITIAL]})["0"] if INITIAL in P_all else None,
            **with_perplexity({k: nll[k] for k in ("backward", "in_dist", "forward")}),
            "rows": nll["rows"],
            "ci": None,
        }
        items = slice_items(run_dir, sorted(P)) if run_dir is not None else None
        if items:
            out["nll"]["ci"] = aggregate_intervals(items, B=BOOTSTRAP)
        out["nll"]["cutoff"] = timesliced_rows(P, B=BOOTSTRAP, items=items)
    em = {kind: aggregates(A) for kind, A in em_matrices(rows).items() if A}
    if em:
        out["em"] = em
    if oracle_run and out:
        out["regret"] = oracle_regret(rows, Path(oracle_run))
    return out


def oracle_regret(rows: list[dict], oracle_dir: Path) -> Optional[dict[str, Any]]:
    """``{"oracle_run", "nll": regret, "em": {kind: regret}}`` against the oracle run's ``metrics.jsonl``."""
    path = oracle_dir / METRICS_FILE
    if not path.is_file():
        log.warning("eval.oracle_run: %s has no %s; no regret", oracle_dir, METRICS_FILE)
        return None
    oracle_rows = read_metrics(path)
    run_P = {i: r for i, r in slice_matrix(rows).items() if i != INITIAL}
    oracle_P = {i: r for i, r in slice_matrix(oracle_rows).items() if i != INITIAL}
    oracle_A = em_matrices(oracle_rows)
    return {
        "oracle_run": str(oracle_dir),
        "nll": regret(run_P, oracle_P) if run_P and oracle_P else None,
        "em": {kind: regret(A, oracle_A[kind]) for kind, A in em_matrices(rows).items() if kind in oracle_A},
    }


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def format_timesliced(summary: dict[str, Any]) -> str:
    """P (rows: checkpoints, columns: slices) and the NLL / EM aggregates, for the end-of-run table."""
    entry = (summary.get("timesliced") or {}).get("nll")
    if not entry:
        return ""
    columns = sorted({int(j) for row in entry["P"].values() for j in row})
    lines = [
        "Held-out NLL of each step's slice P[i][j] (nats; rows: checkpoint i, columns: slice j)",
        "ckpt".ljust(8) + "".join(f"j={j}".rjust(8) for j in columns),
    ]
    if entry.get("P_init"):
        lines.append(
            checkpoint_label(INITIAL).ljust(8) + "".join(_fmt(entry["P_init"].get(str(j))).rjust(8) for j in columns)
        )
    for i in sorted(entry["P"], key=int):
        lines.append(i.ljust(8) + "".join(_fmt(entry["P"][i].get(str(j))).rjust(8) for j in columns))
    ci = entry.get("ci") or {}
    cells = []
    for name in ("backward", "in_dist", "forward"):
        interval = ci.get(name)
        cells.append(
            f"{name}={_fmt(entry.get(name))}"
            + (f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "")
            + f" (ppl {_fmt(entry.get(name + '_perplexity'))})"
        )
    lines.append("slice NLL: " + "  ".join(cells))
    learned = (summary["timesliced"].get("em") or {}).get("learned")
    if learned:
        lines.append(
            "learned EM: " + "  ".join(f"{k}={_fmt(learned.get(k))}" for k in ("backward", "in_dist", "forward"))
        )
    regret_entry = summary["timesliced"].get("regret")
    if regret_entry and regret_entry.get("nll"):
        lines.append("regret vs oracle (NLL): " + "  ".join(f"{k}={_fmt(v)}" for k, v in regret_entry["nll"].items()))
    return "\n".join(lines)
