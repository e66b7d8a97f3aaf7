"""The paired comparison of two finished runs, question by question (docs/metrics.md#8-statistics-and-hygiene): the one used by
``evolve-gate`` and ``evolve-report``, so both give the same difference and CI for the same two runs.

:func:`paired_diffs` reads both runs' per-item 0/1 outcomes (``predictions/step_<k>/<set>.jsonl``) at the
compared checkpoints (the final ones unless given) and returns, for each eval set both runs evaluated
(n > 0) in report order, then for ``all`` (the items of Unchanged + New + Updated pooled; Outdated, where
lower is better, is reported on its own but not pooled), a :class:`PairedDiff`:

* ``diff``, ``ci_low``, ``ci_high``: ``paired_bootstrap_diff(a, b, B, seed)`` of the 0/1 EM outcomes,
  diff = EM(a) − EM(b) with its 95% interval;
* ``kappa``: ``cohen_kappa`` between the two runs' per-question outcomes (agreement beyond chance on which
  questions are answered right; 1.0 when both runs agree trivially);
* ``em_a``, ``em_b``, ``n``, ``B``.

Two runs whose item ids differ for a set are not comparable: :class:`~evolve_train.evaluation.rows.ReportError`
names the set, both runs and an example id. :func:`compare_runs` (the gate) also refuses runs whose sets
differ; the report compares the sets both runs hold and says so (:func:`check_same_columns`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from itertools import combinations
from pathlib import Path
from typing import Optional, Union

from evolve_train.evaluation.metrics.stats import cohen_kappa, paired_bootstrap_diff
from evolve_train.evaluation.rows import ALL, POOLED_KINDS, ReportError, Run, column_key, load_run


@dataclass(frozen=True)
class PairedDiff:
    """EM(a) − EM(b) on one eval set (or ``all``) at the runs' compared checkpoints."""

    run_a: str
    run_b: str
    column: str
    checkpoint_a: int
    checkpoint_b: int
    em_a: float
    em_b: float
    diff: float
    ci_low: float
    ci_high: float
    kappa: Optional[float]
    n: int
    B: int

    @property
    def significant(self) -> bool:
        """The 95% interval excludes 0."""
        return self.ci_low > 0 or self.ci_high < 0

    def stats(self) -> dict:
        """``{diff, ci_low, ci_high, kappa, em_a, em_b, n, B}`` (the gate's per-set entry)."""
        fields = asdict(self)
        return {key: fields[key] for key in ("diff", "ci_low", "ci_high", "kappa", "em_a", "em_b", "n", "B")}


def _run(run: Union[Run, str, Path]) -> Run:
    return run if isinstance(run, Run) else load_run(run)


def evaluated_columns(run: Run, checkpoint: int) -> list[str]:
    """Eval sets evaluated with n > 0 (EM not null) at ``checkpoint``, in report order."""
    return [c for c in run.columns if run.cell(checkpoint, c) is not None]


def same_question_outcomes(a: Run, ka: int, b: Run, kb: int, column: str) -> tuple[dict, dict]:
    """Per-item 0/1 outcomes of ``column`` in both runs; a clear error when the question sets differ."""
    first, second = a.outcomes(ka, column), b.outcomes(kb, column)
    if set(first) != set(second):
        only_a, only_b = sorted(set(first) - set(second)), sorted(set(second) - set(first))
        example = "; ".join(
            [f"'{only_a[0]}' only in {a.path}"] * bool(only_a) + [f"'{only_b[0]}' only in {b.path}"] * bool(only_b)
        )
        raise ReportError(
            f"runs are not comparable: split '{column}' has different question sets in "
            f"{a.path} ({len(first)} items) and {b.path} ({len(second)} items); e.g. {example}"
        )
    return first, second


def _diff(a: Run, ka: int, b: Run, kb: int, column: str, outcomes: tuple[dict, dict], B: int, seed: int) -> PairedDiff:
    first, second = outcomes
    keys = sorted(first)
    boot = paired_bootstrap_diff(first, second, B=B, seed=seed)
    return PairedDiff(
        run_a=a.label or str(a.path),
        run_b=b.label or str(b.path),
        column=column,
        checkpoint_a=ka,
        checkpoint_b=kb,
        em_a=sum(first.values()) / len(first),
        em_b=sum(second.values()) / len(second),
        diff=boot["diff"],
        ci_low=boot["ci_low"],
        ci_high=boot["ci_high"],
        kappa=cohen_kappa([first[k] for k in keys], [second[k] for k in keys]),
        n=boot["n"],
        B=B,
    )


