"""Run as 2 ranks by tests/distributed/test_fsdp.py: the process group's timeout, as configured."""

import sys

from evolve_train.config import TrainerConfig
from evolve_train.training.distributed import build_accelerator, process_group_timeout

accelerator = build_accelerator(TrainerConfig(dist_timeout_s=int(sys.argv[1])))
print(
    f"rank {accelerator.process_index} of {accelerator.num_processes}: timeout "
    f"{process_group_timeout().total_seconds():.0f}",
    flush=True,
)
accelerator.wait_for_everyone()
