"""The run object: continual pretraining over the time steps of a timeline, step by step.

:class:`ContinualRun` (in the spirit of torchtune's recipe classes) keeps the run's state on the object:

- ``setup()``: validate config and data (before anything is written), open the run dir, restore
  ``state.json`` (resume), build the accelerator, loggers, model and method;
- ``train_step(k)``: train time step k with the one loop (or load step 0 from the sweep's step-0 cache);
- ``save(k)``: the checkpoint ``steps/<k>/`` (atomic) and ``state.json``;
- ``evaluate(k)``: score a checkpoint on every set introduced so far, rows to ``metrics.jsonl`` and the
  loggers (a saved checkpoint can be evaluated without training: :meth:`ContinualRun.load_checkpoint`);
- ``close(ok)``.

``run()`` calls them in order for every step not yet done; ``train(cfg)`` is the entry point
(``train.py`` calls it through Hydra).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from pathlib import Path
from typing import Optional

import torch
from accelerate.utils import set_seed
from omegaconf import DictConfig, OmegaConf

from evolve_train.config import Config
from evolve_train.data.cache import resolve_cache_dir
from evolve_train.data.timeline import build_timeline
from evolve_train.errors import ConfigError
from evolve_train.evaluation.context import Shards
from evolve_train.evaluation.evaluator import EvalContext, check_eval_config, evaluate_checkpoint
from evolve_train.evaluation.evaluators.hygiene import preflight as hygiene_preflight, record_private
from evolve_train.evaluation.evaluators.matrix import INITIAL
from evolve_train.evaluation.qa_adaptation import QAAdaptation
from evolve_train.evaluation.retrieval_index import preflight as retrieval_preflight
from evolve_train.methods import Method, TokenizedHistory
from evolve_train.models.build import (build_adapter, build_model, load_model, load_tokenizer,
                                       n_parameters, train_tokenizer)
from evolve_train.reporting.summary import build_summary, format_summary_table
from evolve_train.tracking import build_logger
from evolve_train.tracking.disk import DiskLogger
from evolve_train.training import faults, identity
from evolve_train.training.checkpoint import (RunState, ensure_writable, gathered_state_dict, preflight,
                                              remove_stale_tmp, save_checkpoint, step_dir)
from evolve_train.training.distributed import build_accelerator, train_sharded
from evolve_train.training.examples import collate
from evolve_train.training.loop import StepResult, train_time_step
from evolve_train.training.redact import redact_run
from evolve_train.training.step0_cache import Step0Cache
from evolve_train.training.token_cache import TokenCache
from evolve_train.training.train_state import StepStates, TrainingInterrupted, prune_states

log = logging.getLogger(__name__)


def validate(cfg: Config) -> None:
    """Checks across sections and registries; each error names the key. (Choices and ranges of single
    fields are checked by the typed schema itself, ``evolve_train/config.py``, when the config is built.)"""
    if cfg.resume not in ("auto", "false", "False"):
        raise ConfigError(f"resume must be 'auto' or false, got {cfg.resume!r}")
    from transformers.activations import ACT2FN

    if cfg.model.activation not in ACT2FN:
        raise ConfigError(f"model.activation: unknown activation {cfg.model.activation!r} "
                          "(a transformers ACT2FN name such as gelu_pytorch_tanh, gelu_new, relu)")
    check_eval_config(cfg.eval)  # evaluator names, time slices
    Method(cfg.method)  # strategy names and combinations


def resolve_run_dir(cfg: Config) -> Path:
    if cfg.run_dir:
        return Path(cfg.run_dir)
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    raise ConfigError("run_dir is not set (and no Hydra run dir exists)")


def check_run_dir(run_dir: Path, resume: str) -> None:
    has_work = any((run_dir / name).exists() for name in ("steps", "metrics.jsonl", "train_state"))
    if str(resume).lower() == "false" and has_work:
        raise ConfigError(f"{run_dir} already holds a run (steps/ or metrics.jsonl) and resume=false; "
                          "choose another hydra.run.dir or delete it")


class ContinualRun:
    """One run: ``setup()``, then per step ``train_step(k)``, ``save(k)``, ``evaluate(k)``; ``close(ok)``."""

    def __init__(self, cfg: Config | DictConfig):
        self.cfg: Config = OmegaConf.to_object(cfg) if isinstance(cfg, DictConfig) else cfg
        self.results: dict[int, StepResult] = {}
        """What training each step took (its metric rows carry it); absent for a step trained earlier."""
        self.eval_shared: dict = {}
        """Built once per run, reused by every checkpoint's evaluation (``EvalContext.shared``)."""

    # ----------------------------------------------------------------------------------- setup

    def setup(self) -> "ContinualRun":
        """Everything that can fail on bad input fails here, before the run dir is written."""
        cfg = self.cfg
        validate(cfg)
        self.run_dir = resolve_run_dir(cfg)
        self.state = RunState.load(self.run_dir)
        check_run_dir(self.run_dir, cfg.resume)
        # a changed result-affecting config: ConfigError before anything (even a log line) reaches the dir
        identity.check_resume(self.run_dir, cfg, self.state)
        identity.record(self.state, cfg)  # state.json carries the config from the first save on
        self._load_inputs()
        if cfg.trainer.num_threads > 0:
            torch.set_num_threads(cfg.trainer.num_threads)
        self.accelerator = build_accelerator(cfg.trainer, gradient_accumulation_steps=cfg.trainer.grad_accum)
        self.start = self._agreed_start()
        self._open_run_dir()
        self.model, self.tokenizer = self._initial_model()
        self.adapter = build_adapter(cfg.model, self.tokenizer)  # the model's text format (models/adapter.py)
        self.method = Method(cfg.method)
        self.method.load_state_dict(self.state.method_state)
        if self.start > 0:
            self.method.load_extra(self.model, step_dir(self.run_dir, self.start - 1))
        self.model.to(self.accelerator.device)
        if self.main:  # fail now, not at the first checkpoint: run dir writable, disk space for a checkpoint
            preflight(self.run_dir, self.model, len(self.timeline.steps) - self.start,
                      cfg.trainer.save_every_n_steps, cfg.trainer.keep_last_states)
        return self

    def _agreed_start(self) -> int:
        """The first step to train, as the main process reads ``state.json`` (broadcast: every rank agrees)."""
        start = [self.state.last_complete + 1]
        if self.accelerator.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            broadcast_object_list(start)
        return start[0]

    def _load_inputs(self) -> None:
        """The timeline and QA adaptation, validated, and the private-leak preflight: before anything is written."""
        self.timeline = build_timeline(self.cfg.data)
        self.qa_adaptation = QAAdaptation.from_config(self.cfg, self.timeline)  # None when off
        hygiene_preflight(self.cfg, self.timeline, self.qa_adaptation)  # no private eval item in training/prompts
        if "retrieval" in self.cfg.eval.evaluators:  # passage files read now: a bad one fails before training
            retrieval_preflight(self.cfg.eval.retrieval, self.timeline)

    def _start_loggers(self) -> None:
        backends = ["disk"] + [name for name in self.cfg.logger.backends if name != "disk"]  # metrics.jsonl always
        self.logger = build_logger(backends, run_dir=self.run_dir, cfg=self.cfg) if self.main else build_logger([])

    @property
    def main(self) -> bool:
        return self.accelerator.is_main_process

    def _open_run_dir(self) -> None:
        """Clean what an interrupted attempt left, redact secrets, start the loggers (main process writes)."""
        cfg, run_dir = self.cfg, self.run_dir
        if self.main:
            ensure_writable(run_dir)  # mkdir + a probe write: a clear error before anything else
            self.state.save(run_dir)  # the config, now: a changed command cannot resume even a mid-step-0 state
            for stale in remove_stale_tmp(run_dir):
                log.warning("removed an incomplete checkpoint left by an interrupted run: %s", stale)
            prune_states(run_dir, through_step=self.start - 1)  # states of finished steps (docs/reliability.md)
            redact_run(dataclasses.asdict(cfg))  # secrets out of .hydra/*.yaml and sys.argv before loggers start
        self._start_loggers()
        if self.main:
            if self.start > 0:
                log.info("resuming %s after step %d", run_dir, self.start - 1)
            DiskLogger(run_dir).truncate_after(self.start - 1)  # rows of an interrupted attempt

    def _initial_model(self):
        cfg = self.cfg
        if self.start > 0:
            return self.load_checkpoint(self.start - 1)
        set_seed(cfg.seed)
        if cfg.model.tokenizer or cfg.model.name_or_path:
            tokenizer = load_tokenizer(cfg.model.tokenizer or cfg.model.name_or_path, cfg.model)
        else:
            first = self.timeline.steps[0]
            texts = itertools.chain((t["text"] for t in first.texts),  # streamed: a corpus may exceed memory
                                    (p["input"] + " " + p["output"] for p in first.pairs))
            tokenizer = train_tokenizer(texts, cfg.model.vocab_size, cfg.model.arch)
        model = build_model(cfg.model, tokenizer)
        log.info("model: %.2fM parameters", n_parameters(model) / 1e6)
        return model, tokenizer

    def load_checkpoint(self, step: int):
        """``(model, tokenizer)`` of the saved checkpoint ``steps/<step>/``."""
        path = str(step_dir(self.run_dir, step))
        return load_model(path, self.cfg.model), load_tokenizer(path, self.cfg.model)

    # ----------------------------------------------------------------------------------- the steps

    def run(self) -> dict:
        """Every remaining step (train, save, evaluate), then the summary; resumable after any interruption."""
        self.setup()
        ok = False
        try:
            if self.cfg.eval.eval_initial and self.start == 0:  # A_init (METRICS.md §3): checkpoint -1
                self.evaluate(INITIAL)
            for step in range(self.start, len(self.timeline.steps)):
                self.train_step(step)
                self.save(step)
                self.evaluate(step)
            summary = self.summarize()
            ok = True
            return summary
        except KeyboardInterrupt as interrupt:  # Ctrl-C / SIGTERM: resumable (mid-step state, or the last step)
            deferred = isinstance(interrupt, TrainingInterrupted)
            log.error("%s", interrupt if deferred else f"interrupted (Ctrl-C); the completed steps in "
                      f"{self.run_dir} are kept. Run the same command again to resume.")
            raise SystemExit(interrupt.exit_code if deferred else 130) from None
        finally:
            self.close(ok)

    def train_step(self, step: int) -> StepResult:
        """Train time step ``step`` on its corpus (mixed and wrapped by the method); the model stays on
        the object, ready for :meth:`save`."""
        cfg = self.cfg
        set_seed(cfg.seed + step)
        self.active = self.method.at_step(step)  # step 0: plain full training unless method.at_step0
        examples = self._examples(step)
        self.model = self.active.prepare_model(self.model, step)
        cache = (Step0Cache.for_run(cfg, self.tokenizer, self.accelerator.num_processes, self.timeline.steps[0])
                 if step == 0 else None)
        cached = cache.load(cfg.model, self.accelerator, self.logger.log_train) if cache else None
        if cached:
            self.model, result = cached
        else:
            result = self._train(step, examples, cache)
        self.model = self.active.after_step(self.model, step, examples)
        self.results[step] = result
        return result

    def _examples(self, step: int):
        """Step ``step``'s tokenized examples, mixed by the method with earlier steps' (replay)."""
        tokens = TokenCache(resolve_cache_dir(self.cfg.data.cache_dir), self.adapter, self.accelerator)

        def tokenize(time_step):  # the rows of the tokenized cache (data.cache_dir), or encoded now
            return tokens.examples(time_step, self.cfg.data.objective, self.cfg.trainer.seq_len)
        history = TokenizedHistory(self.timeline.steps[:step], tokenize, self.adapter.pad_id,
                                   self.cfg.trainer.attention_reset)
        return self.active.mix_examples(step, tokenize(self.timeline.steps[step]), history)

    def _train(self, step: int, examples, cache: Optional[Step0Cache]) -> StepResult:
        cfg, accelerator = self.cfg, self.accelerator
        log_fn = cache.recording(self.logger.log_train) if cache else self.logger.log_train
        pad_id = self.adapter.pad_id
        with StepStates(self.run_dir, step, cfg.trainer.save_every_n_steps, cfg.trainer.keep_last_states,
                        accelerator, method=self.active, resume=str(cfg.resume).lower() != "false") as states:
            self.model, result = train_sharded(accelerator, self.model, lambda model: train_time_step(
                model, examples, step=step, epochs=cfg.trainer.epochs_step0 if step == 0 else cfg.trainer.epochs,
                cfg=cfg.trainer, method=self.active, accelerator=accelerator,
                collate_fn=lambda rows: collate(rows, pad_id, cfg.trainer.attention_reset),
                seed=cfg.seed + 1000 * step, log_fn=log_fn, states=states))  # FSDP2: sharded while it trains
        if cache and self.main:
            cache.store(self.model, self.tokenizer, result, trained_by=str(self.run_dir))
        return result

    def save(self, step: int) -> None:
        """Checkpoint ``steps/<step>/`` (full weights gathered under FSDP / DeepSpeed) and mark it trained."""
        self.accelerator.wait_for_everyone()
        weights = self.active.saves_weights(step)  # LoRA without save_merged: the adapter only
        gathered = gathered_state_dict(self.accelerator, self.model) if weights else None  # a collective
        if self.main:
            save_checkpoint(self.run_dir, step, self.model, self.tokenizer,
                            extra_files=lambda d: self.active.save_extra(self.model, d), state_dict=gathered,
                            weights=weights)
            self.state.trained = sorted(set(self.state.trained) | {step})
            self.state.method_state = self.method.state_dict()
            self.state.save(self.run_dir)

    def evaluate(self, checkpoint: int, model=None) -> list[dict]:
        """Score ``checkpoint`` (the model on the object, or ``model``) on every set introduced so far;
        the rows go to ``metrics.jsonl`` and the loggers, and ``state.json`` marks the checkpoint evaluated.
        Every process evaluates its share of the prompts (evaluation/context.py: ``Shards``) and computes the
        same rows; the main process writes them."""
        model = model if model is not None else self.model
        eval_model = (self.qa_adaptation.adapted(model, self.adapter, checkpoint=checkpoint,
                                                 accelerator=self.accelerator)
                      if self.qa_adaptation and checkpoint >= 0 else model)  # a copy; the chain is untouched
        rows = self._score(checkpoint, eval_model)
        if self.main:
            self.logger.log_eval(checkpoint, rows)
            if checkpoint >= 0:
                self.state.evaluated = sorted(set(self.state.evaluated) | {checkpoint})
                self.state.save(self.run_dir)
                prune_states(self.run_dir, through_step=checkpoint)
        model.train()
        self.accelerator.wait_for_everyone()
        return rows

    def _score(self, checkpoint: int, model) -> list[dict]:
        if checkpoint == INITIAL and self.main:
            DiskLogger(self.run_dir).truncate_after(INITIAL - 1)  # rows an interrupted attempt left
        self.accelerator.wait_for_everyone()  # metrics.jsonl as the main process left it, for every reader
        # every checkpoint in the run's precision (trainer.mixed_precision), whatever made the model: trained
        # here (accelerate patched its forward with autocast), the step-0 cache, a resume, eval_initial
        plain = self.accelerator.unwrap_model(model, keep_fp32_wrapper=False)
        ctx = EvalContext(model=plain, adapter=self.adapter, timeline=self.timeline, checkpoint=checkpoint,
                          cfg=self.cfg.eval, run_dir=self.run_dir, shards=Shards.of(self.accelerator),
                          writes=self.main, shared=self.eval_shared)
        start = time.perf_counter()
        with self.accelerator.autocast():
            scored = evaluate_checkpoint(ctx)
        rows = record_private(self.run_dir if self.main else None, self.timeline, self.cfg.eval, checkpoint,
                              scored)  # private_evaluations.jsonl
        faults.point("evaluate")
        return self._decorate(rows, checkpoint, round(time.perf_counter() - start, 2))

    def _decorate(self, rows: list[dict], checkpoint: int, eval_seconds: float) -> list[dict]:
        """Run metadata on every row: method, seed, the training that made the checkpoint, evaluation time."""
        result = self.results.get(checkpoint)
        if checkpoint == INITIAL:
            result = StepResult(optimizer_steps=0, tokens=0, final_loss=float("nan"), seconds=0.0)
        meta = {"method": self.cfg.method.name, "seed": self.cfg.seed}
        if result is not None:
            meta.update(train_seconds=round(result.seconds, 2), eval_seconds=eval_seconds,
                        train_tokens=result.tokens, train_tokens_per_s=result.tokens_per_s,
                        num_processes=self.accelerator.num_processes)
            if self.cfg.trainer.nonfinite == "skip":  # batches dropped for a non-finite loss/gradient
                meta["skipped_batches"] = result.skipped_batches
        else:
            meta.update(eval_seconds=eval_seconds, num_processes=self.accelerator.num_processes)
        for row in rows:
            row.update(meta)
        return rows

    def summarize(self) -> dict:
        """``summary.json`` and the step x set table (printed by the main process)."""
        summary = build_summary(self.run_dir, self.timeline, self.cfg)
        if self.main:
            self.logger.log_summary(summary)
            print(format_summary_table(summary))
        return summary

    def close(self, ok: bool) -> None:
        logger = getattr(self, "logger", None)
        if logger is not None:
            logger.close(ok)
        accelerator = getattr(self, "accelerator", None)
        if accelerator is not None:
            accelerator.wait_for_everyone()
            accelerator.end_training()
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()  # without it, multi-process runs may abort at exit


def train(cfg: Config | DictConfig) -> dict:
    """Run the whole timeline; returns the summary (also written to ``summary.json``)."""
    return ContinualRun(cfg).run()
