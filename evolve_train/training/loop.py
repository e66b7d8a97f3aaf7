"""The training loop: one time step of continual pretraining, for every method.

Read top to bottom: :func:`train_time_step` takes the step's :class:`~evolve_train.training.plan.StepPlan` (what
the method plans: rows, epochs, learning rate, strategies) and builds a :class:`StepTrainer` (optimizer, schedule,
the non-finite guard and, on resume, the restored position), which runs epochs of length-grouped batches
(``trainer.batch_size`` rows, or up to ``trainer.tokens_per_batch`` padded tokens: :func:`make_batches`);
each micro-batch adds the strategies' extra loss. The run's hooks (``training/hooks.py``) are called when the
optimizer is built, before the first update, after every update and at the end. Nothing is read back to the
host per step: the loss, the loss-token count and the non-finite flags stay on the device and come back in one
transfer every ``log_every`` steps (:meth:`StepTrainer._read`), before a mid-step state is saved and at the end
of the step; the log row then gets the window's tokens/s, peak memory and MFU (``training/telemetry.py``; token
counts are host-side sums of row lengths). The loop knows nothing of the text format: the plan's ``collate``
turns rows into a batch. See docs/training.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from typing import Optional, Union

import numpy as np
import torch
from accelerate import Accelerator
from tqdm.auto import tqdm

from evolve_train.config import TrainerConfig
from evolve_train.errors import ConfigError
from evolve_train.models.attention import attention_implementation, check_packed_layout, flat_batch, packed_layout
from evolve_train.training import faults
from evolve_train.training.collectives import set_collective_timeout
from evolve_train.training.compile import compile_model, uncompile_blocks
from evolve_train.training.distributed import (
    clip_gradients,
    configure_deepspeed,
    is_plain,
    plain_forward,
    update_steppers,
)
from evolve_train.training.examples import LengthGroupedBatches, row_lengths
from evolve_train.training.loss import IGNORE, batch_loss, global_mean_scale, loss_token_count
from evolve_train.training.hooks import Hooks
from evolve_train.training.nonfinite import NonFiniteGuard, NonFiniteLossError  # noqa: F401  (re-exported)
from evolve_train.training.packing import TokenBudgetBatches
from evolve_train.training.plan import StepPlan, StepResult  # noqa: F401  (StepResult re-exported)
from evolve_train.training.progress import ProgressLines, has_terminal
from evolve_train.training.rows import TokenRows
from evolve_train.training.schedule import lr_factor, lr_lambda, warn_short_budget  # noqa: F401  (lr_lambda re-exported)
from evolve_train.training.telemetry import (
    Throughput,
    device_peak_flops,
    flops_per_token,
    parameter_counts,
    training_flops,
)
from evolve_train.training.train_state import Progress, StepStates


def planned_optimizer_steps(n_batches: int, epochs: float, grad_accum: int) -> int:
    return max(1, math.ceil(n_batches * epochs / grad_accum))


Batches = Union[LengthGroupedBatches, TokenBudgetBatches]
"""Either batching: ``lengths``, ``epoch(e)`` (global row indices), ``count(e)``, ``subset(lengths)``."""


def make_batches(cfg: TrainerConfig, lengths, seed: int, num_processes: int) -> Batches:
    """``trainer.tokens_per_batch`` padded tokens per process and micro-batch, or ``trainer.batch_size`` rows."""
    if cfg.tokens_per_batch > 0:
        return TokenBudgetBatches(lengths, cfg.tokens_per_batch, seed, num_processes)
    return LengthGroupedBatches(
        lengths, batch_size=cfg.batch_size * num_processes, seed=seed, num_processes=num_processes
    )


def epoch_batches(batches: Batches, epoch: int, rows) -> list[list[int]]:
    """The epoch's batches, restricted to ``rows`` when the method selects rows per epoch (replay decay)."""
    if rows is None:
        return batches.epoch(epoch)
    subset = batches.subset([batches.lengths[i] for i in rows])
    return [[rows[i] for i in batch] for batch in subset.epoch(epoch)]


