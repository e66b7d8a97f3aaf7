"""Entry point: ``python train.py [overrides]`` or ``accelerate launch train.py [overrides]``.

Sweeps: ``python train.py -m method=full,lora`` (never ``accelerate launch train.py -m``: refused, see README).
Sweeps of multi-process runs: ``python train.py -m hydra/launcher=submitit_slurm_multi ...`` (or
``submitit_local_multi``): each point is one submitit job of several tasks, and each task, one process of the
run, gets its torch.distributed environment here before the run builds its accelerator (docs/methods.md).
"""

import os
import sys

import hydra
from omegaconf import DictConfig

import evolve_train.config  # noqa: F401  (registers the typed schema as base_config)

MULTIRUN_FLAGS = ("-m", "--multirun")


def launched_as_one_of_several(environ=os.environ) -> bool:
    """This process is one rank of a launch (``accelerate launch``/torchrun set these for every rank)."""
    return int(environ.get("WORLD_SIZE", "1") or 1) > 1 or "LOCAL_RANK" in environ


def refuse_a_sweep_in_every_rank(argv=sys.argv, environ=os.environ) -> None:
    """``accelerate launch train.py -m ...`` would run the whole sweep in every rank, and the ranks of different
    runs would meet in one process group: stop with one line saying what to run instead (exit code 2)."""
    if not any(arg in MULTIRUN_FLAGS for arg in argv[1:]) or not launched_as_one_of_several(environ):
        return
    if environ.get("RANK", "0") == "0":
        print(
            "error: a sweep (-m) under accelerate launch or torchrun would run the whole sweep in every process. "
            "Sweep multi-process runs with `python train.py -m hydra/launcher=submitit_slurm_multi ...` (or "
            "submitit_local_multi): each point one job of several processes; or run one `accelerate launch "
            "train.py ...` per point (docs/methods.md, 'Sweeps').",
            file=sys.stderr,
        )
    raise SystemExit(2)


def refuse_unknown_keys(argv=sys.argv) -> None:
    """An override naming a key the schema does not know (``+trainer.lrrr=1`` too) stops here with the nearest
    known key (exit code 2), before Hydra creates or writes anything (evolve_train/config_strict.py)."""
    from pathlib import Path

    from evolve_train.cli.errors import exit_on_user_error
    from evolve_train.config_strict import check_overrides, command_overrides

    with exit_on_user_error():
        check_overrides(command_overrides(argv[1:]), [Path(__file__).resolve().parent / "configs"])


@hydra.main(version_base="1.3", config_path="configs", config_name="config")
def main(cfg: DictConfig) -> None:
    from evolve_train.cli.errors import exit_on_user_error
    from evolve_train.run import train
    from evolve_train.training.submitit_env import export_submitit_env

    export_submitit_env()  # a task of a multi-process sweep point: its rank; elsewhere nothing
    with exit_on_user_error():
        train(cfg)


if __name__ == "__main__":
    refuse_a_sweep_in_every_rank()
    refuse_unknown_keys()
    main()
