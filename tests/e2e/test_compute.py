"""Compute figures (docs/metrics.md#11-compute), the within-step probe and the report's time-slice parts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import TINY, forked, tiny_cfg, train_tiny


def test_a_run_records_compute_within_step_rows_and_reports_them(tmp_path):
    from evolve_train.reporting.report import build_report
    from evolve_train.run import train as train_run

    run_dir = tmp_path / "run"
    summary = train_run(
        tiny_cfg(
            run_dir, "eval.evaluators=[splits,matrix,slices]", "eval.within_step_every=5", "eval.within_step_items=8"
        )
    )
    compute = summary["compute"]
    n_params = None
    for i in ("0", "1", "2"):
        step = compute["steps"][i]
        assert step["train_tokens"] > step["loss_tokens"] > 0 and step["optimizer_steps"] > 0
        n = step["train_flops"] / (6 * step["train_tokens"])
        assert n_params is None or n == pytest.approx(n_params)  # one N for every step: 6·N·T
        n_params = n
        assert compute["eval"][i]["eval_tokens"] > 0
    assert compute["steps"]["2"]["cumulative_train_flops"] == pytest.approx(
        sum(compute["steps"][i]["train_flops"] for i in ("0", "1", "2"))
    )
    log = [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    probes = [r for r in log if r.get("group") == "within_step"]
    for k in range(3):
        steps = [r["optimizer_step"] for r in probes if r["time_step"] == k]
        last = max(r["optimizer_step"] for r in log if r["time_step"] == k and "loss" in r)
        assert steps == list(range(0, last + 1, 5))
    assert all(set(r["em"]) >= {"unchanged"} and all(n <= 8 for n in r["n"].values()) for r in probes)
    report = build_report([run_dir], tmp_path / "report", B=50)
    names = {Path(f).name for f in report["figures"]}
    assert {"within_step.png", "retention_vs_flops.png"} <= names and any(n.startswith("slices_") for n in names)
    markdown = report["markdown"].read_text()
    assert "Time-sliced aggregates" in markdown and "Compute" in markdown
    drawn = report["series"]["within_step"]
    label = next(iter(drawn))
    assert len(drawn[label]["unchanged"][0]) == len(probes)


PROBED = ["eval.evaluators=[splits]", "eval.within_step_every=3", "eval.within_step_items=8"]


def _train(run_dir: Path, *extra: str, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    env.pop("EVOLVE_TRAIN_FAULT", None)
    if fault:
        env["EVOLVE_TRAIN_FAULT"] = fault
    command = [
        sys.executable,
        "train.py",
        *TINY,
        *PROBED,
        *extra,
        f"hydra.run.dir={run_dir}",
    ]
    return forked.python(command, env=env, timeout=600, merged=True)


def _probe_rows(run_dir: Path) -> list[dict]:
    return [
        r
        for r in map(json.loads, (run_dir / "train_log.jsonl").read_text().splitlines())
        if r.get("group") == "within_step"
    ]


@pytest.mark.slow
def test_within_step_rows_survive_a_kill_and_resume_exactly(tmp_path):
    """Killed inside time step 1 (between two saved states), rerun with the same command: the probe rows equal
    the uninterrupted run's, with no duplicate and none missing."""
    reference = train_tiny(tmp_path / "reference", *PROBED)  # in-process on _train's config: only its rows compared
    expected = _probe_rows(reference)
    killed = tmp_path / "killed"
    first = _train(killed, "trainer.save_every_n_steps=4", fault="optimizer_step:30")
    assert first.returncode != 0 and (killed / "train_log.jsonl").is_file(), first.stdout[-3000:]
    partial = _probe_rows(killed)
    assert 0 < len(partial) < len(expected)
    assert _train(killed, "trainer.save_every_n_steps=4").returncode == 0
    assert _probe_rows(killed) == expected
