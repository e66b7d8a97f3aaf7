"""`evolve-report` shows every metric the default evaluators computed, per set with n (and the interval where the
rows have one); metric plots draw metrics only; provenance in summary.json, state.json and the report header."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from evolve_train.evaluation.metrics.directions import gate_operator, higher_is_better, is_metric, mark
from evolve_train.evaluation.metrics.stats import release_gate
from evolve_train.reporting import plots
from evolve_train.reporting.report import build_report
from evolve_train.run import train
from evolve_train.tracking.disk import read_jsonl
from helpers import tiny_cfg
from helpers.processes import ROOT

REPO = ROOT


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A tiny run with the default evaluators and the initial model evaluated."""
    path = tmp_path_factory.mktemp("every_metric") / "run"
    train(tiny_cfg(path, "eval.eval_initial=true"))
    return path


@pytest.fixture(scope="module")
def report(run_dir, tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("every_metric_report") / "report"
    result = build_report([run_dir], out, B=50)
    return result, (out / "report.md").read_text(encoding="utf-8")


def _final_rows(run_dir: Path, group: str) -> list[dict]:
    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r["group"] == group]
    final = max(r["checkpoint"] for r in rows)
    return [r for r in rows if r["checkpoint"] == final]


def _section(markdown: str, title: str) -> str:
    start = markdown.index(f"## {title}")
    end = markdown.find("\n## ", start + 1)
    return markdown[start : end if end > 0 else None]


@pytest.mark.parametrize(
    "group, title, key, shown",
    [
        ("paraphrase_gap", "Metrics: paraphrase_gap", "paraphrase_gap", "paraphrase_gap ↓"),
        ("flip_rate", "Metrics: flip rate (flip_rate)", "flip_rate", "flip_rate ↓"),
        ("heldout", "Metrics: held-out perplexity (heldout)", "perplexity", "perplexity ↓"),
    ],
)
def test_report_shows_each_sets_metric_with_its_n(run_dir, report, group, title, key, shown):
    _, markdown = report
    section = _section(markdown, title)
    rows = _final_rows(run_dir, group)
    assert rows
    for row in rows:
        value = row[key]
        text = f"{value:.4g}" if abs(value) >= 1000 else f"{value:.3f}"
        line = re.compile(
            rf"^\| full/seed0 \| {re.escape(row['set_name'])} \| {shown} \| {row['n']} \| .*\| {text}( \[[^]]*\])? \|$"
        )
        assert any(line.match(x) for x in section.splitlines()), (row["set_name"], section[:600])


def test_report_quotes_the_initial_models_value_and_the_interval(run_dir, report):
    _, markdown = report
    initial = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r["group"] == "heldout" and r["checkpoint"] == -1]
    assert initial  # one row per held-out text
    section = _section(markdown, "Metrics: held-out perplexity (heldout)")
    for row in initial:
        value = row["perplexity"]
        text = f"{value:.4g}" if abs(value) >= 1000 else f"{value:.3f}"
        assert f"| {text} |" in section, (row["set_name"], text)  # the initial column
    paired = [r for r in _final_rows(run_dir, "paired") if r.get("update_adoption_ci")]
    for r in paired:  # update adoption: n is the pairs, the cell carries the 95 % interval
        low, high = r["update_adoption_ci"]
        assert f"| {r['set_name']} | update_adoption ↑ | {r['n_pairs']} |" in markdown
        assert f"[{low:.3f}, {high:.3f}]" in markdown


def test_metric_plots_draw_metrics_only(report):
    result, _ = report
    for group in ("paired", "heldout"):
        panels = result["series"][group]
        assert panels
        assert not {"eval_seconds", "n_pairs", "n"} & set(panels), sorted(panels)
        assert all(is_metric(name) for name in panels)
    assert set(result["series"]["heldout"]) == {"loss", "perplexity"}


def test_perplexity_is_on_a_log_axis_with_the_initial_models_line(run_dir, tmp_path, monkeypatch):
    from evolve_train.evaluation.rows import load_run

    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig))
    run = load_run(run_dir)
    run.label = "run"
    run.rows = [r for r in run.rows if r["group"] != "heldout" or r["set_name"] == "heldout_general"]  # one text
    drawn = plots.plot_group_metrics([run], "heldout", tmp_path / "heldout.png")
    (fig,) = figures
    axes = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    assert axes["perplexity ↓"].get_yscale() == "log" and axes["loss ↓"].get_yscale() == "linear"
    initial = next(
        r["perplexity"]
        for r in read_jsonl(run_dir / "metrics.jsonl")
        if r["group"] == "heldout" and r["checkpoint"] < 0 and r["set_name"] == "heldout_general"
    )
    assert drawn["perplexity"][plots.INITIAL][1] == [initial, initial]


def test_loss_plot_marks_where_each_time_step_begins(run_dir, report):
    result, _ = report
    log = [r for r in read_jsonl(run_dir / "train_log.jsonl") if "loss" in r]
    steps = {}
    for r in log:
        steps[r["time_step"]] = max(steps.get(r["time_step"], 0), r["optimizer_step"])
    drawn = result["series"]["loss"]["loss"]
    for ts in sorted(steps)[1:]:
        x = sum(v for k, v in steps.items() if k < ts)
        assert drawn[f"_time step {ts}"][0] == [x, x]


def test_provenance_in_summary_state_and_report_header(run_dir, report):
    result, markdown = report
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    for name in ("summary.json", "state.json"):
        record = json.loads((run_dir / name).read_text())["provenance"]
        assert set(record) >= {"commit", "dirty", "versions", "python", "cpu", "gpu", "gpu_count", "num_processes"}
        assert record["versions"]["torch"] and record["versions"]["transformers"] and record["num_processes"] == 1
        assert record["command"] and record["created"]
        if commit.returncode == 0:
            assert record["commit"] == commit.stdout.strip() and isinstance(record["dirty"], bool)
    header = markdown.split("\n## ", 1)[0]
    assert re.search(r"Generated \d{4}-\d\d-\d\d \d\d:\d\d UTC with ", header) and "torch " in header
    runs = _section(markdown, "Runs and provenance")
    relative = f"../../{run_dir.parent.name}/run"  # <tmp>/<report dir>/report -> <tmp>/<run's dir>/run
    assert str(run_dir) not in markdown and f"| {relative} |" in runs


def test_one_direction_table_serves_report_gate_and_plots():
    assert higher_is_better("em") is True and higher_is_better("em", "outdated") is False
    assert higher_is_better("by_kind/case/contamination_gap") is False  # the former name reads as the current
    assert mark("perplexity") == " ↓" and mark("update_adoption") == " ↑" and mark("mean_grad_norm") == ""
    assert gate_operator("flip_rate") == "<=" and gate_operator("em") == ">="
    checks = {c["name"]: c["op"] for c in release_gate({"flip_rate": 0.0, "paraphrase_gap": 0.0})["checks"]}
    assert checks["flip_rate"] == checks["paraphrase_gap"] == "<="
    assert not any(is_metric(k) for k in ("eval_seconds", "n_pairs", "n", "mc_n", "update_adoption_ci", "k"))
