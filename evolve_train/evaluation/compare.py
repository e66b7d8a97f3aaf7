"""Compare two finished runs question by question (METRICS.md §8): paired bootstrap and Cohen's kappa.

``compare_runs(run_a, run_b)`` reads both runs' per-item predictions at their final checkpoints
(``predictions/step_<k>/<set>.jsonl``, through the report loader ``reporting.runs``) and returns, per
EvolvingQA split set and for ``all`` (Unchanged + New + Updated pooled; Outdated, where lower is better, is
reported on its own but not pooled):

* ``diff``, ``ci_low``, ``ci_high``: ``paired_bootstrap_diff(a, b)`` of the 0/1 EM outcomes, diff =
  EM(a) − EM(b) with its 95% interval;
* ``kappa``: ``cohen_kappa`` between the two runs' per-question outcomes (agreement beyond chance on which
  questions are answered right; 1.0 when both runs agree trivially);
* ``em_a``, ``em_b``, ``n``.

Runs whose question sets differ (a split only one run evaluated, or different item ids in a split) are not
comparable: :class:`~evolve_train.reporting.runs.ReportError` names the split, the runs and an example id.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

from evolve_train.data.timeline import SET_KINDS
from evolve_train.evaluation.metrics.stats import cohen_kappa, paired_bootstrap_diff
from evolve_train.reporting.compare import same_question_outcomes
from evolve_train.reporting.runs import ReportError, Run, load_run
from evolve_train.reporting.summary import _column_key

ALL = "all"
POOLED_KINDS = ("unchanged", "new", "updated")


def _kind(column: str) -> str:
    return column.rsplit("_", 1)[0] if column.rsplit("_", 1)[-1].isdigit() else column


def _run(run: Union[Run, str, Path]) -> Run:
    return run if isinstance(run, Run) else load_run(run)


def _stats(a: dict[str, int], b: dict[str, int], B: int, seed: int) -> dict:
    keys = sorted(a)
    boot = paired_bootstrap_diff(a, b, B=B, seed=seed)
    return {"diff": boot["diff"], "ci_low": boot["ci_low"], "ci_high": boot["ci_high"],
            "kappa": cohen_kappa([a[k] for k in keys], [b[k] for k in keys]),
            "em_a": sum(a.values()) / len(a), "em_b": sum(b.values()) / len(b), "n": len(a), "B": B}


def split_columns(run: Run, checkpoint: int) -> list[str]:
    """EvolvingQA split sets evaluated (n > 0) at ``checkpoint``, in report order."""
    return sorted((c for c in run.columns if _kind(c) in SET_KINDS and run.cell(checkpoint, c) is not None),
                  key=_column_key)


def compare_runs(run_a: Union[Run, str, Path], run_b: Union[Run, str, Path], *, B: int = 2000, seed: int = 0,
                 checkpoint_a: Optional[int] = None, checkpoint_b: Optional[int] = None) -> dict[str, dict]:
    """``{split: {diff, ci_low, ci_high, kappa, em_a, em_b, n, B}}`` of run a vs run b (see the module
    docstring); the runs' final checkpoints unless given. ReportError when the question sets differ."""
    a, b = _run(run_a), _run(run_b)
    ka = a.final_checkpoint if checkpoint_a is None else checkpoint_a
    kb = b.final_checkpoint if checkpoint_b is None else checkpoint_b
    columns_a, columns_b = split_columns(a, ka), split_columns(b, kb)
    if columns_a != columns_b:
        only_a = sorted(set(columns_a) - set(columns_b), key=_column_key)
        only_b = sorted(set(columns_b) - set(columns_a), key=_column_key)
        raise ReportError(f"runs are not comparable: different question sets: splits {only_a} only in {a.path} "
                          f"(checkpoint {ka}), {only_b} only in {b.path} (checkpoint {kb})")
    if not columns_a:
        raise ReportError(f"no split sets to compare at checkpoint {ka} of {a.path}")
    result, pooled_a, pooled_b = {}, {}, {}
    for column in columns_a:
        first, second = same_question_outcomes(a, ka, b, kb, column)
        result[column] = _stats(first, second, B, seed)
        if _kind(column) in POOLED_KINDS:
            pooled_a.update({f"{column}/{k}": v for k, v in first.items()})
            pooled_b.update({f"{column}/{k}": v for k, v in second.items()})
    if pooled_a:
        result[ALL] = _stats(pooled_a, pooled_b, B, seed)
    return result


__all__ = ["compare_runs", "split_columns", "ALL"]
