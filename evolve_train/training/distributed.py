"""Small adjustments for sharded multi-GPU backends (configs/accelerate/, docs/reliability.md)."""

from __future__ import annotations

import torch


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


def clip_gradients(accelerator, model, trainable: list, max_norm: float):
    """Clip the gradients' total norm to ``max_norm``; returns the norm before clipping.

    A single process or DDP without a loss scaler holds plain, already reduced gradients: torch's clip
    is exact there, and accelerate's wrapper (scaler and DTensor checks over every parameter) costs
    about 1 ms per optimizer step, 2-3 % of a small model's step. Sharded, scaled or XLA setups go
    through accelerate."""
    from accelerate.utils import DistributedType

    plain = (DistributedType.NO, DistributedType.MULTI_CPU, DistributedType.MULTI_GPU)
    if accelerator.distributed_type in plain and accelerator.scaler is None:
        return torch.nn.utils.clip_grad_norm_(trainable, max_norm)
    return accelerator.clip_grad_norm_(model.parameters(), max_norm)
