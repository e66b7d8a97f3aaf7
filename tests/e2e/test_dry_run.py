"""``python train.py --dry-run [-m]``: every point of a sweep composed and estimated (run dir, the overrides that
differ, world size, tokens per optimizer step, memory per device, wall time) in seconds, without training,
launching or writing anything: the working directory stays empty (no run dir, no Hydra output dir)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRAIN = str(ROOT / "train.py")


def dry(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, TRAIN, "--dry-run", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def field(out: str, name: str) -> list[str]:
    return re.findall(rf"^  {name}: (.*)$", out, re.M)


def test_a_four_point_sweep_is_planned_in_seconds_writing_nothing(tmp_path):
    start = time.perf_counter()
    result = dry(tmp_path, "-m", "method=full,lora", "trainer.lr=1e-3,2e-3")
    seconds = time.perf_counter() - start
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert seconds < 60
    assert out.startswith("dry run: 4 point(s); nothing is trained, launched or written")
    assert "differs between points: method, trainer.lr" in out
    assert re.findall(r"^\[\d/4\] (.*)$", out, re.M) == [
        "method=full trainer.lr=0.001",
        "method=full trainer.lr=0.002",
        "method=lora trainer.lr=0.001",
        "method=lora trainer.lr=0.002",
    ]
    dirs = field(out, "run dir")
    assert len(set(dirs)) == 4 and all(d.startswith("runs/default/multirun/") for d in dirs)
    assert field(out, "world size") == ["1 (one process)"] * 4
    assert all(tokens.startswith("4096 ") for tokens in field(out, "tokens per optimizer step"))
    assert all(
        re.match(r"\d+\.\d\d GiB \(parameters", m) for m in field(out, "memory per device \\(preflight estimate\\)")
    )
    walls = field(out, "wall time")
    assert len(walls) == 4 and all(re.match(r"~\d+:\d\d:\d\d of training", w) for w in walls)
    assert list(tmp_path.iterdir()) == []  # no run dir, no multirun dir, no .hydra, no log file


def test_one_run_and_a_launcher_sweep(tmp_path):
    single = dry(tmp_path, "method=lora", "seed=3")
    assert single.returncode == 0, single.stderr
    assert single.stdout.startswith("dry run: 1 point(s)")
    assert field(single.stdout, "run dir") == ["runs/default/lora/seed3"]  # the dir the run itself would use
    launched = dry(tmp_path, "-m", "hydra/launcher=submitit_local_multi", "seed=0,1")
    assert launched.returncode == 0, launched.stderr
    worlds = field(launched.stdout, "world size")
    assert worlds == ["2 (hydra/launcher=submitit_local_multi: 2 tasks x 1 node(s))"] * 2  # planned, not submitted
    assert all("x 2 process(es)" in t for t in field(launched.stdout, "tokens per optimizer step"))
    assert list(tmp_path.iterdir()) == []


def test_a_bad_override_is_one_line(tmp_path):
    result = dry(tmp_path, "-m", "trainer.lrr=1e-3,2e-3")
    assert result.returncode == 2
    assert "trainer.lrr" in result.stderr and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []
