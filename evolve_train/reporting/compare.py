"""Paired comparisons of runs: EM difference with its paired-bootstrap 95% CI per split (METRICS.md §8).

For each pair of runs (a, b) and each eval set both evaluated at their final checkpoints, the per-item
0/1 outcomes come from ``predictions/step_<k>/<set>.jsonl`` and go to ``paired_bootstrap_diff(a, b)``:
diff = EM(a) − EM(b). Two runs whose question ids differ for a set are not comparable: ReportError names
the set and both runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Optional

from evolve_train.evaluation.metrics.stats import paired_bootstrap_diff
from evolve_train.reporting.runs import ReportError, Run
from evolve_train.reporting.summary import _column_key


@dataclass
class PairedDiff:
    """EM(a) − EM(b) on one eval set at the runs' final checkpoints."""

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
    n: int
    B: int

    @property
    def significant(self) -> bool:
        """The 95% interval excludes 0."""
        return self.ci_low > 0 or self.ci_high < 0


def same_question_outcomes(a: Run, ka: int, b: Run, kb: int, column: str) -> tuple[dict, dict]:
    """Per-item 0/1 outcomes of ``column`` in both runs; a clear error when the question sets differ."""
    first, second = a.outcomes(ka, column), b.outcomes(kb, column)
    if set(first) != set(second):
        only_a, only_b = sorted(set(first) - set(second)), sorted(set(second) - set(first))
        example = "; ".join([f"'{only_a[0]}' only in {a.path}"] * bool(only_a)
                            + [f"'{only_b[0]}' only in {b.path}"] * bool(only_b))
        raise ReportError(f"runs are not comparable: split '{column}' has different question sets in "
                          f"{a.path} ({len(first)} items) and {b.path} ({len(second)} items); e.g. {example}")
    return first, second


def compare_pair(a: Run, b: Run, B: int = 2000, seed: int = 0) -> list[PairedDiff]:
    """Every eval set both runs hold at their final checkpoints (in report order)."""
    ka, kb = a.final_checkpoint, b.final_checkpoint
    shared = [c for c in a.columns if c in set(b.columns) and a.cell(ka, c) is not None
              and b.cell(kb, c) is not None]
    results = []
    for column in sorted(shared, key=_column_key):
        first, second = same_question_outcomes(a, ka, b, kb, column)
        stats = paired_bootstrap_diff(first, second, B=B, seed=seed)
        results.append(PairedDiff(run_a=a.label, run_b=b.label, column=column, checkpoint_a=ka, checkpoint_b=kb,
                                  em_a=sum(first.values()) / len(first), em_b=sum(second.values()) / len(second),
                                  diff=stats["diff"], ci_low=stats["ci_low"], ci_high=stats["ci_high"],
                                  n=stats["n"], B=stats["B"]))
    return results


def compare_runs(runs: list[Run], B: int = 2000, seed: int = 0) -> list[PairedDiff]:
    """All pairs (in the order given: the earlier run is ``a``)."""
    return [d for a, b in combinations(runs, 2) for d in compare_pair(a, b, B=B, seed=seed)]


def check_same_columns(runs: list[Run]) -> Optional[str]:
    """A note when runs evaluate different eval sets (compared on the shared ones only), else None."""
    sets = {tuple(r.columns) for r in runs}
    if len(sets) <= 1:
        return None
    shared = set.intersection(*(set(r.columns) for r in runs))
    return ("runs evaluate different eval sets; comparisons use the shared ones: "
            + ", ".join(sorted(shared, key=_column_key)))
