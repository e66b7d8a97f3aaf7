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

Outside a submitit job, or in a job of one task, nothing is exported: the single-process path is unchanged.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

log = logging.getLogger(__name__)

EXPORTED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def in_submitit_job() -> bool:
    """This process is a task of a submitit job (``SUBMITIT_EXECUTOR`` is set by submitit in every task)."""
    return bool(os.environ.get("SUBMITIT_EXECUTOR"))


def export_submitit_env() -> Optional[dict]:
    """In a task of a submitit job of several tasks, export the torch.distributed variables (module docstring)
    and return them; elsewhere return ``None`` and change nothing. Call it before the accelerator is built."""
    if not in_submitit_job():
        return None
    import submitit
    from submitit.helpers import TorchDistributedEnvironment

    job = submitit.JobEnvironment()
    if job.num_tasks <= 1:
        return None
    # the job's tasks are the processes: their ranks win over any inherited from the submitting shell
    dist = TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
    exported = {key: os.environ[key] for key in EXPORTED}
    if "ACCELERATE_USE_CPU" not in os.environ:
        import torch

        if not torch.cuda.is_available():  # no GPU: gloo on CPU, as the CPU tests launch it
            os.environ["ACCELERATE_USE_CPU"] = "true"
            exported["ACCELERATE_USE_CPU"] = "true"
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
