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
from evolve_train.training import faults
from evolve_train.training.distributed import clip_gradients, configure_deepspeed, update_steppers
from evolve_train.training.examples import LengthGroupedBatches, as_array_rows, collate
from evolve_train.training.nonfinite import NonFiniteGuard, NonFiniteLossError  # noqa: F401  (re-exported)
from evolve_train.training.train_state import Progress, StepStates


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


def epoch_batches(batches: LengthGroupedBatches, epoch: int, rows) -> list[list[int]]:
    """The epoch's batches, restricted to ``rows`` when the method selects rows per epoch (replay decay)."""
    if rows is None:
        return batches.epoch(epoch)
    subset = LengthGroupedBatches([batches.lengths[i] for i in rows], batches.batch_size, batches.seed)
    return [[rows[i] for i in batch] for batch in subset.epoch(epoch)]


def planned_steps_for_method(batches: LengthGroupedBatches, epochs: float, grad_accum: int, method) -> int:
    """Optimizer steps for ``epochs`` passes, counting each epoch's own batches if the method varies them."""
    n = len(batches.lengths)
    per_epoch = [method.epoch_rows(e, n) for e in range(math.ceil(epochs))]
    if all(rows is None for rows in per_epoch):
        return planned_optimizer_steps(len(batches), epochs, grad_accum)
    counts = [len(batches) if rows is None else -(-len(rows) // batches.batch_size) for rows in per_epoch]
    whole = int(epochs)
    total = sum(counts[:whole]) + (epochs - whole) * (counts[whole] if whole < len(counts) else 0)
    return max(1, math.ceil(total / grad_accum))


def train_time_step(model: torch.nn.Module, examples, *, step: int, epochs: float, cfg: TrainerConfig,
                    method: Method, accelerator: Accelerator, pad_id: int, seed: int,
                    log_fn=None, states: StepStates | None = None) -> StepResult:
    """Train ``model`` in place on one time step's tokenized ``examples``.

    ``states`` (training/train_state.py) saves resumable mid-step states and restores the newest one;
    ``trainer.nonfinite`` guards every loss and gradient (training/nonfinite.py).
    """
    import time

    start = time.perf_counter()
    rows = as_array_rows(examples)
    batches = LengthGroupedBatches([len(row["input_ids"]) for row in rows],
                                   batch_size=cfg.batch_size * accelerator.num_processes, seed=seed)
    total = planned_steps_for_method(batches, epochs, cfg.grad_accum, method)
    trainable = [p for p in model.parameters() if p.requires_grad]
    fused = accelerator.device.type == "cuda"
    optimizer = torch.optim.AdamW(trainable, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg.warmup_steps, total, cfg.min_lr_ratio))
    if cfg.compile:  # trains the same parameters in place through a compiled graph
        model = torch.compile(model)
    configure_deepspeed(accelerator, cfg.batch_size)  # no-op unless launched with a DeepSpeed config
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    # the loop splits each global batch across processes itself: one schedule step per optimizer step
    # (accelerate otherwise steps it num_processes times, decaying the LR that much faster)
    scheduler.split_batches = True
    model.train()

    rank, world = accelerator.process_index, accelerator.num_processes
    unwrapped = accelerator.unwrap_model(model)  # what methods' extra losses read (unwrapping per batch costs ~1 ms)
    step_optimizer, step_schedule = update_steppers(accelerator, optimizer, scheduler)
    guard = NonFiniteGuard(cfg.nonfinite, step, accelerator.device, total * cfg.grad_accum,
                           last_good=states.last_good if states is not None else None)
    resumed = Progress()
    if states is not None:  # restores model, optimizer, scheduler, RNG and the data position if a state exists
        resumed, log_fn = states.begin(model, optimizer, scheduler, log_fn, planned_steps=total, rows=len(rows),
                                       batch_size=cfg.batch_size, grad_accum=cfg.grad_accum, epochs=epochs,
                                       seed=seed, lr=cfg.lr)
    optimizer_steps, micro, skipped = resumed.optimizer_steps, resumed.micro, resumed.skipped
    tokens = torch.full((), float(resumed.tokens), device=accelerator.device)
    guard.skipped = skipped
    last_loss = resumed.last_loss
    progress = tqdm(total=total, initial=optimizer_steps, desc=f"step {step}",
                    disable=None if accelerator.is_main_process else True, dynamic_ncols=True, leave=False)
    epoch = resumed.epoch
    while optimizer_steps < total:
        for index, indices in enumerate(epoch_batches(batches, epoch, method.epoch_rows(epoch, len(batches.lengths)))):
            if epoch == resumed.epoch and index < resumed.next_batch:
                continue  # trained before the state this step resumed from
            shard = indices[rank::world]
            if not shard:
                continue
            batch = collate([rows[i] for i in shard], pad_id)
            batch = {k: v.to(accelerator.device, non_blocking=True) for k, v in batch.items()}
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                extra = method.extra_loss(unwrapped, optimizer_steps)
                if extra is not None:
                    loss = loss + extra
                guard.observe_loss(loss, epoch, index, micro)
                accelerator.backward(loss)
                if accelerator.sync_gradients:  # else gradients accumulate for the next micro-batch
                    norm = clip_gradients(accelerator, model, trainable, cfg.grad_clip) if cfg.grad_clip > 0 else None
                    guard.observe_gradients(norm, trainable)
                    update = not guard.before_update(optimizer_steps + 1)  # skip: drop this update
                    if update:
                        step_optimizer.step()
                        step_schedule.step()
                    step_optimizer.zero_grad(set_to_none=True)
            tokens += batch["attention_mask"].sum()
            micro += 1
            if not accelerator.sync_gradients:
                continue
            if not update:
                skipped = guard.skipped
                continue
            optimizer_steps += 1
            progress.update(1)
            if optimizer_steps % cfg.log_every == 0 or optimizer_steps == total:
                guard.check(optimizer_steps)
                last_loss = loss.detach().float().item()
                progress.set_postfix(loss=f"{last_loss:.3f}")
                if log_fn is not None:
                    log_fn({"time_step": step, "optimizer_step": optimizer_steps, "loss": last_loss,
                            "lr": scheduler.get_last_lr()[0], "tokens": int(tokens.item()) * world,
                            **({"skipped": skipped} if skipped else {})})
            if states is not None:  # a due mid-step state (or Ctrl-C: save, then TrainingInterrupted)
                states.after_optimizer_step(
                    optimizer_steps, total, lambda: Progress(epoch, index + 1, optimizer_steps, micro,
                                                             int(tokens.item()), skipped, last_loss),
                    model, optimizer, scheduler, check=lambda: guard.check(optimizer_steps))
            faults.point("optimizer_step")
            if optimizer_steps >= total:
                break
        epoch += 1
    guard.check(optimizer_steps)
    progress.close()
    seconds = time.perf_counter() - start
    accelerator.free_memory()  # drops accelerate's references between time steps (a gc pass: not training time)
    return StepResult(optimizer_steps=optimizer_steps, tokens=int(tokens.item()) * world,
                      final_loss=last_loss, seconds=seconds, skipped_batches=skipped)
