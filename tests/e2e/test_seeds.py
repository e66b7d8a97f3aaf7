"""Seeds in the report: runs that differ only by seed are grouped (by their saved Hydra config), shown as
mean ± 95% t-interval across seeds, drawn with a band per configuration, and compared pooled over seeds."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evolve_train.reporting.report import build_report
from helpers import TINY
from helpers.runs import SETS, screenshot
from helpers.processes import ROOT
from helpers.runs import hydra_run, sweep  # noqa: F401  (a fixture)


T_975 = {1: 12.706204736174694, 2: 4.302652729749462}  # Student t quantiles (tables: 12.706, 4.303)


def outcomes(run_dir: Path, column: str) -> dict[str, int]:
    path = run_dir / "predictions" / "step_2" / f"{column}.jsonl"
    return {r["id"]: r["correct"] for r in map(json.loads, path.read_text().splitlines())}


def by_hand(values: list[float]) -> tuple[float, float, float]:
    n = len(values)
    mean = sum(values) / n
    half = T_975[n - 1] * math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) / math.sqrt(n)
    return mean, mean - half, mean + half


def test_report_shows_mean_ci_bands_and_pooled_differences(sweep, tmp_path):
    result = build_report([sweep], tmp_path / "r", B=200, seed=1)
    markdown = (tmp_path / "r" / "report.md").read_text()
    assert "6 run(s) in 2 configuration(s)." in markdown and "Student t-interval" in markdown
    groups = {g.name: g for g in result["groups"]}
    for name, group in groups.items():
        row = re.search(rf"^\| {re.escape(name)} \| 3 \| 2 \| (.*) \|$", markdown, re.M).group(1).split(" | ")
        for column, cell in zip(SETS[2], row):
            mean, low, high = by_hand([run.cell(2, column) for run in group.runs])
            assert cell == f"{mean:.3f} ± {(high - low) / 2:.3f}"
    bands = result["series"]["bands"]["bands"]
    assert set(bands) == set(SETS[2]) and all(sorted(panel) == sorted(groups) for panel in bands.values())
    xs, lows, highs = bands["unchanged"]["method=lora"]
    for k, low, high in zip(xs, lows, highs):
        expected = by_hand([run.cell(int(k), "unchanged") for run in groups["method=lora"].runs])
        assert (low, high) == pytest.approx(expected[1:])
    pooled = {d.column: d for d in result["pooled"]}
    assert list(pooled) == SETS[2] + ["all"]
    per_seed = []
    for full, lora in zip(groups["method=full"].runs, groups["method=lora"].runs):
        a, b = {}, {}
        for column in ("unchanged", "new_1", "updated_1", "new_2", "updated_2"):
            a.update({f"{column}/{k}": v for k, v in outcomes(full.path, column).items()})
            b.update({f"{column}/{k}": v for k, v in outcomes(lora.path, column).items()})
        per_seed.append(sum(a.values()) / len(a) - sum(b.values()) / len(b))
    assert (pooled["all"].diff, pooled["all"].ci_low, pooled["all"].ci_high) == pytest.approx(by_hand(per_seed))
    assert pooled["all"].seeds == [0, 1, 2] and "dof 2" in pooled["all"].how
    assert len(result["diffs"]) == 3 * 8  # the same-seed pairs behind the pooled rows
    assert (tmp_path / "r" / "forgetting_bands.png").stat().st_size > 5000


def test_the_summary_reads_retention_and_acquisition_across_seeds(sweep, tmp_path):
    losses = {}
    for index, metrics in enumerate(sorted(sweep.rglob("metrics.jsonl"))):
        losses[metrics.parent] = 2.0 + index / 10
        row = {
            "group": "heldout",
            "checkpoint": 2,
            "set": "heldout",
            "set_name": "heldout_general",
            "n": 50,
            "loss": losses[metrics.parent],
        }
        metrics.write_text(metrics.read_text() + json.dumps(row) + "\n")
    result = build_report([sweep], tmp_path / "r", B=50, seed=1)
    section = (tmp_path / "r" / "report.md").read_text().split("## Summary across seeds")[1].split("\n## ")[0]
    for group in result["groups"]:
        row = re.search(rf"^\| {re.escape(group.name)} \| 3 \| 2 \| (.*) \|$", section, re.M).group(1).split(" | ")
        figures = {
            "unchanged": [run.cell(2, "unchanged") for run in group.runs],
            "new": [(run.cell(1, "new_1") + run.cell(2, "new_2")) / 2 for run in group.runs],
            "updated": [(run.cell(1, "updated_1") + run.cell(2, "updated_2")) / 2 for run in group.runs],
        }
        for cell, values in zip(row, figures.values()):
            mean, low, high = by_hand(values)
            assert cell == f"{mean:.3f} ± {(high - low) / 2:.3f}"
        mean, low, high = by_hand([losses[run.path] for run in group.runs])
        assert row[5] == f"{mean:.3f} ± {(high - low) / 2:.3f}"
        assert row[4] == "-"  # these synthetic runs have no paired rows: no figure, never a made-up one


def test_single_seed_configurations_report_as_before(tmp_path):
    runs = [hydra_run(tmp_path / "a", "full", 0, 0.7), hydra_run(tmp_path / "b", "lora", 0, 0.4)]
    result = build_report(runs, tmp_path / "r", B=100)
    markdown = (tmp_path / "r" / "report.md").read_text()
    assert result["pooled"] is None and "across seeds" not in markdown and "2 run(s)." in markdown
    assert [r.label for r in result["runs"]] == ["full/seed0", "lora/seed0"]
    assert not (tmp_path / "r" / "forgetting_bands.png").exists()


def test_arms_of_one_method_and_seed_are_labelled_by_their_overrides(tmp_path):
    """Two configurations of one method and seed (here two learning rates) are told apart in every plot and table
    by the override that differs, not by their run dirs' names."""
    runs = [
        hydra_run(tmp_path / "x" / "seed0", "full", 0, 0.7),
        hydra_run(tmp_path / "y" / "seed0", "full", 0, 0.5, lr=0.01),
    ]
    result = build_report(runs, tmp_path / "r", B=100)
    assert sorted(r.label for r in result["runs"]) == ["trainer.lr=0.001/seed0", "trainer.lr=0.01/seed0"]


