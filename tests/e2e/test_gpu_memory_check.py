"""scripts/gpu_check.sh in its CPU dry mode: the memory part (one PASS/FAIL line per figure, the chunked loss
passes) and the fsdp part (FSDP2 over 2 gloo processes, a killed run resumed to the uninterrupted rows)."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
from helpers.processes import ROOT

FIGURES = (
    "chunked_loss",
    "peak_vs_preflight",
    "peak_chunked_vs_unchunked",
    "throughput_vs_plain",
    "eval_bf16_copy_vs_autocast",
)


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
    assert figures["eval_bf16_copy_vs_autocast"] > 0


@pytest.mark.slow
def test_the_dry_fsdp_part_kills_a_run_and_resumes_it_to_the_uninterrupted_rows(tmp_path):
    """The fsdp part on CPU: FSDP2 over 2 gloo processes on the Llama shape's 128,256 vocabulary (1 block, width
    64), full and LoRA (FSDP_METHODS; the GPU default runs full only), then full killed in time step 1 and resumed:
    exact on CPU (fp32, the same computation). The runs' weights are deleted once the figures are read."""
    env = {**os.environ, "DRY": "1", "PARTS": "fsdp", "FSDP_METHODS": "full lora", "OUT": str(tmp_path)}
    done = subprocess.run(
        ["bash", "scripts/gpu_check.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    status = (tmp_path / "status.txt").read_text()
    for name in ("fsdp_full", "fsdp_lora", "fsdp_resumed"):
        assert f"{name} rc=0" in status, status + (tmp_path / f"{name}.log").read_text()[-3000:]
    assert "fsdp_killed rc=0" not in status, status  # SIGKILL in time step 1
    for figure in ("resumed", "resume_losses", "resume_metrics"):
        assert f"\nPASS {figure} " in status, status
    assert "INFO peak_vs_preflight not measured" in status  # no CUDA peak on CPU
    assert "INFO host_load_vs_weights = " in status and " on cpu" in status  # measured, judged on a GPU only
    assert re.search(r"^weights deleted: [1-9]\d* MiB", status, re.M), status
    assert not list(tmp_path.rglob("*.safetensors")) and not list(tmp_path.rglob("train_state/*"))
    assert re.search(r"^part fsdp done: \d+ s of its \d+ s box$", status, re.M), status
    log = (tmp_path / "fsdp_full" / "train.log").read_text()
    assert "FSDP2: processes held" in log and "model: " in log
