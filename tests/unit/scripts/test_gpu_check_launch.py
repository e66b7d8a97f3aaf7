"""scripts/gpu_check.sh's GPU branch (DRY unset) with stub ``nvidia-smi``, ``accelerate`` and ``python3`` first on
PATH that record their arguments and exit 0: every launch has its launcher, its script and its overrides (the
fsdp part's runs go through ``accelerate launch``: train.py is never run as a command of its own), the printed
time boxes of the default parts sum to at most 6 minutes, and the fsdp runs' overrides compose into a valid
config. Seconds: nothing trains."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
RECORDER = """import json, os, sys
name = os.path.basename(sys.argv[1])
argv = sys.argv[2:]
with open(os.environ["STUB_LOG"], "a") as log:
    log.write(json.dumps({"cmd": name, "argv": argv, "fault": os.environ.get("EVOLVE_TRAIN_FAULT")}) + "\\n")
if name == "nvidia-smi" and "-L" in argv:
    print("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)")
elif name == "python3" and "-c" in argv and "optimizer_step" in argv[argv.index("-c") + 1]:
    print(2 + 3)  # the full run's last optimizer step of time step 0, plus 3
"""


@pytest.fixture(scope="module")
def gpu_branch(tmp_path_factory):
    """One run of the GPU branch with the stubs: (its stdout, the recorded calls, $OUT)."""
    tmp = tmp_path_factory.mktemp("gpu_check")
    stubs, out, log = tmp / "bin", tmp / "out", tmp / "calls.jsonl"
    stubs.mkdir()
    (tmp / "record.py").write_text(RECORDER)
    for name in ("nvidia-smi", "accelerate", "python3"):
        stub = stubs / name
        stub.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{tmp / "record.py"}" "$0" "$@"\n')
        stub.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("DRY", "PARTS", "FSDP_METHODS", "PYTHONPATH")}
    env.update(PATH=f"{stubs}{os.pathsep}{env['PATH']}", OUT=str(out), STUB_LOG=str(log))
    done = subprocess.run(
        ["bash", "scripts/gpu_check.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    return done.stdout, calls, out


def scripts_run(calls):
    """(launcher, script, arguments after it) of every call that runs a script of the repository."""
    out = []
    for call in calls:
        argv = call["argv"]
        at = next((i for i, a in enumerate(argv) if a == "train.py" or re.fullmatch(r"scripts/\w+\.py", a)), None)
        if at is not None:
            out.append((call["cmd"], argv[:at], argv[at], argv[at + 1 :], call["fault"]))
    return out


def test_the_fsdp_runs_go_through_accelerate_launch_with_their_overrides(gpu_branch):
    stdout, calls, out = gpu_branch
    train = [run for run in scripts_run(calls) if run[2] == "train.py"]
    assert len(train) == 3, train  # full, then full killed in time step 1, then resumed
    for cmd, launcher, _, overrides, _ in train:
        assert cmd == "accelerate" and launcher[:1] == ["launch"], (cmd, launcher)
        assert "--config_file" in launcher and "accelerate_configs/fsdp.yaml" in launcher
        assert launcher[launcher.index("--num_processes") + 1] == "1"
        for key in ("model=llama_1b_random", "model.n_layer=2", "method=full", "trainer.save_every_n_steps=2"):
            assert key in overrides, (key, overrides)
        assert any(a.startswith("hydra.run.dir=") for a in overrides)
    (full, killed, resumed) = train
    assert f"hydra.run.dir={out}/fsdp_full" in full[3]
    assert f"hydra.run.dir={out}/fsdp_resume" in killed[3] and killed[3] == resumed[3]
    assert killed[4] == "optimizer_step:5" and full[4] is None and resumed[4] is None


def test_every_script_has_its_launcher_and_no_step_ran_a_script_as_a_command(gpu_branch):
    stdout, calls, out = gpu_branch
    runs = scripts_run(calls)
    by_script = {script: (cmd, launcher, args) for cmd, launcher, script, args, _ in runs}
    for script in ("scripts/gpu_env.py", "scripts/gpu_memory_check.py", "scripts/gpu_bench.py"):
        assert by_script[script][0] == "python3" and by_script[script][1] == [], (script, by_script.get(script))
    for script in ("scripts/run_figures.py", "scripts/resume_check.py"):
        assert by_script[script][0] == "python3", by_script
    assert by_script["scripts/gpu_memory_check.py"][2][:2] == ["--out", f"{out}/memory_check.json"]
    assert by_script["scripts/gpu_bench.py"][2] == ["--out", f"{out}/gpu_bench.json", "--steps", "10", "--no-compile"]
    assert all(call["argv"][:1] != ["train.py"] for call in calls)
    status = (out / "status.txt").read_text()
    # a launcher missing leaves `timeout train.py ...`: not found (127) or not executable (126)
    assert not re.search(r" rc=12[67] ", status), status
    for name in ("fsdp_full", "fsdp_killed", "fsdp_resumed", "gpu_bench", "memory"):
        assert f"{name} rc=0 " in status, status
    assert "sweep" not in status  # one GPU: no sweep part


def test_the_default_parts_time_boxes_sum_to_at_most_six_minutes(gpu_branch):
    stdout, calls, out = gpu_branch
    line = next(line for line in stdout.splitlines() if line.startswith("time boxes: "))
    boxes = dict(re.findall(r"(\w+) (\d+) s\b", line.split(";")[0].split(" (")[0]))
    assert set(boxes) == {"setup", "memory", "fsdp", "bench"}, line
    total = int(re.search(r"; sum (\d+) s$", line).group(1))
    assert total == sum(int(v) for v in boxes.values()) and total <= 360, line
    for part in ("memory", "fsdp", "bench"):  # each part says when it is done, its figures already in $OUT
        assert re.search(rf"^part {part} done: \d+ s of its {boxes[part]} s box$", stdout, re.M), stdout


def test_the_fsdp_runs_overrides_compose(gpu_branch):
    from evolve_train.compose import compose_config

    stdout, calls, out = gpu_branch
    (cmd, launcher, script, overrides, _) = next(run for run in scripts_run(calls) if run[2] == "train.py")
    cfg = compose_config([o for o in overrides if not o.startswith("hydra.")])
    assert cfg.model.n_layer == 2 and cfg.model.vocab_size == 128256 and cfg.model.n_embd == 2048
    assert cfg.trainer.max_steps_step0 == 2 and cfg.trainer.max_steps == 4 and cfg.trainer.save_every_n_steps == 2
    assert cfg.eval.max_items_per_set == 32 and cfg.logger.backends == ["disk"]
