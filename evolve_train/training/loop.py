"""The training loop: one time step of continual pretraining, for every method.

Read top to bottom: :func:`train_time_step` builds a :class:`StepTrainer` (optimizer, schedule, the
non-finite guard and, on resume, the restored position), which runs epochs of length-grouped batches
(``trainer.batch_size`` rows, or up to ``trainer.tokens_per_batch`` padded tokens: :func:`make_batches`);
each micro-batch adds the method's extra loss. The loss is read back to the host only every
``log_every`` steps, and the log row then gets the window's tokens/s, peak memory and MFU
(``training/telemetry.py``; token counts are host-side sums of row lengths). The loop knows nothing of the
text format: ``collate_fn`` turns rows into a batch. See docs/training.md.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Callable, Optional, Union

import torch
from accelerate import Accelerator
from tqdm.auto import tqdm

from evolve_train.config import TrainerConfig
from evolve_train.methods import Method
from evolve_train.training import faults
from evolve_train.training.carry import OptimizerCarry
from evolve_train.training.distributed import clip_gradients, configure_deepspeed, update_steppers
from evolve_train.training.examples import LengthGroupedBatches, row_lengths
from evolve_train.training.loss import batch_loss, global_mean_scale, loss_token_count
from evolve_train.training.nonfinite import NonFiniteGuard, NonFiniteLossError  # noqa: F401  (re-exported)
from evolve_train.training.packing import TokenBudgetBatches
from evolve_train.training.rows import TokenRows
from evolve_train.training.schedule import lr_factor, lr_lambda  # noqa: F401  (lr_lambda re-exported)
from evolve_train.training.telemetry import (
    Throughput,
    device_peak_flops,
    flops_per_token,
    parameter_counts,
    training_flops,
)
from evolve_train.training.train_state import Progress, StepStates


@dataclass
class StepResult:
    optimizer_steps: int
    tokens: int
    final_loss: float
    seconds: float
    skipped_batches: int = 0
    tokens_per_s: float = 0.0
    """Real (non-padding) tokens of all processes trained by this attempt at the step, per second of it."""
    loss_tokens: int = 0
    """Of ``tokens``, the positions with a label (METRICS.md §11)."""
    flops: float = 0.0
    """Training FLOPs estimate of the step (``telemetry.training_flops``)."""


def planned_optimizer_steps(n_batches: int, epochs: float, grad_accum: int) -> int:
    return max(1, math.ceil(n_batches * epochs / grad_accum))


Batches = Union[LengthGroupedBatches, TokenBudgetBatches]
"""Either batching: ``lengths``, ``epoch(e)`` (global row indices), ``count(e)``, ``subset(lengths)``."""


def make_batches(cfg: TrainerConfig, lengths, seed: int, num_processes: int) -> Batches:
    """``trainer.tokens_per_batch`` padded tokens per process and micro-batch, or ``trainer.batch_size`` rows."""
    if cfg.tokens_per_batch > 0:
        return TokenBudgetBatches(lengths, cfg.tokens_per_batch, seed, num_processes)
    return LengthGroupedBatches(lengths, batch_size=cfg.batch_size * num_processes, seed=seed)


def epoch_batches(batches: Batches, epoch: int, rows) -> list[list[int]]:
    """The epoch's batches, restricted to ``rows`` when the method selects rows per epoch (replay decay)."""
    if rows is None:
        return batches.epoch(epoch)
    subset = batches.subset([batches.lengths[i] for i in rows])
    return [[rows[i] for i in batch] for batch in subset.epoch(epoch)]


def planned_steps_for_method(batches: Batches, epochs: float, grad_accum: int, method) -> int:
    """Optimizer steps for ``epochs`` passes, counting each epoch's own batches if the method varies them
    (or, under a token budget, if the batch count varies by epoch)."""
    n = len(batches.lengths)
    per_epoch = [method.epoch_rows(e, n) for e in range(math.ceil(epochs))]
    if all(rows is None for rows in per_epoch) and isinstance(batches, LengthGroupedBatches):
        return planned_optimizer_steps(len(batches), epochs, grad_accum)
    counts = [
        batches.count(e) if rows is None else batches.subset([batches.lengths[i] for i in rows]).count(e)
        for e, rows in enumerate(per_epoch)
    ]
    whole = int(epochs)
    total = sum(counts[:whole]) + (epochs - whole) * (counts[whole] if whole < len(counts) else 0)
    return max(1, math.ceil(total / grad_accum))


