"""The evaluation half of a run: score a checkpoint on every set introduced so far, rows to ``metrics.jsonl``.

:class:`CheckpointEvaluation` is composed by the training run (``run.py``) and by the evaluation of saved
checkpoints (``saved_eval.py``); it owns the run dir's metric rows and the per-run shared state of the
evaluators. Every process evaluates its share of the prompts (``evaluation/context.py``: ``Shards``) and
computes the same rows; the main process writes them. Hooks (``training/hooks.py``) may answer a checkpoint's
rows from elsewhere (``stored_evaluation``) and see the rows scored (``on_scored``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

from evolve_train.evaluation.context import EvalContext, Shards, TrainingFormat
from evolve_train.evaluation.evaluator import evaluate_checkpoint
from evolve_train.evaluation.evaluators.hygiene import record_private
from evolve_train.evaluation.evaluators.matrix import INITIAL
from evolve_train.evaluation.precision import eval_autocast, evaluated_weights
from evolve_train.tracking.disk import DiskLogger
from evolve_train.training import faults
from evolve_train.training.distributed import sum_over_processes
from evolve_train.training.hooks import Hooks
from evolve_train.training.plan import StepResult, training_budget
from evolve_train.training.telemetry import CountPositions, eval_flops, parameter_counts

__all__ = ["INITIAL", "CheckpointEvaluation"]


class CheckpointEvaluation:
    """Scores checkpoints of one run dir; ``text_format`` and ``tokenizer`` are those of the model scored."""

    def __init__(self, cfg, run_dir: Path, timeline, qa_adaptation, accelerator, logger, state, hooks=None):
        self.cfg, self.run_dir, self.timeline, self.qa_adaptation = cfg, run_dir, timeline, qa_adaptation
        self.accelerator, self.logger, self.state = accelerator, logger, state
        self.hooks = hooks or Hooks()
        self.text_format = self.tokenizer = None
        self.shared: dict = {}
        """Built once per run, reused by every checkpoint's evaluation (``EvalContext.shared``)."""
        self.eval_precision: Optional[str] = None
        """The precision the last evaluation ran in (``evaluation/precision.py``); rows record it."""

    @property
    def main(self) -> bool:
        return self.accelerator.is_main_process

    def evaluate(self, checkpoint: int, model, result: Optional[StepResult] = None) -> list[dict]:
        """Score ``checkpoint`` (``model``; ``result``: the training that made it, if trained here); the rows go to
        ``metrics.jsonl`` and the loggers, and ``state.json`` marks the checkpoint evaluated."""
        eval_model = model
        if self.qa_adaptation and checkpoint >= 0:  # a copy; the chain is untouched
            eval_model = self.qa_adaptation.adapted(
                model, self.text_format, checkpoint=checkpoint, accelerator=self.accelerator
            )
        rows = self.score(checkpoint, eval_model, result)
        if self.main:
            self.logger.log_eval(checkpoint, rows)
            if checkpoint >= 0:
                self.state.evaluated = sorted(set(self.state.evaluated) | {checkpoint})
                self.state.save(self.run_dir)
        return rows

    def score(self, checkpoint: int, model, result: Optional[StepResult] = None) -> list[dict]:
        """The rows of ``checkpoint``: from a hook (``stored_evaluation``), or the evaluators run now."""
        if checkpoint == INITIAL and self.main:
            DiskLogger(self.run_dir).truncate_after(INITIAL - 1)  # rows an interrupted attempt left
        self.accelerator.wait_for_everyone()  # metrics.jsonl as the main process left it, for every reader
        stored = self.hooks.first("stored_evaluation", self, checkpoint)
        if stored:
            rows = record_private(
                self.run_dir if self.main else None, self.timeline, self.cfg.eval, checkpoint, stored["rows"]
            )
            return self.decorate(rows, checkpoint, result, stored["seconds"], stored["evaluated"])
        rows, seconds, evaluated = self._run_evaluators(checkpoint, model)
        self.hooks.call("on_scored", self, checkpoint, rows, seconds, evaluated)
        return self.decorate(rows, checkpoint, result, seconds, evaluated)

    def _run_evaluators(self, checkpoint: int, model) -> tuple[list[dict], float, dict]:
        # every checkpoint in eval.precision, whatever made the model: trained here (accelerate's autocast
        # wrapper is stripped), the step-0 cache, a resume, eval_initial (evaluation/precision.py)
        unwrapped = self.accelerator.unwrap_model(model, keep_fp32_wrapper=False)
        with evaluated_weights(self.cfg.eval.precision, unwrapped) as plain:  # itself, or a bf16 copy
            return self._run_evaluators_on(checkpoint, plain)

    def _run_evaluators_on(self, checkpoint: int, plain) -> tuple[list[dict], float, dict]:
        autocast, self.eval_precision = eval_autocast(self.cfg.eval.precision, self.accelerator, plain)
        ctx = EvalContext(
            model=plain,
            text_format=self.text_format,
            timeline=self.timeline,
            checkpoint=checkpoint,
            cfg=self.cfg.eval,
            run_dir=self.run_dir,
            shards=Shards.of(self.accelerator),
            writes=self.main,
            shared=self.shared,
            training=self.training_format(),
        )
        start = time.perf_counter()
        with autocast, CountPositions(plain) as counted:  # evaluation's tokens (§11)
            scored = evaluate_checkpoint(ctx)
        writer_dir = self.run_dir if self.main else None
        rows = record_private(writer_dir, self.timeline, self.cfg.eval, checkpoint, scored)  # private_evaluations
        faults.point("evaluate")
        positions = sum_over_processes(self.accelerator, counted.positions)  # every rank scored a share (§11)
        evaluated = {"eval_tokens": positions, "eval_flops": eval_flops(parameter_counts(plain)[0], positions)}
        return rows, round(time.perf_counter() - start, 2), evaluated

    def training_format(self) -> TrainingFormat:
        cfg = self.cfg
        return TrainingFormat(str(cfg.data.objective), cfg.trainer.seq_len, cfg.trainer.attention_reset)

    def decorate(
        self,
        rows: list[dict],
        checkpoint: int,
        result: Optional[StepResult],
        eval_seconds: float,
        evaluated: Optional[dict] = None,
    ) -> list[dict]:
        """Run metadata on every row: method, seed, the training that made the checkpoint, evaluation time."""
        if checkpoint == INITIAL:
            result = StepResult(optimizer_steps=0, tokens=0, final_loss=float("nan"), seconds=0.0)
        meta = {"method": self.cfg.method.name, "seed": self.cfg.seed, **(evaluated or {})}
        meta["mixed_precision"] = str(self.accelerator.mixed_precision)  # what `auto` resolved to here
        meta["eval_precision"] = self.eval_precision or str(self.cfg.eval.precision)
        processes = self.accelerator.num_processes
        if result is not None:
            meta.update(
                train_seconds=round(result.seconds, 2),
                eval_seconds=eval_seconds,
                train_tokens=result.tokens,
                train_optimizer_steps=result.optimizer_steps,
                train_tokens_per_s=result.tokens_per_s,
                num_processes=processes,
                optimizer_steps=result.optimizer_steps,
                loss_tokens=result.loss_tokens,
                train_flops=result.flops,
            )
            meta.update(result.extra)  # what hooks add (the mix's counts)
            if self.cfg.trainer.nonfinite == "skip":  # batches dropped for a non-finite loss/gradient
                meta["skipped_batches"] = result.skipped_batches
            if budget := training_budget(self.cfg.trainer):  # steps/tokens instead of epochs
                meta["train_budget"] = budget
        else:
            meta.update(eval_seconds=eval_seconds, num_processes=processes)
        for row in rows:
            row.update(meta)
        return rows
