"""The training loop: one time step of continual pretraining, for every method.

Read top to bottom: optimizer and schedule, then epochs of length-grouped batches, each micro-batch
adding the method's extra loss. The loss is read back to the host only every ``log_every`` steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from accelerate import Accelerator
from tqdm.auto import tqdm

from evolve_train.config import TrainerConfig
from evolve_train.methods import Method
from evolve_train.training.examples import LengthGroupedBatches, collate


class NonFiniteLossError(RuntimeError):
    pass


@dataclass
class StepResult:
    optimizer_steps: int
    tokens: int
    final_loss: float
    seconds: float
    skipped_batches: int = 0


def lr_lambda(warmup: int, total: int, min_ratio: float):
    """Linear warmup, then linear decay to ``min_ratio`` of the peak."""
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return max(min_ratio, 1.0 - (1.0 - min_ratio) * progress)
    return factor


def planned_optimizer_steps(n_batches: int, epochs: float, grad_accum: int) -> int:
    return max(1, math.ceil(n_batches * epochs / grad_accum))


def train_time_step(model: torch.nn.Module, examples, *, step: int, epochs: float, cfg: TrainerConfig,
                    method: Method, accelerator: Accelerator, pad_id: int, seed: int,
                    seq2seq: bool = False, log_fn=None) -> StepResult:
    """Train ``model`` in place on one time step's tokenized ``examples``."""
    import time

    start = time.perf_counter()
    batches = LengthGroupedBatches([len(ids) for ids in examples["input_ids"]],
                                   batch_size=cfg.batch_size * accelerator.num_processes, seed=seed)
    total = planned_optimizer_steps(len(batches), epochs, cfg.grad_accum)
    trainable = [p for p in model.parameters() if p.requires_grad]
    fused = accelerator.device.type == "cuda"
    optimizer = torch.optim.AdamW(trainable, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg.warmup_steps, total, cfg.min_lr_ratio))
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    model.train()

    rank, world = accelerator.process_index, accelerator.num_processes
    columns = examples.to_dict()
    rows = [dict(zip(columns, values)) for values in zip(*columns.values())]
    optimizer_steps, micro, tokens, skipped = 0, 0, torch.zeros((), device=accelerator.device), 0
    last_loss = float("nan")
    progress = tqdm(total=total, desc=f"step {step}", disable=not accelerator.is_main_process,
                    dynamic_ncols=True, leave=False)
    epoch = 0
    while optimizer_steps < total:
        for indices in batches.epoch(epoch):
            shard = indices[rank::world]
            if not shard:
                continue
            batch = collate([rows[i] for i in shard], pad_id, seq2seq)
            batch = {k: v.to(accelerator.device) for k, v in batch.items()}
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                extra = method.extra_loss(accelerator.unwrap_model(model), optimizer_steps)
                if extra is not None:
                    loss = loss + extra
                accelerator.backward(loss)
                if accelerator.sync_gradients and cfg.grad_clip > 0:
                    accelerator.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
            tokens += batch["attention_mask"].sum()
            micro += 1
            if not accelerator.sync_gradients:
                continue
            optimizer_steps += 1
            progress.update(1)
            if optimizer_steps % cfg.log_every == 0 or optimizer_steps == total:
                last_loss = loss.detach().float().item()
                if not math.isfinite(last_loss):
                    raise NonFiniteLossError(f"non-finite loss {last_loss} at time step {step}, "
                                             f"optimizer step {optimizer_steps}")
                progress.set_postfix(loss=f"{last_loss:.3f}")
                if log_fn is not None:
                    log_fn({"time_step": step, "optimizer_step": optimizer_steps, "loss": last_loss,
                            "lr": scheduler.get_last_lr()[0], "tokens": int(tokens.item()) * world})
            if optimizer_steps >= total:
                break
        epoch += 1
    progress.close()
    model = accelerator.unwrap_model(model)
    accelerator.free_memory()
    return StepResult(optimizer_steps=optimizer_steps, tokens=int(tokens.item()) * world,
                      final_loss=last_loss, seconds=time.perf_counter() - start, skipped_batches=skipped)
