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
import yaml

from evolve_train.reporting.report import build_report
from evolve_train.reporting.seeds import group_runs, t_interval
from evolve_train.reporting.runs import load_runs
from evolve_train.tracking.wandb_logger import run_identity
from helpers import TINY, tiny_cfg
from helpers.runs import SETS, make_run, screenshot
from helpers.processes import ROOT

T_975 = {1: 12.706204736174694, 2: 4.302652729749462}  # Student t quantiles (tables: 12.706, 4.303)


def hydra_run(run_dir: Path, method: str, seed: int, skill: float, lr: float = 0.001, threads: int = 0) -> Path:
    """A synthetic finished run with the ``.hydra/`` files a Hydra job saves."""
    make_run(run_dir, seed, method, skill)
    (run_dir / ".hydra").mkdir()
    config = {
        "method": {"name": method},
        "trainer": {"lr": lr, "num_threads": threads},
        "seed": seed,
        "run_dir": None,
        "logger": {"backends": ["disk"]},
        "data": {"world": {"n_entities": 12}},
    }
    (run_dir / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    overrides = [f"method={method}", f"seed={seed}", "data.world.n_entities=12", f"trainer.num_threads={threads}"]
    overrides += [f"trainer.lr={lr}"] if lr != 0.001 else []
    (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    return run_dir


@pytest.fixture
def sweep(tmp_path) -> Path:
    """full and lora, seeds 0, 1, 2 each, in dirs whose names say nothing (runs are found by content)."""
    root = tmp_path / "sweep"
    for index, (method, seed, skill) in enumerate(
        [(m, s, k) for m, k in (("full", 0.7), ("lora", 0.45)) for s in (0, 1, 2)]
    ):
        hydra_run(root / f"job{index}" / "out", method, seed, skill, threads=seed)  # threads: not a result key
    return root


def outcomes(run_dir: Path, column: str) -> dict[str, int]:
    path = run_dir / "predictions" / "step_2" / f"{column}.jsonl"
    return {r["id"]: r["correct"] for r in map(json.loads, path.read_text().splitlines())}


def by_hand(values: list[float]) -> tuple[float, float, float]:
    n = len(values)
    mean = sum(values) / n
    half = T_975[n - 1] * math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) / math.sqrt(n)
    return mean, mean - half, mean + half


def test_t_interval_by_hand():
    stats = t_interval([0.5, 0.7, 0.6])
    assert stats.n == 3 and stats.mean == pytest.approx(0.6)
    assert (stats.low, stats.high) == pytest.approx(
        (0.6 - 4.302652729749462 * 0.1 / math.sqrt(3), 0.6 + 4.302652729749462 * 0.1 / math.sqrt(3))
    )
    assert stats.text() == f"0.600 ± {4.302652729749462 * 0.1 / math.sqrt(3):.3f}"
    assert t_interval([0.4, None]).text() == "0.400" and t_interval([]).text() == "-"


def test_runs_differing_only_by_seed_form_one_named_group(sweep, tmp_path):
    hydra_run(sweep / "other" / "x", "lora", 0, 0.5, lr=0.01)  # another learning rate: its own configuration
    groups = group_runs(load_runs([sweep]))
    assert [(g.name, g.seeds) for g in groups] == [
        ("method=full", [0, 1, 2]),
        ("method=lora", [0, 1, 2]),
        ("method=lora,trainer.lr=0.01", [0]),
    ]
    plain = make_run(tmp_path / "plain", 0, "full", 0.5)  # no .hydra/: a group of its own, labelled as before
    groups = group_runs(load_runs([sweep, plain]))
    assert groups[-1].config is None and groups[-1].name == groups[-1].runs[0].label


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


def test_wandb_group_per_sweep_and_names_with_the_overrides(tmp_path):
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_object(tiny_cfg(tmp_path, "method=lora", "seed=2"))
    assert run_identity(cfg) == ("default", "default/lora/seed2")
    assert run_identity(cfg, ("runs/default/multirun", "method=lora,seed=2")) == (
        "runs/default/multirun",
        "default/method=lora,seed=2",
    )
    cfg.logger.wandb.group = "mine"
    assert run_identity(cfg, ("runs/default/multirun", ""))[0] == "mine"


@pytest.mark.slow
def test_sweep_of_methods_and_seeds_end_to_end(chromium, tmp_path):  # noqa: F811  (the fixture)
    """`train.py -m method=full,lora seed=0,1,2`, then `evolve-report <sweep dir>`, then the page in Chromium."""
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
    done = subprocess.run(
        [sys.executable, "-m", "evolve_train.cli.report", str(sweep), "--out", str(out), "--bootstrap", "200"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "6 run(s)" in done.stdout, done.stderr[-2000:]
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
