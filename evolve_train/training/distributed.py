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


def is_plain(accelerator) -> bool:
    """A single process or DDP without a loss scaler: after backward the gradients are plain, already
    reduced tensors, and torch's own clip, step and zero_grad are exact."""
    from accelerate.utils import DistributedType

    plain = (DistributedType.NO, DistributedType.MULTI_CPU, DistributedType.MULTI_GPU)
    return accelerator.distributed_type in plain and accelerator.scaler is None


def clip_gradients(accelerator, model, trainable: list, max_norm: float):
    """Clip the gradients' total norm to ``max_norm``; returns the norm before clipping.

    In a plain setup (``is_plain``) this is torch's clip: accelerate's wrapper (scaler and DTensor checks
    over every parameter) costs about 1 ms per optimizer step, 2-3 % of a small model's step. Sharded,
    scaled or XLA setups go through accelerate."""
    if is_plain(accelerator):
        return torch.nn.utils.clip_grad_norm_(trainable, max_norm)
    return accelerator.clip_grad_norm_(model.parameters(), max_norm)


def update_steppers(accelerator, optimizer, scheduler):
    """What the loop calls ``step``/``zero_grad`` on at an optimizer step (only on synced gradients).

    In a plain setup, the torch optimizer and schedule under accelerate's wrappers: the wrappers only add
    checks that are constant there, yet ``AcceleratedOptimizer.step`` looks the LOMO package up on disk twice
    per call and ``zero_grad`` inspects a signature (~1 ms per step together, 3 % of the demo model's step).
    Elsewhere the wrappers, which handle loss scaling, XLA and sharding."""
    if is_plain(accelerator):
        return optimizer.optimizer, scheduler.scheduler
    return optimizer, scheduler
