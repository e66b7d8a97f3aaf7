"""``trainer.optimizer_state=keep``: each time step's AdamW starts from the state the previous step ended with
(``training/carry.py``: kept in ``train_state/carry/<k>/`` between steps, so a resumed run continues from it)."""

from __future__ import annotations

import logging

from evolve_train.training import carry
from evolve_train.training.distributed import is_fsdp2
from evolve_train.training.hooks import Hook, register_hook

log = logging.getLogger(__name__)


@register_hook("optimizer_carry")
def optimizer_carry(cfg):
    return OptimizerCarryHook() if cfg.trainer.optimizer_state == "keep" else None


class OptimizerCarryHook(Hook):
    def on_run_start(self, run) -> None:
        start, run_dir = run.start, run.run_dir
        self.run_dir, self.main = run_dir, run.accelerator.is_main_process
        sharded = carry.sharded_carry(run_dir, start - 1) if start > 0 else None  # every process reads its shards
        # a whole state (DDP, one process; FSDP2 before sharded carries): under FSDP2 only the main process reads
        # it (it broadcasts it shard by shard: carry.py)
        reads = start > 0 and sharded is None and (not is_fsdp2(run.accelerator) or run.accelerator.is_main_process)
        tensors = carry.load(run_dir, start - 1, carry.OPTIMIZER_FILE) if reads else None
        if reads and tensors is None:
            log.warning(
                "trainer.optimizer_state=keep: no optimizer state of step %d in %s; step %d starts with "
                "fresh AdamW moments",
                start - 1,
                carry.carry_dir(run_dir, start - 1),
                start,
            )
        self.carry = carry.OptimizerCarry(tensors, sharded)

    def on_optimizer_built(self, trainer) -> None:  # before a mid-step state (if any) is restored over it
        self.carry.restore(trainer.unwrapped, trainer.optimizer, sharded=trainer.accelerator.is_fsdp2)

    def on_train_end(self, trainer) -> None:
        sharded = trainer.accelerator.is_fsdp2
        staged = carry.staging_dir(self.run_dir, trainer.step) if sharded else None
        self.carry.capture(trainer.unwrapped, trainer.optimizer, sharded=sharded, staged=staged, main=self.main)
        # the next step starts from this one's state: in memory, or sharded in carry/<k>/optimizer/ (moved there
        # with the step's checkpoint, before the next step's optimizer is built)
        self.carry.path = carry.carry_dir(self.run_dir, trainer.step) / carry.OPTIMIZER_DCP if sharded else None

    def carried(self, run, step: int) -> dict:
        if self.carry.staged is not None:
            staged, self.carry.staged = self.carry.staged, None
            return {carry.OPTIMIZER_DCP: staged}
        return {carry.OPTIMIZER_FILE: self.carry.tensors} if self.carry.tensors else {}
