"""The TiC-LM aggregates of a train-step × eval-slice matrix (docs/metrics.md#9-time-sliced-perplexity): backward, in_dist, forward, regret.

``M[i][j]`` is a score of eval slice j on the checkpoint after step i: the held-out NLL of step j's slice
(``P``), or EM of the set introduced at step j (``A`` of §3). Over the matrix:

- ``backward`` = mean of M[i][j] over every cell with j < i (the lower triangle), ``in_dist`` = mean over i of
  M[i][i] (the diagonal), ``forward`` = mean over every cell with j > i (the upper triangle);
- per row i: ``backward_i`` (mean over j < i), ``in_dist_i`` = M[i][i], ``forward_i`` (mean over j > i);
- ``regret_<aggregate>`` = aggregate(run) − aggregate(oracle), both over the cells the two matrices share
  (for NLL, > 0 is worse than the oracle; for EM, < 0 is).

A None (or absent) cell is skipped, never read as 0; an aggregate with no cell is None. Perplexity =
exp(NLL) of an aggregate, reported next to it (:func:`with_perplexity`).

:func:`aggregate_intervals` gives 95 % bootstrap intervals over items: the items of each slice are resampled
(the same draw at every checkpoint, since every checkpoint scores the same items), each cell recomputed as the
ratio of resampled NLL sums to resampled token counts, and the aggregates taken over the recomputed matrix.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional

import numpy as np

from evolve_train.evaluation.metrics.stats import bootstrap_ci_bounds

Matrix = Mapping[int, Mapping[int, Optional[float]]]
AGGREGATES = ("backward", "in_dist", "forward")


def _mean(values: list[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def _cells(M: Matrix, relation) -> list[float]:
    return [v for i, row in M.items() for j, v in row.items() if v is not None and relation(int(i), int(j))]


def backward(M: Matrix) -> Optional[float]:
    """Mean of M[i][j] over the cells with j < i."""
    return _mean(_cells(M, lambda i, j: j < i))


def in_dist(M: Matrix) -> Optional[float]:
    """Mean over i of M[i][i]."""
    return _mean(_cells(M, lambda i, j: j == i))


def forward(M: Matrix) -> Optional[float]:
    """Mean of M[i][j] over the cells with j > i."""
    return _mean(_cells(M, lambda i, j: j > i))


def row_aggregates(M: Matrix, i: int) -> dict[str, Optional[float]]:
    """``backward_i``, ``in_dist_i`` (= M[i][i]) and ``forward_i`` of row i."""
    row = {int(j): v for j, v in M.get(i, {}).items() if v is not None}
    return {
        "backward": _mean([v for j, v in row.items() if j < i]),
        "in_dist": row.get(i),
        "forward": _mean([v for j, v in row.items() if j > i]),
    }


def aggregates(M: Matrix) -> dict[str, Any]:
    """``backward``, ``in_dist``, ``forward`` over the matrix and ``rows`` ``{"<i>": row_aggregates}``."""
    matrix = {int(i): {int(j): v for j, v in row.items()} for i, row in M.items()}
    return {
        "backward": backward(matrix),
        "in_dist": in_dist(matrix),
        "forward": forward(matrix),
        "rows": {str(i): row_aggregates(matrix, i) for i in sorted(matrix)},
    }


def shared_cells(M: Matrix, O: Matrix) -> tuple[dict, dict]:  # noqa: E741  (docs/metrics.md's names)
    """``M`` and ``O`` restricted to the cells both have (non-None)."""
    a = {int(i): {int(j): v for j, v in row.items()} for i, row in M.items()}
    b = {int(i): {int(j): v for j, v in row.items()} for i, row in O.items()}
    keep = {(i, j) for i, row in a.items() for j, v in row.items() if v is not None and b.get(i, {}).get(j) is not None}
    return (
        {i: {j: v for j, v in row.items() if (i, j) in keep} for i, row in a.items()},
        {i: {j: v for j, v in row.items() if (i, j) in keep} for i, row in b.items()},
    )


def regret(M: Matrix, O: Matrix) -> dict[str, Optional[float]]:  # noqa: E741  (docs/metrics.md's names)
    """``regret_<aggregate>`` = aggregate(M) − aggregate(O) over the shared cells (None where either is None)."""
    run, oracle = shared_cells(M, O)
    out = {}
    for name, fn in (("backward", backward), ("in_dist", in_dist), ("forward", forward)):
        a, b = fn(run), fn(oracle)
        out[f"regret_{name}"] = None if a is None or b is None else a - b
    return out


def with_perplexity(values: Mapping[str, Optional[float]]) -> dict[str, Optional[float]]:
    """``values`` (NLL aggregates) and ``<name>_perplexity`` = exp(value) next to each."""
    out: dict[str, Optional[float]] = {}
    for name, value in values.items():
        out[name] = value
        out[f"{name}_perplexity"] = None if value is None else math.exp(value)
    return out


def aggregate_intervals(
    items: Mapping[int, Mapping[int, tuple[np.ndarray, np.ndarray]]], B: int = 1000, seed: int = 0
) -> dict[str, Optional[list[float]]]:
    """95 % bootstrap intervals ``{aggregate: [low, high]}`` over items (see the module docstring).

    ``items[i][j]`` = (per-item NLL sums, per-item loss tokens) of slice j at checkpoint i, the items in the
    same order at every checkpoint."""
    columns = sorted({j for row in items.values() for j in row})
    sizes = {j: next(len(row[j][0]) for row in items.values() if j in row) for j in columns}
    rng = np.random.default_rng(seed)
    draws = {name: [] for name in AGGREGATES}
    for _ in range(B):
        picks = {j: rng.integers(0, sizes[j], size=sizes[j]) for j in columns if sizes[j]}
        M = {}
        for i, row in items.items():
            M[i] = {}
            for j, (sums, tokens) in row.items():
                if j in picks and len(sums) == sizes[j]:
                    total = float(np.asarray(tokens)[picks[j]].sum())
                    M[i][j] = float(np.asarray(sums)[picks[j]].sum()) / total if total else None
        for name, fn in (("backward", backward), ("in_dist", in_dist), ("forward", forward)):
            value = fn(M)
            if value is not None:
                draws[name].append(value)
    return {
        name: (list(bootstrap_ci_bounds(np.sort(values))) if len(values) == B else None)
        for name, values in draws.items()
    }
