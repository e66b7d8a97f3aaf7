"""scripts/resume_check.py (gpu_check.sh's kill-and-resume figures) on run dirs written here: equal runs pass,
a changed loss or metric beyond the bounds fails, and the peak is judged against the preflight's estimate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.runs import ROOT, resume_check


def write_run(path: Path, losses: list[float], em: float, resumed: bool = True, peak_gb: float | None = None) -> Path:
    path.mkdir(parents=True)
    train = [{"time_step": 0 if k < 2 else 1, "optimizer_step": k + 1, "loss": v} for k, v in enumerate(losses)]
    if peak_gb is not None:
        train[-1]["peak_mem_gb"] = peak_gb
    (path / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
    rows = [{"group": "splits", "checkpoint": 1, "set_name": "unchanged", "set_step": None, "em": em, "n": 64}]
    rows[0]["eval_seconds"] = 3.0 if resumed else 9.0  # wall clock: never compared
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    log = "memory preflight, per device: 2.00 GiB (parameters 1.00, ...) of 80.0 GiB\n"
    if resumed:
        log += f"resuming time step 1 from the training state {path / 'train_state/step1-opt2'}\n"
    (path / "train.log").write_text(log)
    return path


def test_equal_runs_pass_exactly(tmp_path, capsys):
    ref = write_run(tmp_path / "ref", [3.0, 2.5, 2.0], 0.5, resumed=False)
    res = write_run(tmp_path / "res", [3.0, 2.5, 2.0], 0.5)
    assert resume_check.main([str(ref), str(res), "--out", str(tmp_path / "c.json")]) == 0
    out = capsys.readouterr().out
    assert "PASS resumed from" in out and "PASS resume_losses = 0 " in out and "PASS resume_metrics = 0 " in out
    assert "INFO peak_vs_preflight" in out
    assert json.loads((tmp_path / "c.json").read_text())["loss_max_rel_diff"] == 0.0


@pytest.mark.parametrize(
    "losses, em, flags, failing",
    [
        ([3.0, 2.5, 2.1], 0.5, [], "resume_losses"),
        ([3.0, 2.5, 2.01], 0.5, ["--loss-rtol", "1e-3"], "resume_losses"),
        ([3.0, 2.5, 2.0], 0.6, ["--metric-atol", "0.05"], "resume_metrics"),
        ([3.0, 2.5], 0.5, [], "resume_losses"),  # a step missing
    ],
)
def test_a_difference_beyond_the_bounds_fails(tmp_path, capsys, losses, em, flags, failing):
    ref = write_run(tmp_path / "ref", [3.0, 2.5, 2.0], 0.5, resumed=False)
    res = write_run(tmp_path / "res", losses, em)
    assert resume_check.main([str(ref), str(res), *flags]) == 1
    assert f"FAIL {failing} " in capsys.readouterr().out


def test_within_the_bounds_passes_and_the_peak_is_judged(tmp_path):
    ref = write_run(tmp_path / "ref", [3.0, 2.5, 2.0], 0.5, resumed=False, peak_gb=2.0 * 2**30 / 1e9 * 1.1)
    res = write_run(tmp_path / "res", [3.0, 2.5, 2.01], 0.52)
    flags = ["--loss-rtol", "1e-2", "--metric-atol", "0.05"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "resume_check.py"), str(ref), str(res), *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout
    assert "PASS peak_vs_preflight = 1.10 " in done.stdout
    not_resumed = write_run(tmp_path / "plain", [3.0, 2.5, 2.0], 0.5, resumed=False)
    assert resume_check.main([str(ref), str(not_resumed)]) == 1


def test_only_wall_clock_values_are_left_out_of_the_comparison(tmp_path):
    ref = write_run(tmp_path / "ref", [3.0, 2.5, 2.0], 0.5, resumed=False)
    res = write_run(tmp_path / "res", [3.0, 2.5, 2.0], 0.5)
    row = {"group": "ablation", "checkpoint": 1, "set_name": "all", "set_step": None, "timestamp_reliance": 0.1}
    for run, value, seconds in ((ref, 0.1, 3.0), (res, 0.2, 9.0)):
        with (run / "metrics.jsonl").open("a") as out:
            out.write(json.dumps({**row, "timestamp_reliance": value, "eval_seconds": seconds}) + "\n")
    assert resume_check.main([str(ref), str(res)]) == 1  # a metric named after time is still a metric


def load_lines(path: Path, device: str, host_gib: float, weights_gib: float = 2.3) -> None:
    """Append the lines a run logs when it loads its checkpoint (``run.py``'s ``_initial_model``)."""
    with (path / "train.log").open("a") as log:
        log.write("[2026-12-07 03:00:00][evolve_train.run][INFO] - model: 1235.81M parameters from steps/0\n")
        log.write(
            f"[2026-12-07 03:00:01][evolve_train.run][INFO] - weights: {weights_gib:.2f} GiB in bfloat16 on {device}; "
            f"host memory of this process {host_gib:+.2f} GiB while loading\n"
        )


@pytest.mark.parametrize(
    "device, host, verdict",
    [("cuda:0", 0.12, "PASS"), ("cuda:0", 2.4, "FAIL"), ("cpu", 2.4, "INFO"), (None, 0.0, "INFO")],
)
def test_the_host_memory_of_a_checkpoint_load_is_judged_on_a_gpu_only(tmp_path, device, host, verdict):
    res = write_run(tmp_path / "res", [3.0], 0.5)
    if device is not None:
        load_lines(res, device, host)
    line, ratio = resume_check.check_host_load(res, 0.25)
    assert line.startswith(f"{verdict} host_load_vs_weights"), line
    assert (ratio is None) == (device is None)
    if device is not None:
        assert ratio == pytest.approx(host / 2.3)
