"""``trainer.accelerate_config`` in a task of a submitit job of several tasks (training/submitit_env.py): the task
exports what ``accelerate launch --config_file FILE`` gives each process, found by accelerate's own launch code,
besides its rank; FSDP2 through accelerate_configs/fsdp.yaml, in a faked SLURM job of 2 nodes x 8 GPUs (no
process is started). Outside such a job the setting is refused before anything runs."""

from __future__ import annotations

import os

import pytest
import yaml
from helpers import tiny_cfg
from helpers.processes import ROOT

from evolve_train.config import TrainerConfig
from evolve_train.errors import ConfigError
from evolve_train.training import submitit_env
from evolve_train.training.distributed import fsdp2_requested, launch_device, mesh_sizes, resolve_precision

FSDP = str(ROOT / "accelerate_configs" / "fsdp.yaml")
DDP = str(ROOT / "accelerate_configs" / "ddp.yaml")
LAUNCH_STATE = ("SUBMITIT_", "SLURM_", "ACCELERATE_", "FSDP_", "PARALLELISM_CONFIG_")


@pytest.fixture
def clean_env():
    """No launch in the environment during the test; the environment as it was afterwards (the export writes it)."""
    saved = dict(os.environ)
    for key in list(os.environ):
        if key.startswith(LAUNCH_STATE) or key in submitit_env.EXPORTED:
            del os.environ[key]
    yield os.environ
    os.environ.clear()
    os.environ.update(saved)


def slurm_task(env, procid: int, ntasks: int = 16, nodes: int = 2) -> None:
    """This process as task ``procid`` of SLURM job 4242: ``ntasks`` tasks over ``nodes`` nodes gpu07, gpu08..."""
    per_node = ntasks // nodes
    env.update(
        SUBMITIT_EXECUTOR="slurm",
        SLURM_JOB_ID="4242",
        SLURM_NTASKS=str(ntasks),
        SLURM_JOB_NUM_NODES=str(nodes),
        SLURM_JOB_NODELIST=f"gpu[07-{6 + nodes:02d}]",
        SLURM_PROCID=str(procid),
        SLURM_LOCALID=str(procid % per_node),
        SLURM_NODEID=str(procid // per_node),
    )


def fsdp_variable(key: str) -> str:
    """The variable ``accelerate launch`` sets for an ``fsdp_config`` key of a config file."""
    return "FSDP_" + key.removeprefix("fsdp_").upper()


def test_a_task_of_a_two_node_job_is_an_fsdp2_process_of_the_whole_job(clean_env):
    slurm_task(clean_env, procid=9)
    trainer = TrainerConfig(accelerate_config=FSDP, mixed_precision="no")
    exported = submitit_env.export_submitit_env(trainer)
    assert (clean_env["RANK"], clean_env["WORLD_SIZE"], clean_env["LOCAL_WORLD_SIZE"]) == ("9", "16", "8")
    assert clean_env["ACCELERATE_USE_FSDP"] == "true" and clean_env["FSDP_VERSION"] == "2"
    assert fsdp2_requested()
    with open(FSDP) as file:
        fields = yaml.safe_load(file)["fsdp_config"]
    for key, value in fields.items():  # every field of the file reaches the process, as accelerate launch passes it
        assert clean_env[fsdp_variable(key)].lower() == str(value).lower(), key
    assert clean_env["ACCELERATE_MIXED_PRECISION"] == "no"  # the run's precision, not the file's bf16
    assert {k: clean_env[k] for k in exported} == exported
    assert "OMP_NUM_THREADS" not in exported and "CUDA_VISIBLE_DEVICES" not in exported
    # 2 nodes x 8: trainer.fsdp_mesh=auto shards within a node and replicates across the two (HSDP)
    world, local = int(clean_env["WORLD_SIZE"]), int(clean_env["LOCAL_WORLD_SIZE"])
    assert mesh_sizes("auto", 0, world, local) == (2, 8)


@pytest.mark.parametrize("precision", ["bf16", "auto"])
def test_the_launch_precision_is_the_runs(clean_env, precision):
    slurm_task(clean_env, procid=0, ntasks=2, nodes=1)
    trainer = TrainerConfig(accelerate_config=FSDP, mixed_precision=precision)
    submitit_env.export_submitit_env(trainer)
    assert clean_env["ACCELERATE_MIXED_PRECISION"] == resolve_precision(trainer, launch_device())[0]


def test_the_files_own_fields_are_exported(clean_env, tmp_path):
    with open(FSDP) as file:
        config = yaml.safe_load(file)
    config["fsdp_config"].update(fsdp_reshard_after_forward=False, fsdp_activation_checkpointing=True)
    mine = tmp_path / "shard_grad_op.yaml"
    mine.write_text(yaml.safe_dump(config))
    slurm_task(clean_env, procid=1, ntasks=2, nodes=1)
    submitit_env.export_submitit_env(TrainerConfig(accelerate_config=str(mine)))
    assert clean_env["FSDP_RESHARD_AFTER_FORWARD"] == "false"
    assert clean_env["FSDP_ACTIVATION_CHECKPOINTING"] == "true"


def test_a_ddp_config_or_none_exports_no_fsdp(clean_env):
    slurm_task(clean_env, procid=3)
    submitit_env.export_submitit_env(TrainerConfig(accelerate_config=DDP))
    assert clean_env["RANK"] == "3" and "ACCELERATE_USE_FSDP" not in clean_env and not fsdp2_requested()
    exported = submitit_env.export_submitit_env(TrainerConfig())
    assert not any(key.startswith(("FSDP_", "ACCELERATE_MIXED")) for key in exported)


def test_the_setting_is_refused_outside_a_job_of_several_tasks(clean_env):
    trainer = TrainerConfig(accelerate_config=FSDP)
    with pytest.raises(ConfigError, match="trainer.accelerate_config=.*not a task of a submitit job"):
        submitit_env.export_submitit_env(trainer)
    slurm_task(clean_env, procid=0, ntasks=1, nodes=1)
    with pytest.raises(ConfigError, match="trainer.accelerate_config=.*one task"):
        submitit_env.export_submitit_env(trainer)
    assert not any(key.startswith(("FSDP_", "ACCELERATE_USE_FSDP")) for key in clean_env)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("missing.yaml", None, "no file .*missing.yaml"),
        ("deepspeed.yaml", "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\n", "DEEPSPEED"),
        ("broken.yaml", "fsdp_config: [\n", "accelerate launch refuses .*broken.yaml"),
        ("list.yaml", "- FSDP\n", "accelerate launch refuses .*list.yaml"),
    ],
)
def test_a_bad_file_is_a_config_error_naming_it(clean_env, tmp_path, name, text, message):
    if text is not None:
        (tmp_path / name).write_text(text)
    slurm_task(clean_env, procid=0, ntasks=2, nodes=1)
    with pytest.raises(ConfigError, match=f"trainer.accelerate_config: .*{message}"):
        submitit_env.export_submitit_env(TrainerConfig(accelerate_config=str(tmp_path / name)))


def test_a_run_outside_a_job_stops_with_one_line_before_training(clean_env, tmp_path, capsys):
    from evolve_train.cli.train import task

    with pytest.raises(SystemExit) as stop:
        task(tiny_cfg(tmp_path / "run", f"trainer.accelerate_config={FSDP}"))
    assert stop.value.code == 2
    assert "error: trainer.accelerate_config=" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
