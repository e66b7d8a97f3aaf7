"""The dry run's pieces (evolve_train/cli/dry_run.py) without composing: the flag, the sweep's points as Hydra's
basic sweeper splits them, the overrides that differ, the world size a launcher gives, each step's tokens."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from evolve_train.cli.dry_run import (
    differing,
    fsdp2_file,
    launcher_shape,
    launcher_world,
    parse_args,
    shard_group,
    step_tokens,
    sweep_points,
    take_flag,
)
from evolve_train.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "configs"


def test_the_flag_is_taken_out():
    assert take_flag(["--dry-run", "-m", "seed=0,1"]) == (True, ["-m", "seed=0,1"])
    assert take_flag(["seed=0"]) == (False, ["seed=0"])


def test_arguments_and_refused_flags(tmp_path):
    assert parse_args(["-m", "seed=0,1", "--config-dir", str(tmp_path)]) == (True, ["seed=0,1"], [tmp_path])
    with pytest.raises(ConfigError, match="--dry-run takes overrides, -m and --config-dir; not --cfg"):
        parse_args(["--cfg", "job"])


def test_sweep_points_and_what_differs():
    points = sweep_points(["method=full,lora", "trainer.lr=1e-3,2e-3", "seed=0"], multirun=True)
    assert len(points) == 4 and all("seed=0" in point for point in points)
    assert differing(points) == ["method", "trainer.lr"]
    assert sweep_points(["method=lora"], multirun=False) == [["method=lora"]]


def test_world_size_from_a_launcher_without_submitting(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert launcher_world(["seed=0"], [CONFIGS]) == (1, "one process", ["seed=0"])
    world, source, kept = launcher_world(
        ["hydra/launcher=submitit_local_multi", "hydra.launcher.tasks_per_node=4", "seed=0"], [CONFIGS]
    )
    assert (world, kept) == (4, ["seed=0"]) and "4 tasks x 1 node(s)" in source


def test_each_step_trains_its_budget_else_its_steps_else_its_epochs():
    trainer = SimpleNamespace(
        tokens_per_step0=0, tokens_per_step=500, max_steps_step0=3, max_steps=0, epochs_step0=40, epochs=30
    )
    assert step_tokens(trainer, [100.0, 50.0, 50.0], update_tokens=64) == [192.0, 500.0, 500.0]
    trainer.tokens_per_step, trainer.max_steps_step0 = 0, 0
    assert step_tokens(trainer, [100.0, 50.0], update_tokens=64) == [4000.0, 1500.0]


def test_an_fsdp2_accelerate_config_shards_each_launched_point_and_a_ddp_one_does_not(monkeypatch):
    for key in ("ACCELERATE_USE_FSDP", "FSDP_VERSION", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(ROOT)  # a relative trainer.accelerate_config is read from the working directory

    def trainer(config):
        return SimpleNamespace(accelerate_config=config, fsdp_mesh="auto", fsdp_replicate=0)

    assert fsdp2_file("accelerate_configs/fsdp.yaml") and not fsdp2_file("accelerate_configs/ddp.yaml")
    assert shard_group(8, trainer("accelerate_configs/fsdp.yaml"), per_node=8) == 8
    assert shard_group(16, trainer("accelerate_configs/fsdp.yaml"), per_node=8) == 8  # HSDP: a node's 8
    assert shard_group(8, trainer("accelerate_configs/ddp.yaml"), per_node=8) == 0
    assert (
        shard_group(8, trainer(None), per_node=8) == 0 and shard_group(1, trainer("accelerate_configs/fsdp.yaml")) == 0
    )
    shape = launcher_shape(["hydra/launcher=submitit_slurm_multi", "hydra.launcher.nodes=2", "seed=0"], [CONFIGS])
    assert shape == ("submitit_slurm_multi", 8, 2, ["seed=0"])
