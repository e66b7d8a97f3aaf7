"""Small adjustments for sharded multi-GPU backends (configs/accelerate/, docs/reliability.md)."""

from __future__ import annotations


def is_sharded(accelerator) -> bool:
    """FSDP or DeepSpeed: the model or its optimizer state is split across processes."""
    from accelerate.utils import DistributedType

    return accelerator.distributed_type in (DistributedType.FSDP, DistributedType.DEEPSPEED)


def configure_deepspeed(accelerator, batch_size: int) -> None:
    """DeepSpeed needs its micro-batch size before ``prepare``; accelerate infers it from dataloaders, and
    the loop has none (it batches itself): use ``trainer.batch_size``, unless the config file sets one."""
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if plugin is not None and plugin.deepspeed_config.get("train_micro_batch_size_per_gpu", "auto") == "auto":
        plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = batch_size
