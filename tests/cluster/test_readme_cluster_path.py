"""README.md's path (b), your model on your yearly corpora on a SLURM GPU cluster, each command as the README
writes it, in order, on the local one-node cluster: list the recipes, copy one, edit the copy as the README asks
(here a tiny model built from config in place of Llama-3.2-1B, and a small yearly corpus: tests/helpers/your_data.py),
the dry run of the sweep, the sweep (each point one SLURM job of 2 FSDP2 processes on CPU; the launcher's keys for
this CPU-only node appended, as a user appends a partition) and the report of its two arms."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import rows
from helpers.docs import readme_cluster_path
from helpers.processes import ROOT
from helpers.your_data import SHRINK, YEARS, write_your_data

pytestmark = pytest.mark.slow

CPU_NODE = [
    "hydra.launcher.tasks_per_node=2",
    "hydra.launcher.gpus_per_node=0",  # a CPU-only partition: no GPUs to ask for
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=2",
    "hydra.launcher.timeout_min=10",
]
ENV = {"ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false"}


def edit(recipe: Path, overrides: list[str]) -> None:
    """What the README asks of the copy (the model, the data), written into it as a user would: each
    ``key=value`` set in the YAML (``+key`` adds one); the header's ``# @package _global_`` kept."""
    text = recipe.read_text(encoding="utf-8")
    config = yaml.safe_load(text)
    for override in overrides:
        key, _, value = override.lstrip("+").partition("=")
        *parents, leaf = key.split(".")
        node = config
        for parent in parents:
            node = node.setdefault(parent, {})
        value = yaml.safe_load(value)
        # a year's folder names are strings in YAML too (an unquoted 2018 is an int, refused naming the key)
        node[leaf] = [str(v) for v in value] if key.startswith("data.train_files.") else value
    recipe.write_text("# @package _global_\n" + yaml.safe_dump(config, sort_keys=False), encoding="utf-8")


def test_the_readme_cluster_path_runs_as_written(tmp_path):
    listing, copy, dry_run, sweep, report = readme_cluster_path()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "EVOLVE_TRAIN_FAULT"))}
    env.update(ENV, PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    env["EVOLVE_TRAIN_CACHE"] = str(tmp_path / "cache")  # the step-0 cache of this test's runs only

    # the README's relative paths (my_configs, runs/, report) land in a fresh folder; train.py and
    # accelerate_configs/ are the clone's (the sweep line runs "from a clone")
    here = tmp_path / "work"
    here.mkdir()
    (here / "accelerate_configs").symlink_to(ROOT / "accelerate_configs")

    def sh(line: str, timeout: float = 120) -> str:
        done = subprocess.run(["bash", "-c", line], cwd=here, env=env, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    assert "llama32_1b_8xh100" in sh(listing)
    sh(copy)
    recipe = here / "my_configs" / "experiment" / "my_llama32_1b_8xh100.yaml"
    data = tmp_path / "data"
    write_your_data(data)
    edit(recipe, [*SHRINK, f"data.root={data}", *[f"+data.train_files.{y}=[{y}]" for y in YEARS]])

    planned = sh(dry_run)
    assert "dry run: 2 point(s)" in planned and planned.count("memory per device (preflight estimate)") == 2
    assert planned.count("world size: 8 (hydra/launcher=submitit_slurm_multi: 8 tasks x 1 node(s))") == 2
    assert planned.count("FSDP2, sharded over 8 processes") == 2  # the points' accelerate config, not DDP
    assert not (here / "runs").exists()  # a dry run writes nothing

    sh(f"{sweep} {' '.join(CPU_NODE)}", timeout=900)
    arms = {arm: here / "runs" / "my_llama32_1b_8xh100" / "multirun" / arm / "seed0" for arm in ("full", "lora")}
    for arm, run in arms.items():
        assert json.loads((run / "state.json").read_text())["evaluated"] == [0, 1, 2], arm
        assert {r["num_processes"] for r in rows(run) if "num_processes" in r} == {2}, arm
        assert "FSDP2: processes held" in (run / "train.log").read_text(), arm  # sharded, not DDP
        assert {r["checkpoint"] for r in rows(run)} >= {0, 1, 2}, arm

    sh(report)
    page = (here / "report" / "report.md").read_text()
    assert "full" in page and "lora" in page