def planned_steps_for_method(batches: Batches, epochs: float, grad_accum: int, strategies) -> int:
    """Optimizer steps for ``epochs`` passes, counting each epoch's own batches if the strategies select rows
    per epoch (``epoch_rows``) or the batch count varies by epoch (a token budget)."""
    n = len(batches.lengths)
    per_epoch = [strategies.epoch_rows(e, n) for e in range(math.ceil(epochs))]
    if all(rows is None for rows in per_epoch) and batches.same_count_every_epoch:
        return planned_optimizer_steps(len(batches), epochs, grad_accum)
    counts = [
        batches.count(e) if rows is None else batches.subset([batches.lengths[i] for i in rows]).count(e)
        for e, rows in enumerate(per_epoch)
    ]
    whole = int(epochs)
    total = sum(counts[:whole]) + (epochs - whole) * (counts[whole] if whole < len(counts) else 0)
    return max(1, math.ceil(total / grad_accum))


def train_time_step(
    plan: StepPlan,
    model: torch.nn.Module,
    accelerator: Accelerator,
    hooks: Optional[Hooks] = None,
    *,
    log_fn=None,
    states: Optional[StepStates] = None,
) -> StepResult:
    """Train ``model`` in place on the plan's rows (``plan.examples``) and return what it took.

    ``states`` (training/train_state.py) saves resumable mid-step states and restores the newest one;
    ``trainer.nonfinite`` guards every loss and gradient (training/nonfinite.py); the LR of every update is
    ``training/schedule.py``'s for (``plan.schedule_step``, update) scaled to ``plan.lr``; ``hooks``
    (training/hooks.py) are called at the loop's points; ``log_fn`` receives the training rows.
    """
    start = time.perf_counter()
    try:
        trainer = StepTrainer(plan, model, accelerator, hooks or Hooks())
        trainer.begin(log_fn, states)
        trainer.run()
        trainer.hooks.call("on_train_end", trainer)
    finally:
        uncompile_blocks(model)  # trainer.compile: evaluation and the next step see the plain model
    seconds = time.perf_counter() - start
    accelerator.free_memory()  # drops accelerate's references between time steps (a gc pass: not training time)
    return trainer.result(seconds)