def train_time_step(
    model: torch.nn.Module,
    examples,
    *,
    step: int,
    epochs: float,
    cfg: TrainerConfig,
    method: Method,
    accelerator: Accelerator,
    collate_fn: Callable[[list], dict],
    seed: int,
    log_fn=None,
    states: StepStates | None = None,
    n_time_steps: int = 1,
    optimizer_carry: OptimizerCarry | None = None,
    schedule_step: int | None = None,
    probe=None,
) -> StepResult:
    """Train ``model`` in place on one time step's tokenized ``examples``.

    ``collate_fn`` pads a list of rows into a batch (the text format's); ``states``
    (training/train_state.py) saves resumable mid-step states and restores the newest one;
    ``trainer.nonfinite`` guards every loss and gradient (training/nonfinite.py); the LR of every update is
    ``training/schedule.py``'s for (``schedule_step``, default ``step``, of ``n_time_steps``, update); ``optimizer_carry``
    (``trainer.optimizer_state=keep``, training/carry.py) starts AdamW from the previous step's state and
    receives this step's final one; ``probe`` (optional, ``evaluation/within_step.py``) is asked for a row every
    ``probe.every`` optimizer steps (and before the first).
    """
    start = time.perf_counter()
    trainer = StepTrainer(
        model,
        TokenRows(examples),
        step=step,
        epochs=epochs,
        cfg=cfg,
        method=method,
        accelerator=accelerator,
        collate_fn=collate_fn,
        seed=seed,
        n_time_steps=n_time_steps,
        optimizer_carry=optimizer_carry,
        schedule_step=schedule_step,
    )
    trainer.probe = probe
    trainer.begin(log_fn, states)
    trainer.run()
    if optimizer_carry is not None:
        optimizer_carry.capture(trainer.unwrapped, trainer.optimizer, sharded=accelerator.is_fsdp2)
    seconds = time.perf_counter() - start
    accelerator.free_memory()  # drops accelerate's references between time steps (a gc pass: not training time)
    return trainer.result(seconds)


