"""``matrix``: the continual-learning matrix and its metrics (docs/metrics.md#3-continual-learning-matrix), from the split rows.

``A[i][j]`` = EM on the eval set introduced at step j, on the checkpoint after step i; Unchanged (learned
at step 0, ``set_step`` null) is column 0. One matrix per split kind (``unchanged``, ``new``, ``updated``,
``outdated`` — for Outdated lower is better) and ``learned``: column 0 = Unchanged, column j ≥ 1 = New_j and
Updated_j together (item-weighted), i.e. what step j taught. ``A_init`` = the rows of checkpoint -1
(``eval.eval_initial``); without them ``fwt`` is null. ``fuar_i`` compares checkpoints i−1 and i and needs
Updated_i / New_i on checkpoint i−1, i.e. ``eval.forward_transfer=true``; otherwise it is null.

The evaluator reads earlier checkpoints' split rows from ``<run_dir>/metrics.jsonl`` and this checkpoint's
from the rows of the evaluators before it (``splits`` must run first, or it is run here without writing its
rows twice); it writes one row per matrix with the checkpoint's entries and metrics. ``summary.json`` gets
the whole matrices (``reporting/summary.py`` calls :func:`matrix_summary`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional

from evolve_train.data.timeline import SET_KINDS
from evolve_train.evaluation.context import EvalContext
from evolve_train.evaluation.evaluators.splits import splits_evaluator
from evolve_train.evaluation.metrics.continual import continual_summary, fuar
from evolve_train.evaluation.registry import register_evaluator
from evolve_train.evaluation.rows import checkpoint_label, read_metrics

LEARNED = "learned"
INITIAL = -1
Matrix = dict[int, dict[int, Optional[float]]]


def _cells(rows: Iterable[dict]) -> dict[tuple[str, int, int], tuple[Optional[float], int]]:
    """(kind, checkpoint, column) -> (em, n) of the split rows (later rows win)."""
    cells = {}
    for r in rows:
        if r.get("group") == "splits" and r.get("set") in SET_KINDS:
            column = 0 if r.get("set_step") is None else int(r["set_step"])
            cells[(r["set"], int(r["checkpoint"]), column)] = (r.get("em"), int(r.get("n") or 0))
    return cells


def matrices(rows: Iterable[dict]) -> dict[str, Matrix]:
    """``{kind: A}`` with ``A[i][j]`` (checkpoint -1 included when present) for each kind and ``learned``."""
    cells = _cells(rows)
    result: dict[str, Matrix] = {}
    for (kind, i, j), (em, _) in sorted(cells.items()):
        result.setdefault(kind, {}).setdefault(i, {})[j] = em
    learned: Matrix = {}
    for (kind, i, j), (em, n) in cells.items():
        if kind == "unchanged" or (kind in ("new", "updated") and j >= 1):
            learned.setdefault(i, {}).setdefault(j, [])
            learned[i][j].append((em, n))
    result[LEARNED] = {
        i: {j: _weighted(parts) for j, parts in sorted(row.items())} for i, row in sorted(learned.items())
    }
    return {kind: result[kind] for kind in (*SET_KINDS, LEARNED) if kind in result}


def _weighted(parts: list[tuple[Optional[float], int]]) -> Optional[float]:
    scored = [(em, n) for em, n in parts if em is not None and n > 0]
    total = sum(n for _, n in scored)
    return sum(em * n for em, n in scored) / total if total else None


def fuar_by_checkpoint(A: dict[str, Matrix]) -> dict[int, Optional[float]]:
    """§3 fuar_i for every checkpoint i ≥ 1 of the matrices."""
    unchanged, updated, new = (A.get(kind, {}) for kind in ("unchanged", "updated", "new"))
    checkpoints = sorted(i for i in unchanged if i >= 1)

    def at(M: Matrix, i: int, j: int) -> Optional[float]:
        return M.get(i, {}).get(j)

    return {
        i: fuar(
            at(unchanged, i - 1, 0),
            at(unchanged, i, 0),
            at(updated, i - 1, i),
            at(updated, i, i),
            at(new, i - 1, i),
            at(new, i, i),
        )
        for i in checkpoints
    }


def matrix_summary(rows: list[dict]) -> dict[str, Any]:
    """Everything §3 reports, JSON-able: per matrix ``A`` (string keys), ``A_init`` and the metrics per
    checkpoint (avg_acc, bwt, fwt, forgetting, forgetting_max); ``fuar`` per checkpoint."""
    A = matrices(rows)
    out: dict[str, Any] = {"matrices": {}, "fuar": {str(i): v for i, v in fuar_by_checkpoint(A).items()}}
    for kind, M in A.items():
        trained = {i: row for i, row in M.items() if i != INITIAL}
        initial = M.get(INITIAL)
        out["matrices"][kind] = {
            "A": {str(i): {str(j): v for j, v in row.items()} for i, row in trained.items()},
            "A_init": None if initial is None else {str(j): v for j, v in initial.items()},
            "metrics": continual_summary(trained, initial),
        }
    return out


def _previous_rows(ctx: EvalContext) -> list[dict]:
    if ctx.run_dir is None:
        return []
    return [r for r in read_metrics(Path(ctx.run_dir) / "metrics.jsonl") if r.get("checkpoint", 0) < ctx.checkpoint]


@register_evaluator("matrix")
def matrix_evaluator(ctx: EvalContext) -> list[dict]:
    """One row (group ``matrix``) per matrix: this checkpoint's entries and §3 metrics."""
    current = [r for r in ctx.rows if r.get("group") == "splits"] or splits_evaluator(ctx)
    summary = matrix_summary(_previous_rows(ctx) + current)
    i = str(ctx.checkpoint)
    rows = []
    for kind, entry in summary["matrices"].items():
        metrics = entry["metrics"].get(i, {})
        rows.append(
            {
                "group": "matrix",
                "checkpoint": ctx.checkpoint,
                "set": kind,
                "set_name": kind,
                "set_step": None,
                "A_row": entry["A"].get(i, entry["A_init"] if ctx.checkpoint < 0 else None),
                **metrics,
                "fuar": summary["fuar"].get(i),
            }
        )
    return rows


