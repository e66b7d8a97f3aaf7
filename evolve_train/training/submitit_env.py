"""The torch.distributed environment of a submitit job of several tasks: each task is one process of the run.

``hydra/launcher=submitit_slurm_multi`` (or ``submitit_local_multi``) makes each point of a sweep one submitit
job of ``tasks_per_node x nodes`` tasks, and every task calls the run itself. :func:`export_submitit_env`,
called by ``train.py`` before the run builds its accelerator, exports what ``accelerate launch`` (torchrun)
would have set, from submitit's view of the job (SLURM's ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``,
``SLURM_JOB_NODELIST``, ... or the local executor's ``SUBMITIT_LOCAL_*``): ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` (the job's first host) and ``MASTER_PORT`` (``MASTER_PORT``
if set, else one derived from the job id, the same in every task). ``CUDA_VISIBLE_DEVICES`` is left as SLURM set
it: accelerate gives each process the device ``LOCAL_RANK`` modulo the devices it sees, which is right both when
every task sees the node's GPUs and when SLURM gave each task its own. On a machine without CUDA the processes
form a gloo group on CPU (``ACCELERATE_USE_CPU``, as ``ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu`` does).

``trainer.accelerate_config`` (an accelerate config file, e.g. ``accelerate_configs/fsdp.yaml``) makes every
point such a job under that config: :func:`accelerate_config_env` asks accelerate's own ``accelerate launch`` code
(``_validate_launch_command``, ``prepare_multi_gpu_env``) which variables the file sets (``ACCELERATE_USE_FSDP``,
``FSDP_VERSION``, the other ``FSDP_*``, ``ACCELERATE_MIXED_PRECISION``, ...) and exports them too, so the point is
the run ``accelerate launch --config_file FILE --num_processes N --mixed_precision P`` makes (P: the run's
``trainer.mixed_precision``, ``auto`` resolved on this device; ``no`` on a CPU without native bf16). The job's shape
(tasks x nodes) wins over the file's ``num_processes``, as ``--num_processes`` does; across nodes FSDP2 runs as HSDP
(``trainer.fsdp_mesh=auto``). DDP (``MULTI_GPU``) and FSDP files are accepted; DeepSpeed needs
``scripts/slurm/multinode.sbatch``.

Outside a submitit job, or in a job of one task, nothing is exported: the single-process path is unchanged
(``trainer.accelerate_config`` there is refused: such a run takes its accelerate config from ``accelerate launch``).
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Any, Optional

from evolve_train.errors import ConfigError

log = logging.getLogger(__name__)

EXPORTED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
LAUNCH_PREFIXES = ("ACCELERATE_", "FSDP_", "PARALLELISM_CONFIG_")
"""The variables of an ``accelerate launch`` environment that :func:`accelerate_config_env` passes on: accelerate's
and FSDP's own (not ``OMP_NUM_THREADS``, which torch has read by the time a task runs, nor the devices SLURM gave)."""
SUPPORTED = ("MULTI_GPU", "FSDP")


def in_submitit_job() -> bool:
    """This process is a task of a submitit job (``SUBMITIT_EXECUTOR`` is set by submitit in every task)."""
    return bool(os.environ.get("SUBMITIT_EXECUTOR"))


def export_submitit_env(trainer: Any = None) -> Optional[dict]:
    """In a task of a submitit job of several tasks, export the torch.distributed variables (module docstring)
    and, where ``trainer.accelerate_config`` names a file, the variables ``accelerate launch`` sets from it; return
    what was exported. Elsewhere return ``None`` and change nothing (a set ``trainer.accelerate_config`` there is a
    :class:`ConfigError`). Call it before the accelerator is built."""
    config = getattr(trainer, "accelerate_config", None)
    if not in_submitit_job():
        refuse_outside_a_job(config, "this run is not a task of a submitit job")
        return None
    import submitit
    from submitit.helpers import TorchDistributedEnvironment

    job = submitit.JobEnvironment()
    if job.num_tasks <= 1:
        refuse_outside_a_job(config, "this submitit job has one task (hydra.launcher.tasks_per_node x nodes)")
        return None
    # the job's tasks are the processes: their ranks win over any inherited from the submitting shell
    dist = TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
    exported = {key: os.environ[key] for key in EXPORTED}
    if "ACCELERATE_USE_CPU" not in os.environ:
        import torch

        if not torch.cuda.is_available():  # no GPU: gloo on CPU, as the CPU tests launch it
            os.environ["ACCELERATE_USE_CPU"] = "true"
            exported["ACCELERATE_USE_CPU"] = "true"
    if config:
        exported.update(export_accelerate_config(trainer, dist.world_size, dist.rank == 0))
    if dist.rank == 0:
        log.info(
            "submitit job %s: %d processes on %d node(s), master %s:%s",
            job.job_id,
            dist.world_size,
            job.num_nodes,
            dist.master_addr,
            dist.master_port,
        )
    return exported