class StepTrainer:
    """One time step's training: what it trains (model, optimizer, schedule), on what (rows in
    deterministic length-grouped batches), and where it stands (:class:`Progress`, restorable)."""

    def __init__(self, plan: StepPlan, model, accelerator: Accelerator, hooks: Hooks):
        self.plan, self.hooks, self.accelerator = plan, hooks, accelerator
        self.step, self.cfg, self.strategies = plan.step, plan.trainer, plan.strategies
        self.rows, self.collate_fn, self.epochs, self.seed = (
            TokenRows(plan.examples),
            plan.collate,
            plan.epochs,
            plan.seed,
        )
        self.lengths = row_lengths(self.rows)
        if not len(self.rows):
            raise ConfigError(
                f"time step {self.step}: no training rows (the step's data gave none under its objective); "
                "check the step's files and data.objective"
            )
        self.batches = make_batches(self.cfg, self.lengths, self.seed, accelerator.num_processes)
        self.total = self._planned_total()
        self.trainable = [p for p in model.parameters() if p.requires_grad]
        self.flat = check_attention_reset(self.cfg, model, self.rows)  # packed rows laid end to end (varlen)
        self.flops_per_token = flops_per_token(model, self.cfg.seq_len)
        self.n_params = parameter_counts(model)  # (N, N_trainable) for the step's FLOPs estimate (§11)
        self.forward_params = self.strategies.forward_parameters()  # a strategy's extra forward (LwF's teacher)
        self._prepare(model)

    def _planned_total(self) -> int:
        """Optimizer steps of the step: its epochs, or its token budget (in passes over the rows, fractional),
        capped or set by its step budget; at least one."""
        plan, grad_accum = self.plan, self.cfg.grad_accum
        if plan.max_tokens:
            self.epochs = plan.max_tokens / max(1, int(self.lengths.sum()))
            warn_short_budget(plan.schedule_step, plan.max_tokens, int(self.lengths.sum()))
        if plan.max_steps and not plan.max_tokens:
            return plan.max_steps
        total = planned_steps_for_method(self.batches, self.epochs, grad_accum, self.strategies)
        return min(total, plan.max_steps) if plan.max_steps else total

    def _prepare(self, model) -> None:
        cfg, accelerator, plan = self.cfg, self.accelerator, self.plan
        # trainer.nonfinite=skip drops a bad update on the device: the fused AdamW's found_inf (training/nonfinite.py)
        self.skip_on_device = cfg.nonfinite == "skip" and is_plain(accelerator)
        fused = accelerator.device.type == "cuda" or self.skip_on_device
        optimizer = torch.optim.AdamW(self.trainable, lr=plan.lr, weight_decay=cfg.weight_decay, fused=fused)
        factor = lr_factor(cfg, plan.schedule_step, self.total, plan.n_time_steps)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        model = plain_forward(model)  # one autocast layer from this prepare, whatever the model went through before
        if cfg.compile:  # per transformer block, before fully_shard (training/compile.py); undone after the step
            model = compile_model(model)
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
        self.hooks.call("on_optimizer_built", self)  # before a mid-step state (if any) is restored over it

    def begin(self, log_fn, states: Optional[StepStates]) -> None:
        """Restore the newest mid-step state of this step, if any (model, optimizer, schedule, RNG, data
        position), and set up the guard and counters from it."""
        self.states, self.log_fn = states, log_fn
        last_good = states.last_good if states is not None else None
        total_micro = self.total * self.cfg.grad_accum
        self.guard = NonFiniteGuard(self.cfg.nonfinite, self.step, self.accelerator.device, total_micro, last_good)
        self.progress = Progress()
        if states is not None:
            self.progress, self.log_fn = states.begin(
                self.model, self.optimizer, self.scheduler, log_fn, **self._fingerprint()
            )
        self.resumed_at = (self.progress.epoch, self.progress.next_batch)
        self.guard.skipped = self.progress.skipped
        self.short_timeout = False
        self.tokens = self.progress.tokens  # this process's real tokens (host ints: no device sync)
        self.all_tokens = self.tokens * self.accelerator.num_processes  # every process's, exact from here on
        device, cfg = self.accelerator.device, self.cfg
        peak = device_peak_flops(device, self.accelerator.mixed_precision, cfg.peak_flops)  # `auto` resolved
        self.throughput = Throughput(
            device, self.all_tokens, self.flops_per_token, peak, self.accelerator.num_processes
        )
        self.begin_tokens = self.all_tokens
        self.loss_tokens = self.progress.loss_tokens  # as of the last read; the newer ones are counted on the device
        self.new_loss_tokens = torch.zeros((), dtype=torch.long, device=device)
        self.read_at = -1  # the optimizer step of the last read
        self.lines = ProgressLines(
            cfg.progress_every_s,
            self.step,
            self.plan.n_time_steps,
            self.total,
            self.progress.optimizer_steps,
            enabled=self.accelerator.is_main_process and not has_terminal(),
        )
        self.hooks.call("on_train_start", self)

    def _fingerprint(self) -> dict:
        """What a mid-step state must match to be restored (training/train_state.py)."""
        cfg = self.cfg
        return dict(
            planned_steps=self.total,
            rows=len(self.rows),
            batch_size=cfg.batch_size,
            grad_accum=cfg.grad_accum,
            epochs=self.epochs,
            seed=self.seed,
            lr=self.plan.lr,
            batch_order=batch_order(self.batches),
            **plan_extras(cfg, packed=is_packed(self.rows), flat=self.flat),
        )

    def log(self, row: dict) -> None:
        """A training row (``train_log.jsonl`` and the loggers; a resumed step keeps the rows of its state)."""
        if self.log_fn is not None:
            self.log_fn(row)

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
            rows = self.strategies.epoch_rows(progress.epoch, len(self.batches.lengths))
            batches = epoch_batches(self.batches, progress.epoch, rows)
            if not batches:  # never loop without batches (and so without the updates a signal waits for)
                raise RuntimeError(
                    f"time step {self.step}: epoch {progress.epoch} has no batch ({len(self.rows)} rows, "
                    f"{len(rows) if rows is not None else 'all'} selected by the method); "
                    f"{progress.optimizer_steps} of {self.total} optimizer steps done"
                )
            for index, indices in enumerate(batches):
                if progress.epoch == self.resumed_at[0] and index < self.resumed_at[1]:
                    continue  # trained before the state this step resumed from
                shard = indices[self.accelerator.process_index :: self.accelerator.num_processes]
                self.all_tokens += int(self.lengths[indices].sum())
                if self.train_batch(index, shard):  # every process has rows (the batchings make sure)
                    break
            progress.epoch += 1
        self._read(None)  # a no-op read unless the last update's read was skipped over (one per step)
        self.bar.close()

    def train_batch(self, index: int, shard: list[int]) -> bool:
        """Forward, backward and (on a synced window) the update; True once the step's plan is done."""
        progress, accelerator = self.progress, self.accelerator
        rows = [self.rows[i] for i in shard]
        batch = flat_batch(rows) if self.flat else self.collate_fn(rows)
        batch = {k: to_device(v, accelerator.device) for k, v in batch.items()}
        self.new_loss_tokens += (batch["labels"] != IGNORE).sum()  # on the device, read with the log row
        # the global batch's token mean, as one process computes it (an integer all-reduce on the device)
        scale = (
            global_mean_scale(loss_token_count(batch, self.encoder_decoder), accelerator)
            if accelerator.num_processes > 1
            else None
        )
        with accelerator.accumulate(self.model):
            loss, extra = self._losses(batch)
            reported = loss  # the shard's mean: what is logged
            if scale is not None:
                loss = loss * scale.to(loss.dtype)
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

    def _losses(self, batch: dict):
        """The language-model loss of a micro-batch and the strategies' extra term (``None`` if none)."""
        strategies, step = self.strategies, self.progress.optimizer_steps
        if strategies.reads_outputs:  # a strategy reads the outputs (LwF): logits, or the chunked loss's inputs
            kept: list = []
            loss = batch_loss(self.model, self.unwrapped, batch, keep=kept)
            return loss, strategies.extra_loss(self.unwrapped, step, batch=batch, outputs=kept[0])
        loss = batch_loss(self.model, self.unwrapped, batch)  # chunked head and loss for large vocabularies
        return loss, strategies.extra_loss(self.unwrapped, step)

    def _update(self) -> bool:
        """Clip, check and apply the accumulated gradients; False when the guard drops the update on the host
        (``skip`` where it cannot be dropped on the device: one read per update)."""
        clip = self.cfg.grad_clip
        norm = clip_gradients(self.accelerator, self.model, self.trainable, clip) if clip > 0 else None
        self.guard.observe_gradients(norm, self.trainable)
        skip = self.guard.end_window()  # None with stop; the window's device flag with skip
        if skip is not None and not self.skip_on_device and self.guard.check(self.progress.optimizer_steps + 1):
            self.step_optimizer.zero_grad(set_to_none=True)
            return False
        self._step(skip if self.skip_on_device else None)
        self.step_optimizer.zero_grad(set_to_none=True)
        return True

    def _step(self, skip: Optional[torch.Tensor]) -> None:
        """The update; where ``skip`` (a device flag) is 1 the fused AdamW leaves parameters, moments and step
        counts as they were (its ``found_inf``), and the next read winds the schedule back."""
        if skip is None:
            self.step_optimizer.step()
        else:
            self.step_optimizer.found_inf = skip
            try:
                self.step_optimizer.step()
            finally:
                del self.step_optimizer.found_inf
        self.step_schedule.step()

    def _after_update(self, index: int, loss: torch.Tensor) -> bool:
        """Count the update, log every ``log_every`` steps, call the hooks, save a due mid-step state."""
        progress = self.progress
        progress.optimizer_steps += 1
        self.bar.update(1)
        steps = progress.optimizer_steps
        read = self._log_due(steps) or (self.states is not None and self.states.due(steps, self.total))
        if read:
            self._read(loss)  # a skipped update found here is taken back from optimizer_steps
            if self._log_due(progress.optimizer_steps):
                self._log()
        # a progress line (due every progress_every_s seconds, not per step) reads this step's loss itself
        self.lines.update(progress.optimizer_steps, lambda: float(loss.detach()), self.all_tokens - self.begin_tokens)
        self.hooks.call("on_optimizer_step", self)  # before a due state is saved, so the state carries its rows
        if not self.short_timeout:  # from the first update on, a hang ends the job sooner (training/collectives.py)
            set_collective_timeout(self.cfg.train_timeout_s)
            self.short_timeout = True
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
                check=lambda: self._read(loss),
                agree=read,
            )
        faults.point("optimizer_step")
        return progress.optimizer_steps >= self.total

    def _log_due(self, steps: int) -> bool:
        return steps % self.cfg.log_every == 0 or steps == self.total

    def _read(self, loss: Optional[torch.Tensor]) -> None:
        """The loop's one host read (a no-op when this optimizer step was read already): the last micro-batch's
        ``loss`` (if given), the loss tokens counted since the last read and the non-finite guard's flags, in
        one transfer. The guard raises (``stop``) or counts the updates it dropped (``skip``), which are taken
        back from the optimizer steps and the schedule."""
        progress = self.progress
        if self.read_at == progress.optimizer_steps:
            return
        head = [self.new_loss_tokens.double().reshape(1)]
        if loss is not None:
            head.insert(0, loss.detach().double().reshape(1))
        values = torch.cat([*head, self.guard.pending()]).tolist()
        if loss is not None:
            progress.last_loss, values = values[0], values[1:]
        self.loss_tokens += int(values[0])
        self.new_loss_tokens = torch.zeros_like(self.new_loss_tokens)
        dropped = self.guard.read(values[1:], progress.optimizer_steps)
        progress.skipped = self.guard.skipped
        if dropped:
            progress.optimizer_steps -= dropped
            self.bar.update(-dropped)
            wind_back(self.step_schedule, dropped)
        self.read_at = progress.optimizer_steps

    def _log(self) -> None:
        progress = self.progress
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