def paired_diffs(
    run_a: Union[Run, str, Path],
    run_b: Union[Run, str, Path],
    *,
    B: int = 2000,
    seed: int = 0,
    checkpoint_a: Optional[int] = None,
    checkpoint_b: Optional[int] = None,
) -> list[PairedDiff]:
    """Run a vs run b on every eval set both evaluated, then ``all`` (see the module docstring)."""
    a, b = _run(run_a), _run(run_b)
    ka = a.final_checkpoint if checkpoint_a is None else checkpoint_a
    kb = b.final_checkpoint if checkpoint_b is None else checkpoint_b
    shared = set(evaluated_columns(b, kb))
    results, pooled_a, pooled_b = [], {}, {}
    for column in [c for c in evaluated_columns(a, ka) if c in shared]:
        first, second = same_question_outcomes(a, ka, b, kb, column)
        results.append(_diff(a, ka, b, kb, column, (first, second), B, seed))
        if a.kind(column) in POOLED_KINDS:
            pooled_a.update({f"{column}/{k}": v for k, v in first.items()})
            pooled_b.update({f"{column}/{k}": v for k, v in second.items()})
    if pooled_a:
        results.append(_diff(a, ka, b, kb, ALL, (pooled_a, pooled_b), B, seed))
    return results


def check_same_sets(a: Run, ka: int, b: Run, kb: int) -> None:
    """ReportError unless both runs evaluated the same eval sets at the compared checkpoints."""
    columns_a, columns_b = evaluated_columns(a, ka), evaluated_columns(b, kb)
    if columns_a != columns_b:
        only_a = sorted(set(columns_a) - set(columns_b), key=column_key)
        only_b = sorted(set(columns_b) - set(columns_a), key=column_key)
        raise ReportError(
            f"runs are not comparable: different question sets: splits {only_a} only in {a.path} "
            f"(checkpoint {ka}), {only_b} only in {b.path} (checkpoint {kb})"
        )
    if not columns_a:
        raise ReportError(f"no split sets to compare at checkpoint {ka} of {a.path}")


def compare_runs(
    run_a: Union[Run, str, Path],
    run_b: Union[Run, str, Path],
    *,
    B: int = 2000,
    seed: int = 0,
    checkpoint_a: Optional[int] = None,
    checkpoint_b: Optional[int] = None,
) -> dict[str, dict]:
    """``{set: {diff, ci_low, ci_high, kappa, em_a, em_b, n, B}}`` of run a vs run b (:func:`paired_diffs`),
    refusing runs whose eval sets differ (ReportError)."""
    a, b = _run(run_a), _run(run_b)
    ka = a.final_checkpoint if checkpoint_a is None else checkpoint_a
    kb = b.final_checkpoint if checkpoint_b is None else checkpoint_b
    check_same_sets(a, ka, b, kb)
    return {d.column: d.stats() for d in paired_diffs(a, b, B=B, seed=seed, checkpoint_a=ka, checkpoint_b=kb)}


def compare_pairs(runs: list[Run], B: int = 2000, seed: int = 0) -> list[PairedDiff]:
    """:func:`paired_diffs` of every pair of runs (in the order given: the earlier run is ``a``)."""
    return [d for a, b in combinations(runs, 2) for d in paired_diffs(a, b, B=B, seed=seed)]


def check_same_columns(runs: list[Run]) -> Optional[str]:
    """A note when runs evaluate different eval sets (compared on the shared ones only), else None."""
    sets = {tuple(r.columns) for r in runs}
    if len(sets) <= 1:
        return None
    shared = set.intersection(*(set(r.columns) for r in runs))
    return "runs evaluate different eval sets; comparisons use the shared ones: " + ", ".join(
        sorted(shared, key=column_key)
    )


__all__ = [
    "ALL",
    "PairedDiff",
    "check_same_columns",
    "check_same_sets",
    "compare_pairs",
    "compare_runs",
    "evaluated_columns",
    "paired_diffs",
    "same_question_outcomes",
]
