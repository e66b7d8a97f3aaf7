"""The continual-learning matrix: average accuracy, forgetting, BWT, FWT and FUAR (docs/metrics.md#3-continual-learning-matrix).

`A[i][j]` is the score on the eval set introduced at step j, evaluated on the checkpoint after step i.
A None (or absent) entry is an n = 0 set: it is skipped, never treated as 0. A result with nothing to
average is None.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

Matrix = Mapping[int, Mapping[int, Optional[float]]]


def _entry(A: Matrix, i: int, j: int) -> Optional[float]:
    return A.get(i, {}).get(j)


def _mean(values: list[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def as_int_matrix(A: Mapping[Any, Mapping[Any, Optional[float]]]) -> dict[int, dict[int, Optional[float]]]:
    """The matrix with int keys (JSON turns them into strings)."""
    return {int(i): {int(j): value for j, value in row.items()} for i, row in A.items()}


def avg_acc(A: Matrix, i: int) -> Optional[float]:
    """docs/metrics.md#3-continual-learning-matrix: avg_acc_i = mean over j ≤ i of A[i][j]."""
    return _mean([v for j, v in A.get(i, {}).items() if j <= i and v is not None])


def forgetting(A: Matrix, i: int, j: int) -> Optional[float]:
    """docs/metrics.md#3-continual-learning-matrix: forgetting[i][j] = A[j][j] − A[i][j] for i > j (relative to right after learning j)."""
    if i <= j:
        return None
    learned, now = _entry(A, j, j), _entry(A, i, j)
    return None if learned is None or now is None else learned - now


def forgetting_max(A: Matrix, i: int, j: int) -> Optional[float]:
    """docs/metrics.md#3-continual-learning-matrix: forgetting_max[i][j] = max over l in [j, i−1] of A[l][j] − A[i][j] (Chaudhry et al.)."""
    now = _entry(A, i, j)
    if i <= j or now is None:
        return None
    earlier = [v for m in range(j, i) if (v := _entry(A, m, j)) is not None]
    return max(earlier) - now if earlier else None


def bwt(A: Matrix, i: int) -> Optional[float]:
    """docs/metrics.md#3-continual-learning-matrix: bwt_i (i ≥ 1) = mean over j < i of (A[i][j] − A[j][j])."""
    if i < 1:
        return None
    return _mean([A[i][j] - A[j][j] for j in range(i) if _entry(A, i, j) is not None and _entry(A, j, j) is not None])


def fwt(A: Matrix, i: int, A_init: Optional[Mapping[int, Optional[float]]] = None) -> Optional[float]:
    """docs/metrics.md#3-continual-learning-matrix: fwt_i (i ≥ 1) = A[i−1][i] − A_init[i]."""
    if i < 1 or A_init is None:
        return None
    before, init = _entry(A, i - 1, i), A_init.get(i)
    return None if before is None or init is None else before - init


def fuar(
    unchanged_prev: Optional[float],
    unchanged_cur: Optional[float],
    updated_prev: Optional[float],
    updated_cur: Optional[float],
    new_prev: Optional[float],
    new_cur: Optional[float],
) -> Optional[float]:
    """docs/metrics.md#3-continual-learning-matrix (CKL): forgotten / gained between checkpoints i−1 and i; lower is better.

    forgotten = max(0, Unchanged(i−1) − Unchanged(i)); gained = max(0, Updated_i(i) − Updated_i(i−1)) +
    max(0, New_i(i) − New_i(i−1)). None when gained = 0 or Unchanged is missing; a split with a None
    score contributes no gain.
    """
    if unchanged_prev is None or unchanged_cur is None:
        return None
    forgotten = max(0.0, unchanged_prev - unchanged_cur)
    gained = 0.0
    for prev, cur in ((updated_prev, updated_cur), (new_prev, new_cur)):
        if prev is not None and cur is not None:
            gained += max(0.0, cur - prev)
    return forgotten / gained if gained > 0 else None


def continual_summary(
    A: Mapping[Any, Mapping[Any, Optional[float]]], A_init: Optional[Mapping[Any, Optional[float]]] = None
) -> dict[str, Any]:
    """docs/metrics.md#3-continual-learning-matrix for every checkpoint i of the matrix, JSON-able (string keys).

    {"<i>": {"avg_acc", "bwt", "fwt", "forgetting": {"<j>": v}, "forgetting_max": {"<j>": v}}}
    with forgetting entries for every j < i (None where undefined).
    """
    matrix = as_int_matrix(A)
    init = {int(j): v for j, v in A_init.items()} if A_init is not None else None
    summary: dict[str, Any] = {}
    for i in sorted(matrix):
        summary[str(i)] = {
            "avg_acc": avg_acc(matrix, i),
            "bwt": bwt(matrix, i),
            "fwt": fwt(matrix, i, init),
            "forgetting": {str(j): forgetting(matrix, i, j) for j in range(i)},
            "forgetting_max": {str(j): forgetting_max(matrix, i, j) for j in range(i)},
        }
    return summary
