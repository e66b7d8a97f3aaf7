"""`evolve-report` / `write_report`: plots, Markdown/HTML, paired-bootstrap CIs and the errors.

Two kinds of runs: real tiny runs (end to end; their EM is mostly 0) and synthetic run dirs written in the
same layout with non-trivial EM, so plotted points and CIs are checked on numbers that can differ.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest

from evolve_train.cli.report import main
from evolve_train.evaluation.metrics.stats import paired_bootstrap_diff
from evolve_train.reporting.report import build_report, write_report
from evolve_train.run import train
from evolve_train.tracking.disk import read_jsonl
from helpers import tiny_cfg
from helpers.runs import SETS, make_run, screenshot


@pytest.fixture
def synth(tmp_path) -> list[Path]:
    sweep = tmp_path / "synth" / "multirun"
    return [make_run(sweep / "full" / "seed0", 0, "full", 0.7), make_run(sweep / "lora" / "seed0", 0, "lora", 0.4)]


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("report_runs")
    dirs = [root / f"seed{seed}" for seed in (0, 1)]
    for seed, run_dir in enumerate(dirs):
        train(tiny_cfg(run_dir, f"seed={seed}"))
    return dirs


def test_cli_on_two_tiny_runs_writes_plots_and_reports(tiny_runs, tmp_path, capsys):
    out = tmp_path / "report"
    assert main([str(tiny_runs[0].parent), "--out", str(out), "--bootstrap", "200"]) == 0  # the parent expands
    assert "2 run(s)" in capsys.readouterr().out
    pngs = sorted(p.name for p in out.glob("*.png"))
    groups = {r["group"] for r in read_jsonl(tiny_runs[0] / "metrics.jsonl")}
    assert pngs == sorted(
        ["forgetting_curves.png", "matrix_full_seed0.png", "matrix_full_seed1.png", "training_loss.png"]
        + ["paired_metrics.png"] * ("paired" in groups)
        + ["heldout_metrics.png", "perplexity_vs_updated.png"] * ("heldout" in groups)
        + ["slices_full_seed0.png", "slices_full_seed1.png"] * ("slices" in groups)
        + ["retention_vs_flops.png"]
    )
    assert all((out / p).stat().st_size > 5000 for p in pngs)
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(pngs) == html.count("<img")
    assert all(src.startswith("data:") for src in re.findall(r"src=['\"]([^'\"]*)", html))  # self-contained
    markdown = (out / "report.md").read_text()
    for name in pngs:
        assert f"]({name})" in markdown
    assert "full/seed0" in markdown and "full/seed1" in markdown and "Paired differences" in markdown
    final = {
        r["set_name"]: r["em"]
        for r in read_jsonl(tiny_runs[1] / "metrics.jsonl")
        if r["checkpoint"] == 2 and r["group"] == "splits"
    }
    assert f"| full/seed1 | 2 | {final['unchanged']:.3f} |" in markdown


def test_temporal_table_quotes_each_runs_final_values_with_their_intervals(tiny_runs, tmp_path):
    build_report(tiny_runs, tmp_path / "r", B=200)
    markdown = (tmp_path / "r" / "report.md").read_text()
    assert "## Temporal metrics" in markdown
    for run_dir, label in zip(tiny_runs, ("full/seed0", "full/seed1")):
        final = {
            r["group"]: r
            for r in read_jsonl(run_dir / "metrics.jsonl")
            if r["checkpoint"] == 2 and r.get("set_name") == "all" and r["group"] in ("paired", "ablation")
        }
        cells = []
        for group, name in (
            ("paired", "update_adoption"),
            ("paired", "confusion_index"),
            ("ablation", "timestamp_reliance"),
        ):
            value, (low, high) = final[group][name], final[group][f"{name}_ci"]
            assert low <= value <= high
            cells.append(f"{value:.3f} [{low:.3f}, {high:.3f}]")
        assert (
            f"| {label} | 2 | {final['paired']['n_pairs']} | {final['ablation']['n']} | " + " | ".join(cells) + " |"
        ) in markdown


def test_tiny_runs_plotted_points_and_cis_match_files(tiny_runs, tmp_path):
    result = build_report(tiny_runs, tmp_path / "r", B=300, seed=3)
    for run_dir, label in zip(tiny_runs, ("full/seed0", "full/seed1")):
        for row in [r for r in read_jsonl(run_dir / "metrics.jsonl") if r["group"] == "splits"]:
            xs, ys = result["series"]["forgetting"][row["set_name"]][label]
            assert ys[xs.index(row["checkpoint"])] == row["em"]
    assert len(result["diffs"]) == 8  # 7 eval sets, then `all` (Unchanged + New + Updated pooled)
    pooled = ({}, {})
    for diff in result["diffs"][:-1]:
        a, b = (
            {
                json.loads(line)["id"]: json.loads(line)["correct"]
                for line in (d / "predictions" / "step_2" / f"{diff.column}.jsonl").read_text().splitlines()
            }
            for d in tiny_runs
        )
        direct = paired_bootstrap_diff(a, b, B=300, seed=3)
        assert (diff.diff, diff.ci_low, diff.ci_high, diff.n) == (
            direct["diff"],
            direct["ci_low"],
            direct["ci_high"],
            direct["n"],
        )
        if not diff.column.startswith("outdated"):
            for into, outcomes in zip(pooled, (a, b)):
                into.update({f"{diff.column}/{k}": v for k, v in outcomes.items()})
    direct = paired_bootstrap_diff(*pooled, B=300, seed=3)
    assert result["diffs"][-1].column == "all"
    assert (result["diffs"][-1].diff, result["diffs"][-1].ci_low, result["diffs"][-1].n) == (
        direct["diff"],
        direct["ci_low"],
        direct["n"],
    )


def test_plotted_series_equal_metrics(synth, tmp_path):
    result = build_report([synth[0].parent.parent], tmp_path / "r", B=100)  # the sweep dir expands
    labels = {run.label: run.path for run in result["runs"]}
    assert set(labels) == {"full/seed0", "lora/seed0"}
    for label, run_dir in labels.items():
        rows = read_jsonl(run_dir / "metrics.jsonl")
        for column in SETS[2]:
            expected = sorted(
                (r["checkpoint"], r["em"]) for r in rows if r.get("set_name") == column and r["group"] == "splits"
            )
            xs, ys = result["series"]["forgetting"][column][label]
            assert list(zip(xs, ys)) == [(float(k), v) for k, v in expected]
        matrix = result["series"][f"matrix/{label}"]
        assert matrix.shape == (3, 7)
        assert matrix[2][6] == next(r["em"] for r in rows if r["checkpoint"] == 2 and r["set_name"] == "outdated_2")
        assert math.isnan(matrix[0][1])  # new_1 is not evaluated at checkpoint 0
        paired = [r for r in rows if r["group"] == "paired"]
        xs, ys = result["series"]["paired"]["update_adoption"][label]
        assert xs == [1.0, 2.0] and ys == [r["update_adoption"] for r in paired]
    assert (tmp_path / "r" / "paired_metrics.png").exists()


def test_report_cis_equal_direct_bootstrap(synth, tmp_path):
    result = build_report(synth, tmp_path / "r", B=500, seed=7)
    markdown = (tmp_path / "r" / "report.md").read_text()
    assert [d.column for d in result["diffs"]] == SETS[2] + ["all"]
    for diff in result["diffs"][:-1]:
        a, b = (
            {r["id"]: r["correct"] for r in read_jsonl(d / "predictions" / "step_2" / f"{diff.column}.jsonl")}
            for d in synth
        )
        direct = paired_bootstrap_diff(a, b, B=500, seed=7)
        assert (diff.diff, diff.ci_low, diff.ci_high, diff.n) == (
            direct["diff"],
            direct["ci_low"],
            direct["ci_high"],
            direct["n"],
        )
        assert f"[{direct['ci_low']:+.3f}, {direct['ci_high']:+.3f}]" in markdown
    assert any(d.diff != 0 for d in result["diffs"]) and any(d.significant for d in result["diffs"])


def test_missing_predictions_error_and_no_ci(synth, tmp_path, capsys):
    shutil.rmtree(synth[1] / "predictions")
    assert main([str(synth[0]), str(synth[1]), "--out", str(tmp_path / "o")]) == 2
    assert "save_predictions" in capsys.readouterr().err
    html = write_report(synth, tmp_path / "o", ci=False)
    assert html.name == "report.html" and "Paired differences" not in html.read_text()


@pytest.mark.slow
def test_html_report_renders_in_headless_chromium(chromium, synth, tmp_path):
    html = write_report(synth, tmp_path / "report", B=200)
    screenshot(chromium, html, tmp_path / "shot.png")