class StepTrainer:
    """One time step's training: what it trains (model, optimizer, schedule), on what (rows in
    deterministic length-grouped batches), and where it stands (:class:`Progress`, restorable)."""

    def __init__(
        self,
        model,
        rows,
        *,
        step: int,
        epochs: float,
        cfg: TrainerConfig,
        method: Method,
        accelerator: Accelerator,
        collate_fn,
        seed: int,
        n_time_steps: int = 1,
        optimizer_carry: OptimizerCarry | None = None,
        schedule_step: int | None = None,
    ):
        self.n_time_steps, self.optimizer_carry = n_time_steps, optimizer_carry
        self.schedule_step = step if schedule_step is None else schedule_step  # whose LR curve this step runs
        self.step, self.cfg, self.method, self.accelerator = step, cfg, method, accelerator
        self.rows, self.collate_fn, self.epochs, self.seed = rows, collate_fn, epochs, seed
        self.lengths = row_lengths(rows)
        self.batches = make_batches(cfg, self.lengths, seed, accelerator.num_processes)
        self.total = planned_steps_for_method(self.batches, epochs, cfg.grad_accum, method)
        self.trainable = [p for p in model.parameters() if p.requires_grad]
        check_attention_reset(cfg, model, rows)
        self.flops_per_token = flops_per_token(model, cfg.seq_len)
        self.n_params = parameter_counts(model)  # (N, N_trainable) for the step's FLOPs estimate (§11)
        self.forward_params = method.forward_parameters()  # a strategy's extra forward per token (LwF's teacher)
        self.probe = None
        self._prepare(model)

    def _prepare(self, model) -> None:
        cfg, accelerator = self.cfg, self.accelerator
        fused = accelerator.device.type == "cuda"
        optimizer = torch.optim.AdamW(self.trainable, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lr_factor(cfg, self.schedule_step, self.total, self.n_time_steps)
        )
        if cfg.compile:  # trains the same parameters in place through a compiled graph
            model = torch.compile(model)
        configure_deepspeed(accelerator, cfg.batch_size)  # no-op unless launched with a DeepSpeed config
        self.model, self.optimizer, self.scheduler = accelerator.prepare(model, optimizer, scheduler)
        # the loop splits each global batch across processes itself: one schedule step per optimizer step
        # (accelerate otherwise steps it num_processes times, decaying the LR that much faster)
        self.scheduler.split_batches = True
        if accelerator.is_fsdp2:  # fully_shard replaced the parameters by sharded DTensors
            self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.model.train()
        self.unwrapped = accelerator.unwrap_model(self.model)  # what extra losses read (~1 ms per unwrap)
        self.encoder_decoder = bool(getattr(getattr(self.unwrapped, "config", None), "is_encoder_decoder", False))
        self.step_optimizer, self.step_schedule = update_steppers(accelerator, self.optimizer, self.scheduler)
        if self.optimizer_carry is not None:  # before a mid-step state (if any) is restored over it
            self.optimizer_carry.restore(self.unwrapped, self.optimizer, sharded=accelerator.is_fsdp2)

    def begin(self, log_fn, states: Optional[StepStates]) -> None:
        """Restore the newest mid-step state of this step, if any (model, optimizer, schedule, RNG, data
        position), and set up the guard and counters from it."""
        self.states, self.log_fn = states, log_fn
        self.guard = NonFiniteGuard(
            self.cfg.nonfinite,
            self.step,
            self.accelerator.device,
            self.total * self.cfg.grad_accum,
            last_good=states.last_good if states is not None else None,
        )
        self.progress = Progress()
        if states is not None:
            self.progress, self.log_fn = states.begin(
                self.model,
                self.optimizer,
                self.scheduler,
                log_fn,
                planned_steps=self.total,
                rows=len(self.rows),
                batch_size=self.cfg.batch_size,
                grad_accum=self.cfg.grad_accum,
                epochs=self.epochs,
                seed=self.seed,
                lr=self.cfg.lr,
                **plan_extras(self.cfg, packed=is_packed(self.rows)),
            )
        self.resumed_at = (self.progress.epoch, self.progress.next_batch)
        self.guard.skipped = self.progress.skipped
        self.tokens = self.progress.tokens  # this process's real tokens (host ints: no device sync)
        self.all_tokens = self.tokens * self.accelerator.num_processes  # every process's, exact from here on
        self.throughput = Throughput(
            self.accelerator.device,
            self.all_tokens,
            self.flops_per_token,
            device_peak_flops(self.accelerator.device, self.cfg.mixed_precision, self.cfg.peak_flops),
            self.accelerator.num_processes,
        )
        self.begin_tokens = self.all_tokens
        self.loss_tokens = self.progress.loss_tokens
        if self.probe is not None and self.progress.optimizer_steps == 0:
            self._probe()  # before the first update: the start of the within-step curve

    def run(self) -> None:
        """Epochs of batches until the planned number of optimizer steps."""
        progress = self.progress
        self.bar = tqdm(
            total=self.total,
            initial=progress.optimizer_steps,
            desc=f"step {self.step}",
            disable=None if self.accelerator.is_main_process else True,
            dynamic_ncols=True,
            leave=False,
        )
        while progress.optimizer_steps < self.total:
            rows = self.method.epoch_rows(progress.epoch, len(self.batches.lengths))
            for index, indices in enumerate(epoch_batches(self.batches, progress.epoch, rows)):
                if progress.epoch == self.resumed_at[0] and index < self.resumed_at[1]:
                    continue  # trained before the state this step resumed from
                shard = indices[self.accelerator.process_index :: self.accelerator.num_processes]
                self.all_tokens += int(self.lengths[indices].sum())
                if shard and self.train_batch(index, shard):
                    break
            progress.epoch += 1
        self.guard.check(progress.optimizer_steps)
        self.bar.close()

    def train_batch(self, index: int, shard: list[int]) -> bool:
        """Forward, backward and (on a synced window) the update; True once the step's plan is done."""
        progress, accelerator = self.progress, self.accelerator
        batch = self.collate_fn([self.rows[i] for i in shard])
        self.loss_tokens += int((batch["labels"] != -100).sum())  # host tensor: no device sync
        # the global batch's token mean, as one process computes it (one integer all-reduce; 1.0 alone)
        scale = (
            global_mean_scale(loss_token_count(batch, self.encoder_decoder), accelerator)
            if accelerator.num_processes > 1
            else 1.0
        )
        batch = {k: v.to(accelerator.device, non_blocking=True) for k, v in batch.items()}
        with accelerator.accumulate(self.model):
            if self.method.reads_outputs:  # a strategy reads the logits (LwF): the full head
                outputs = self.model(**batch, use_cache=False)  # no KV cache in training (packed ids need none)
                loss = outputs.loss
                extra = self.method.extra_loss(self.unwrapped, progress.optimizer_steps, batch=batch, outputs=outputs)
                del outputs  # the logits are not held through the backward
            else:
                loss = batch_loss(self.model, self.unwrapped, batch)  # the head only where labels need it (loss.py)
                extra = self.method.extra_loss(self.unwrapped, progress.optimizer_steps)
            reported = loss  # the shard's mean: what is logged
            if scale != 1.0:
                loss = loss * scale
            if extra is not None:
                loss = loss + extra
                reported = reported + extra
            self.guard.observe_loss(reported, progress.epoch, index, progress.micro)
            accelerator.backward(loss)
            updated = self._update() if accelerator.sync_gradients else False
        self.tokens += int(self.lengths[shard].sum())
        progress.micro += 1
        if not accelerator.sync_gradients:
            return False
        if not updated:
            progress.skipped = self.guard.skipped
            return False
        return self._after_update(index, reported)

    def _update(self) -> bool:
        """Clip, check and apply the accumulated gradients; False when the guard drops the update."""
        clip = self.cfg.grad_clip
        norm = clip_gradients(self.accelerator, self.model, self.trainable, clip) if clip > 0 else None
        self.guard.observe_gradients(norm, self.trainable)
        update = not self.guard.before_update(self.progress.optimizer_steps + 1)  # skip: drop this update
        if update:
            self.step_optimizer.step()
            self.step_schedule.step()
        self.step_optimizer.zero_grad(set_to_none=True)
        return update

    def _after_update(self, index: int, loss: torch.Tensor) -> bool:
        """Count the update, log every ``log_every`` steps, save a due mid-step state."""
        progress = self.progress
        progress.optimizer_steps += 1
        self.bar.update(1)
        if progress.optimizer_steps % self.cfg.log_every == 0 or progress.optimizer_steps == self.total:
            self._log(loss)
        if self.probe is not None and progress.optimizer_steps % self.probe.every == 0:
            self._probe()  # before a due state is saved, so the state carries the row
        if self.states is not None:  # a due mid-step state (or Ctrl-C: save, then TrainingInterrupted)
            self.states.after_optimizer_step(
                progress.optimizer_steps,
                self.total,
                lambda: dataclasses.replace(
                    progress, next_batch=index + 1, tokens=self.tokens, loss_tokens=self.loss_tokens, rows=[]
                ),
                self.model,
                self.optimizer,
                self.scheduler,
                check=lambda: self.guard.check(progress.optimizer_steps),
            )
        faults.point("optimizer_step")
        return progress.optimizer_steps >= self.total

    def _log(self, loss: torch.Tensor) -> None:
        progress = self.progress
        self.guard.check(progress.optimizer_steps)
        progress.last_loss = loss.detach().float().item()
        self.bar.set_postfix(loss=f"{progress.last_loss:.3f}")
        if self.log_fn is not None:
            self.log_fn(
                {
                    "time_step": self.step,
                    "optimizer_step": progress.optimizer_steps,
                    "loss": progress.last_loss,
                    "lr": self.scheduler.get_last_lr()[0],
                    "tokens": self.tokens * self.accelerator.num_processes,
                    **self.throughput.window(self.all_tokens),
                    **({"skipped": progress.skipped} if progress.skipped else {}),
                }
            )

    def _probe(self) -> None:
        """The within-step probe's row (logged with the training rows, so a resumed step keeps it)."""
        row = self.probe(self.unwrapped, self.step, self.progress.optimizer_steps)
        self.model.train()
        if self.log_fn is not None:
            self.log_fn(row)

    def result(self, seconds: float) -> StepResult:
        world = self.accelerator.num_processes
        return StepResult(
            optimizer_steps=self.progress.optimizer_steps,
            tokens=self.tokens * world,
            final_loss=self.progress.last_loss,
            seconds=seconds,
            skipped_batches=self.progress.skipped,
            tokens_per_s=round((self.all_tokens - self.begin_tokens) / max(seconds, 1e-9), 1),
            loss_tokens=self.loss_tokens * world,
            flops=training_flops(*self.n_params, self.tokens * world, self.forward_params),
        )