def format_matrix(summary: dict[str, Any], kind: str = LEARNED) -> str:
    """The ``kind`` matrix (rows: checkpoints, columns: the step that introduced the set) and its metrics."""
    entry = summary.get("matrices", {}).get(kind)
    if not entry or not entry["A"]:
        return ""
    columns = sorted({int(j) for row in entry["A"].values() for j in row} | {int(j) for j in (entry["A_init"] or {})})
    head = (
        "ckpt".ljust(8)
        + "".join(f"j={j}".rjust(8) for j in columns)
        + "".join(name.rjust(9) for name in ("avg_acc", "bwt", "fwt", "fuar"))
    )

    def cell(value) -> str:
        return "-" if value is None else f"{value:.3f}"

    # fwt_i compares checkpoint i-1 with the model before any training: without its rows (a model trained from
    # scratch, eval.eval_initial=false, or a checkpoint series) the column stays '-', and the title says why
    why_no_fwt = "" if entry["A_init"] else "; fwt: - without an evaluated initial model"
    lines = [f"Continual-learning matrix '{kind}' (EM; rows: checkpoint i, columns: set of step j{why_no_fwt})", head]
    if entry["A_init"]:
        lines.append(
            checkpoint_label(INITIAL).ljust(8) + "".join(cell(entry["A_init"].get(str(j))).rjust(8) for j in columns)
        )
    for i in sorted(entry["A"], key=int):
        metrics = entry["metrics"].get(i, {})
        lines.append(
            i.ljust(8)
            + "".join(cell(entry["A"][i].get(str(j))).rjust(8) for j in columns)
            + "".join(
                cell(v).rjust(9)
                for v in (metrics.get("avg_acc"), metrics.get("bwt"), metrics.get("fwt"), summary["fuar"].get(i))
            )
        )
    return "\n".join(lines)
