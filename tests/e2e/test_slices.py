"""Held-out time slices, the ``slices`` evaluator and the TiC-LM aggregates (docs/metrics.md#9-time-sliced-perplexity)."""

from __future__ import annotations

import json
import math

import pytest

from evolve_train.evaluation.evaluators.slices_summary import format_timesliced, oracle_regret, timesliced_summary
from evolve_train.evaluation.metrics.timesliced import (
    backward,
)
from helpers import tiny_cfg


def test_slices_rows_summary_and_regret(tmp_path):
    from evolve_train.run import train

    run_dir = tmp_path / "run"
    summary = train(tiny_cfg(run_dir, "eval.evaluators=[splits,matrix,slices]", "eval.eval_initial=true"))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    slice_rows = [r for r in rows if r.get("group") == "slices"]
    assert sorted({(r["checkpoint"], r["set_step"]) for r in slice_rows}) == [
        (i, j) for i in (-1, 0, 1, 2) for j in (0, 1, 2)
    ]
    for r in slice_rows:
        assert r["tokens"] > 0 and r["perplexity"] == pytest.approx(math.exp(r["nll"]))
    nll = summary["timesliced"]["nll"]
    P = {int(i): {int(j): v for j, v in row.items()} for i, row in nll["P"].items()}
    assert nll["backward"] == pytest.approx(backward(P)) and set(nll["P_init"]) == {"0", "1", "2"}
    assert nll["ci"]["in_dist"][0] <= nll["in_dist"] <= nll["ci"]["in_dist"][1]
    assert "learned" in summary["timesliced"]["em"]
    assert "Held-out NLL" in format_timesliced(summary)
    # against itself as the oracle: zero regret
    same = oracle_regret(rows, run_dir)
    assert all(v == pytest.approx(0.0) for v in same["nll"].values())
    assert timesliced_summary(rows, run_dir, str(tmp_path / "missing"))["regret"] is None
