"""Entry point: ``python train.py [overrides]`` or ``accelerate launch train.py [overrides]`` (from any directory:
``evolve-train [overrides]``, evolve_train/cli/train.py).

Sweeps: ``python train.py -m method=full,lora`` (never ``accelerate launch train.py -m``: refused, see README).
Sweeps of multi-process runs: ``python train.py -m hydra/launcher=submitit_slurm_multi ...`` (or
``submitit_local_multi``): each point is one submitit job of several tasks, and each task, one process of the
run, gets its torch.distributed environment here before the run builds its accelerator (docs/methods.md).
A dry run, ``python train.py --dry-run [-m] ...``, prints each point's run dir and estimates without training or
writing anything (evolve_train/cli/dry_run.py). An override naming a key the schema does not know (``+trainer.lrrr=1`` too) is refused before anything is written;
a former key name is read as it is now, with a warning (evolve_train/config_renames.py).
"""

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

import evolve_train.config  # noqa: F401  (registers the typed schema as base_config)
from evolve_train.config_renames import renamed_overrides
from evolve_train.cli.dry_run import DRY_RUN_FLAG, run_if_asked
from evolve_train.cli.train import (  # noqa: F401  (launched_as_one_of_several: part of this script's interface)
    MULTIRUN_FLAGS,
    launched_as_one_of_several,
    refuse_a_sweep_in_every_rank,
    refuse_unknown_keys,
    task,
    user_config_dirs,
)


@hydra.main(version_base="1.3", config_path="configs", config_name="config")
def main(cfg: DictConfig) -> None:
    task(cfg)


if __name__ == "__main__":
    sys.argv[1:] = renamed_overrides(sys.argv[1:])
    if DRY_RUN_FLAG in sys.argv[1:]:  # each point composed and estimated: nothing trained, launched or written
        sys.exit(run_if_asked(sys.argv[1:], Path(__file__).resolve().parent / "configs"))
    refuse_a_sweep_in_every_rank()
    refuse_unknown_keys(sys.argv[1:], [Path(__file__).resolve().parent / "configs", *user_config_dirs(sys.argv[1:])])
    main()
