"""The report's trade-off figure: held-out perplexity against Updated EM at the final checkpoint, one point per run
(``reporting/plots.py: plot_perplexity_vs_updated``), on synthetic run dirs whose numbers are known."""

from __future__ import annotations

import json
import math

import pytest
from helpers.runs import make_run

from evolve_train.evaluation.rows import load_run
from evolve_train.reporting import plots
from evolve_train.reporting.report import make_plots


def with_heldout(run_dir, perplexities: dict[int, float]):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for checkpoint, ppl in perplexities.items():
        rows.append(
            {
                "group": "heldout",
                "checkpoint": checkpoint,
                "set": "heldout",
                "set_name": "general",
                "set_step": None,
                "n": 100,
                "loss": math.log(ppl),
                "perplexity": ppl,
            }
        )
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def test_points_are_the_final_updated_em_and_perplexity(tmp_path):
    full = with_heldout(make_run(tmp_path / "full", 0, "full", 0.7), {-1: 45.0, 0: 50.0, 2: 210.0})
    mix = with_heldout(make_run(tmp_path / "mix", 0, "mix", 0.4), {-1: 45.0, 2: 80.0})
    runs = [load_run(full), load_run(mix)]
    for run in runs:
        run.label = run.method
    # Updated EM by hand: updated_1 and updated_2 at checkpoint 2 pooled by question (40 each)
    for run in runs:
        rows = [r for r in run.split_rows if r["checkpoint"] == 2 and r["set"] == "updated"]
        assert plots.updated_em(run, 2) == pytest.approx(sum(r["em"] * r["n"] for r in rows) / 80)
    drawn = plots.plot_perplexity_vs_updated(runs, tmp_path / "tradeoff.png")
    assert (tmp_path / "tradeoff.png").stat().st_size > 5000
    points = {label: (xs[0], ys[0]) for label, (xs, ys) in drawn["general"].items() if not label.startswith("_")}
    assert points == {
        "full": (pytest.approx(plots.updated_em(runs[0], 2)), 210.0),
        "mix": (pytest.approx(plots.updated_em(runs[1], 2)), 80.0),
    }
    assert drawn["general"]["_initial model"][1] == [45.0, 45.0]  # the dashed line of the model before training
    figures = make_plots(runs, tmp_path / "report")["figures"]
    assert ("Held-out perplexity against Updated EM (the trade-off per run)", "perplexity_vs_updated.png") in figures


def test_no_heldout_rows_no_figure(tmp_path):
    run = load_run(make_run(tmp_path / "plain", 0))
    assert plots.plot_perplexity_vs_updated([run], tmp_path / "none.png") == {}
    assert not (tmp_path / "none.png").exists()