@pytest.mark.slow
def test_sweep_of_methods_and_seeds_end_to_end(chromium, tmp_path, capsys):  # noqa: F811  (the fixture)
    """`train.py -m method=full,lora seed=0,1,2`, then `evolve-report <sweep dir>`, then the page in Chromium.

    The sweep is the real command (Hydra's multirun, W&B offline); the report is evolve-report's entry point
    (``evolve_train.cli.report:main``) called with the same arguments in this process: its exit code and what
    it prints are checked as before, without a second interpreter start (the report command as a process is
    run by tests/e2e/test_evolve_train_cli.py and the documented commands' tests)."""
    from evolve_train.cli.report import main as report_main

    sweep = tmp_path / "sweep"
    tiny = [o for o in TINY if not o.startswith("logger.backends")]
    command = [
        sys.executable,
        "train.py",
        "-m",
        "method=full,lora",
        "seed=0,1,2",
        *tiny,
        "logger.backends=[disk,wandb]",
        f"hydra.sweep.dir={sweep}",
    ]
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "report"
    capsys.readouterr()
    code = report_main([str(sweep), "--out", str(out), "--bootstrap", "200"])  # evolve-report, in this process
    printed = capsys.readouterr()
    assert code == 0 and "6 run(s)" in printed.out, printed.err[-2000:]
    markdown = (out / "report.md").read_text()
    for method in ("full", "lora"):
        assert re.search(rf"^\| method={method} \| 3 \| 0, 1, 2 \|", markdown, re.M), markdown[:3000]
        cells = re.search(rf"^\| method={method} \| 3 \| 2 \| (.*) \|$", markdown, re.M).group(1).split(" | ")
        assert len(cells) == 7 and all(re.fullmatch(r"\d\.\d{3} ± \d\.\d{3}", c) for c in cells), cells
    assert "| method=full | method=lora | all | 0, 1, 2 |" in markdown
    bands = build_report([sweep], tmp_path / "again", B=50)["series"]["bands"]["bands"]
    assert bands and all(sorted(panel) == ["method=full", "method=lora"] for panel in bands.values())
    html = (out / "report.html").read_text()
    assert html.count("<img") == len(list(out.glob("*.png"))) and "band = 95% CI" in html
    screenshot(chromium, out / "report.html", tmp_path / "shot.png", size=(1200, 2400))
    check_wandb_runs(sweep)


def check_wandb_runs(sweep: Path) -> None:
    """One W&B group (the sweep dir) for the six runs, each named by its job's overrides."""
    from helpers.runs import parse_offline_run

    folders = sorted(sweep.rglob("offline-run-*"))
    assert len(folders) == 6
    names = set()
    for folder in folders:
        run = parse_offline_run(folder)["run"]
        assert run.run_group == str(sweep)
        names.add(run.display_name)
        assert re.search(r"method=(full|lora)", run.display_name) and re.search(r"seed=\d", run.display_name)
    assert len(names) == 6