def wind_back(scheduler, steps: int) -> None:
    """Undo ``steps`` steps of a torch LR schedule (its learning rates recomputed for the earlier step)."""
    scheduler.last_epoch -= steps + 1
    scheduler.step()


def to_device(value, device: torch.device):
    """A batch entry on ``device`` (tensors; the varlen layout's ``max_length_*`` are host integers)."""
    return value.to(device, non_blocking=True) if isinstance(value, torch.Tensor) else value


def batch_order(batches: Batches) -> str:
    """A digest of the first epoch's global batches (row indices, in order): equal for two numbers of processes
    exactly when they train the same rows in the same global batches, which a mid-step state saved by one needs to
    continue on the other (training/train_state.py)."""
    digest = hashlib.sha256()
    for batch in batches.epoch(0):
        digest.update(np.asarray(batch, dtype=np.int64).tobytes() + b"|")
    return digest.hexdigest()[:16]


def plan_extras(cfg: TrainerConfig, packed: bool, flat: bool = False) -> dict:
    """What the resume fingerprint adds to the plan for the batching options (only where they apply, so the
    states of runs without them keep their fingerprint)."""
    return {
        **({"tokens_per_batch": cfg.tokens_per_batch} if cfg.tokens_per_batch else {}),
        **({"attention_reset": cfg.attention_reset} if packed else {}),
        **({"packed_attention": "position_ids"} if flat else {}),
    }


def is_packed(rows) -> bool:
    """Whether ``rows`` are packed documents (they carry per-document ``position_ids``)."""
    return bool(len(rows)) and "position_ids" in rows[0]


def check_attention_reset(cfg: TrainerConfig, model, rows) -> bool:
    """A clear error, before training, when packed rows must not attend across documents and the model's
    attention implementation would let them in the ``trainer.packed_attention`` layout; True when the rows
    train padding-free, laid end to end (``models/attention.py``)."""
    if not cfg.attention_reset or not is_packed(rows):
        return False
    implementation = attention_implementation(model)
    layout = packed_layout(cfg.packed_attention, implementation)
    check_packed_layout(layout, implementation)
    return layout == "position_ids"
