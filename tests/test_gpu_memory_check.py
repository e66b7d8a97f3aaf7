"""scripts/gpu_check.sh's memory part in its CPU dry mode: one PASS/FAIL line per figure, the chunked loss passes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ("chunked_loss", "peak_vs_preflight", "peak_chunked_vs_unchunked", "throughput_vs_plain")


@pytest.mark.slow
def test_the_dry_memory_part_prints_one_judged_line_per_figure(tmp_path):
    env = {**os.environ, "DRY": "1", "PARTS": "memory", "OUT": str(tmp_path)}
    done = subprocess.run(
        ["bash", "scripts/gpu_check.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    status = (tmp_path / "status.txt").read_text()
    assert "memory rc=0" in status, status + (tmp_path / "memory.log").read_text()[-3000:]
    for name in FIGURES:
        lines = [line for line in status.splitlines() if line.split(" ")[1:2] == [name]]
        assert len(lines) == 1 and lines[0].split(" ")[0] in ("PASS", "FAIL"), status
    assert f"PASS {FIGURES[0]} = " in status  # the loss is the one figure tiny CPU shapes decide
    figures = json.loads((tmp_path / "memory_check.json").read_text())
    assert figures["mfu_project"] > 0 and figures["peak_vs_preflight"] > 0