def plan_extras(cfg: TrainerConfig, packed: bool) -> dict:
    """What the resume fingerprint adds to the plan for the batching options (only where they apply, so the
    states of runs without them keep their fingerprint)."""
    return {
        **({"tokens_per_batch": cfg.tokens_per_batch} if cfg.tokens_per_batch else {}),
        **({"attention_reset": cfg.attention_reset} if packed else {}),
    }


def is_packed(rows) -> bool:
    """Whether ``rows`` are packed documents (they carry per-document ``position_ids``)."""
    return bool(len(rows)) and "position_ids" in rows[0]


RESET_ATTENTION = ("eager", "sdpa", "flex_attention")
"""Attention implementations that make packed rows block-diagonal from ``position_ids`` alone
(``transformers.masking_utils``); flash-attention kernels only do so for a single flattened row."""


def check_attention_reset(cfg: TrainerConfig, model, rows) -> None:
    """A clear error, before training, when packed rows must not attend across documents and the model's
    attention implementation would let them."""
    if not cfg.attention_reset or not is_packed(rows):
        return
    implementation = getattr(getattr(model, "config", None), "_attn_implementation", None) or "eager"
    if implementation not in RESET_ATTENTION:
        raise ValueError(
            f"trainer.attention_reset=true needs one of the attention implementations "
            f"{', '.join(RESET_ATTENTION)} (model.attn_implementation is {implementation!r}): set "
            "model.attn_implementation=sdpa or trainer.attention_reset=false"
        )