def refuse_outside_a_job(config: Optional[str], why: str) -> None:
    if config:
        raise ConfigError(
            f"trainer.accelerate_config={config}: {why}. It makes each point of a multi-process sweep "
            "(hydra/launcher=submitit_slurm_multi or submitit_local_multi) a run under that accelerate config; "
            "a single run takes its config from `accelerate launch --config_file`. Drop trainer.accelerate_config"
        )


def accelerate_config_env(path: str, num_processes: int, mixed_precision: str) -> dict[str, str]:
    """The variables ``accelerate launch --config_file path --num_processes N --mixed_precision P`` gives each
    process it starts (:data:`LAUNCH_PREFIXES`; those whose value differs from this process's environment), found
    by accelerate's own launch code. The machine count and rendezvous are the job's (``RANK``, ``MASTER_ADDR``...):
    accelerate is asked for one machine on a free port, which changes none of these variables and checks no port
    another task already holds. Raises :class:`ConfigError` naming the file for a missing or unreadable file, or a
    ``distributed_type`` other than MULTI_GPU (DDP) or FSDP."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env
    import yaml

    file = Path(path)
    if not file.is_file():
        raise ConfigError(
            f"trainer.accelerate_config: no file {file.resolve()} (a relative path is read from the working "
            f"directory, {Path.cwd()}); the shipped ones are accelerate_configs/fsdp.yaml and ddp.yaml"
        )
    flags = ["--config_file", str(file), "--num_processes", str(num_processes), "--num_machines", "1"]
    flags += ["--mixed_precision", mixed_precision, "--main_process_port", "0", "train.py"]
    try:
        args, defaults, _ = _validate_launch_command(launch_command_parser().parse_args(flags))
    except (OSError, ValueError, TypeError, KeyError, AttributeError, yaml.YAMLError) as error:
        raise ConfigError(f"trainer.accelerate_config: accelerate launch refuses {file}: {error}") from error
    kind = getattr(getattr(defaults, "distributed_type", None), "value", None)
    if kind not in SUPPORTED:
        raise ConfigError(
            f"trainer.accelerate_config: {file} has distributed_type {kind}; a submitit multi-process job runs "
            f"{' or '.join(SUPPORTED)} configs (DeepSpeed: scripts/slurm/multinode.sbatch)"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = prepare_multi_gpu_env(args)
    return {k: v for k, v in env.items() if k.startswith(LAUNCH_PREFIXES) and os.environ.get(k) != v}


def export_accelerate_config(trainer: Any, world_size: int, main: bool) -> dict[str, str]:
    """Export :func:`accelerate_config_env` of ``trainer.accelerate_config`` for a job of ``world_size`` tasks, in
    the run's precision (``trainer.mixed_precision``, ``auto`` resolved on this process's device); returns it."""
    from evolve_train.training.distributed import launch_device, resolve_precision

    precision = resolve_precision(trainer, launch_device())[0]
    exported = accelerate_config_env(str(trainer.accelerate_config), world_size, precision)
    os.environ.update(exported)
    if main:
        log.info(
            "trainer.accelerate_config %s: %s, %d processes, mixed precision %s",
            trainer.accelerate_config,
            f"FSDP{os.environ.get('FSDP_VERSION', '1')}" if os.environ.get("ACCELERATE_USE_FSDP") == "true" else "DDP",
            world_size,
            precision,
        )
    return exported
