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
from evolve_train.data.few_shot import with_few_shot
from evolve_train.data.timeline import build_timeline
from evolve_train.errors import ConfigError
from evolve_train.evaluation.context import Shards, TrainingFormat
from evolve_train.evaluation.evaluator import EvalContext, check_eval_config, evaluate_checkpoint
from evolve_train.evaluation.evaluators.hygiene import preflight as hygiene_preflight, record_private
from evolve_train.evaluation.evaluators.matrix import INITIAL
from evolve_train.evaluation.initial_cache import InitialEvalCache
from evolve_train.evaluation.qa_adaptation import QAAdaptation
from evolve_train.evaluation.retrieval_index import preflight as retrieval_preflight
from evolve_train.evaluation.within_step import probe_for
from evolve_train.methods import Method, TokenizedHistory
from evolve_train.methods.averaging import WeightAverage, cpu_state
from evolve_train.models.source import check_model_source
from evolve_train.models.build import (
    build_text_format,
    build_model,
    load_model,
    load_tokenizer,
    n_parameters,
    train_tokenizer,
)
from evolve_train.reporting.summary import build_summary, format_summary_table
from evolve_train.tracking import build_logger
from evolve_train.tracking.disk import DiskLogger
from evolve_train.training import carry, faults, identity
from evolve_train.training.checkpoint import (
    RunState,
    ensure_writable,
    gathered_state_dict,
    preflight,
    remove_stale_tmp,
    save_checkpoint,
    step_dir,
)
from evolve_train.training.distributed import build_accelerator, sum_over_processes, train_sharded
from evolve_train.training.examples import collate
from evolve_train.training.loop import StepResult, train_time_step
from evolve_train.training.redact import redact_run
from evolve_train.training.step0_cache import Step0Cache
from evolve_train.training.telemetry import CountPositions, eval_flops, parameter_counts
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
        raise ConfigError(
            f"model.activation: unknown activation {cfg.model.activation!r} "
            "(a transformers ACT2FN name such as gelu_pytorch_tanh, gelu_new, relu)"
        )
    check_eval_config(cfg.eval)  # evaluator names, time slices
    Method(cfg.method)  # strategy names and combinations
    if "oracle" in cfg.method.strategies and cfg.data.keep_history:
        raise ConfigError(
            "method.strategies: 'oracle' trains on the union of the corpora of steps 0..k itself; "
            "with data.keep_history=true every earlier corpus would count twice (set it false)"
        )


def evaluates_initial(cfg: Config) -> bool:
    """``eval.eval_initial``, whose default (``null``) is on for a pretrained model, off for one built from config."""
    return bool(cfg.model.name_or_path) if cfg.eval.eval_initial is None else bool(cfg.eval.eval_initial)


def require_training_data(cfg: Config, timeline) -> None:
    """Training needs a corpus at every step; an evaluation-only timeline (``data=temporal_qa`` without
    ``data.train_files``) is for ``evolve-eval``."""
    empty = [step.name for step in timeline.steps if not len(step.pairs) and not len(step.texts)]
    if empty and cfg.data.kind == "temporal_qa" and not cfg.data.train_files:
        raise ConfigError(
            "data.train_files: no training files (give {step name: [files]} per time step, e.g. "
            "'+data.train_files.2019=[train_2019.jsonl]'); evaluating a model needs none: evolve-eval"
        )
    if empty:
        raise ConfigError(f"time step {empty[0]!r} has no training data (data.kind={cfg.data.kind})")


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
        raise ConfigError(
            f"{run_dir} already holds a run (steps/ or metrics.jsonl) and resume=false; "
            "choose another hydra.run.dir or delete it"
        )


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
        check_model_source(
            cfg.model.name_or_path
        )  # a missing path, a GGUF file or dir: one clear error, nothing written
        check_model_source(cfg.model.tokenizer, "model.tokenizer")
        self.run_dir = resolve_run_dir(cfg)
        self.state = RunState.load(self.run_dir)
        check_run_dir(self.run_dir, cfg.resume)
        # a changed result-affecting config: ConfigError before anything (even a log line) reaches the dir
        identity.check_resume(self.run_dir, cfg, self.state)
        identity.record(self.state, cfg)  # state.json carries the config from the first save on
        self._load_inputs()
        require_training_data(cfg, self.timeline)
        if cfg.trainer.num_threads > 0:
            torch.set_num_threads(cfg.trainer.num_threads)
        self.accelerator = build_accelerator(cfg.trainer, gradient_accumulation_steps=cfg.trainer.grad_accum)
        self.start = self._agreed_start()
        self._open_run_dir()
        self.model, self.tokenizer = self._initial_model()
        self.text_format = build_text_format(
            cfg.model, self.tokenizer
        )  # the model's text format (models/text_format.py)
        self.method = Method(cfg.method)
        self.method.load_state_dict(self.state.method_state)
        if self.start > 0:
            self.method.load_extra(self.model, step_dir(self.run_dir, self.start - 1))
        self.model.to(self.accelerator.device)
        self.optimizer_carry = self._optimizer_carry()
        self.averaging, self._raw = WeightAverage(cfg.method), None
        if self.averaging.enabled and self.start > 0:
            self._resume_average()
        if self.main:  # fail now, not at the first checkpoint: run dir writable, disk space for a checkpoint
            preflight(
                self.run_dir,
                self.model,
                len(self.timeline.steps) - self.start,
                cfg.trainer.save_every_n_steps,
                cfg.trainer.keep_last_states,
            )
        return self

    def _optimizer_carry(self) -> Optional[carry.OptimizerCarry]:
        """``trainer.optimizer_state=keep``: the AdamW state the next step starts from (the last complete step's)."""
        if self.cfg.trainer.optimizer_state != "keep":
            return None
        tensors = carry.load(self.run_dir, self.start - 1, carry.OPTIMIZER_FILE) if self.start > 0 else None
        if self.start > 0 and tensors is None:
            log.warning(
                "trainer.optimizer_state=keep: no optimizer state of step %d in %s; step %d starts with "
                "fresh AdamW moments",
                self.start - 1,
                carry.carry_dir(self.run_dir, self.start - 1),
                self.start,
            )
        return carry.OptimizerCarry(tensors)

    def _resume_average(self) -> None:
        """``method.average``: ``steps/<start-1>`` (loaded) holds the average; continue from the raw weights kept
        in ``train_state/carry/<start-1>/`` unless ``method.average_continue=average``."""
        self.averaging.average = cpu_state(self.model)
        if self.cfg.method.average_continue != "raw":
            return
        raw = carry.load(self.run_dir, self.start - 1, carry.RAW_FILE)
        if raw is None:
            raise RuntimeError(
                f"method.average: the raw weights of step {self.start - 1} are missing from "
                f"{carry.carry_dir(self.run_dir, self.start - 1)}; the run cannot continue from them "
                "(method.average_continue=average continues from the average)"
            )
        self.model.load_state_dict(raw)

    def _agreed_start(self) -> int:
        """The first step to train, as the main process reads ``state.json`` (broadcast: every rank agrees)."""
        start = [self.state.last_complete + 1]
        if self.accelerator.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            broadcast_object_list(start)
        return start[0]

    def _load_inputs(self) -> None:
        """The timeline and QA adaptation, validated, and the private-leak preflight: before anything is written."""
        self.timeline = with_few_shot(build_timeline(self.cfg.data), self.cfg.eval.few_shot)  # dev demonstrations
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
            carry.prune(run_dir, before=self.start - 1)  # what the step to train next needs is kept
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
            texts = itertools.chain(
                (t["text"] for t in first.texts),  # streamed: a corpus may exceed memory
                (p["input"] + " " + p["output"] for p in first.pairs),
            )
            tokenizer = train_tokenizer(texts, cfg.model.vocab_size, cfg.model.arch)
        model = build_model(cfg.model, tokenizer)
        log.info("model: %.2fM parameters", n_parameters(model) / 1e6)
        return model, tokenizer

    def _initial_weights(self):
        """The model before step 0 again, as :meth:`_initial_model` built it (same seed, same tokenizer; a
        pretrained model loaded again): where an oracle step starts (methods/oracle.py)."""
        set_seed(self.cfg.seed)
        return build_model(self.cfg.model, self.tokenizer).to(self.accelerator.device)

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
            if evaluates_initial(self.cfg) and self.start == 0:  # A_init (METRICS.md §3): checkpoint -1
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
            log.error(
                "%s",
                interrupt
                if deferred
                else f"interrupted (Ctrl-C); the completed steps in "
                f"{self.run_dir} are kept. Run the same command again to resume.",
            )
            raise SystemExit(interrupt.exit_code if deferred else 130) from None
        finally:
            self.close(ok)

    def train_step(self, step: int) -> StepResult:
        """Train time step ``step`` on its corpus (mixed and wrapped by the method); the model stays on
        the object, ready for :meth:`save`."""
        cfg = self.cfg
        set_seed(cfg.seed + step)
        self.active = self.method.at_step(step)  # step 0: plain full training unless method.at_step0
        if self.active.from_initial(step):  # the oracle: from the initial weights, not step-1's checkpoint
            self.model = self._initial_weights()
            set_seed(cfg.seed + step)
        examples = self._examples(step)
        self.model = self.active.prepare_model(self.model, step)
        cache = (
            Step0Cache.for_run(cfg, self.tokenizer, self.accelerator.num_processes, self.timeline.steps[0])
            if step == 0
            else None
        )
        keep = self.optimizer_carry is not None  # the cache holds no optimizer state: step 0 trains here
        cached = cache.load(cfg.model, self.accelerator, self.logger.log_train) if cache and not keep else None
        if cached:
            self.model, result = cached
        else:
            result = self._train(step, examples, cache)
        self.model = self.active.after_step(self.model, step, examples)
        self.results[step] = result
        return result

    def _examples(self, step: int):
        """Step ``step``'s tokenized examples, mixed by the method with earlier steps' (replay)."""
        tokens = TokenCache(resolve_cache_dir(self.cfg.data.cache_dir), self.text_format, self.accelerator)

        def tokenize(time_step):  # the rows of the tokenized cache (data.cache_dir), or encoded now
            return tokens.examples(time_step, self.cfg.data.objective, self.cfg.trainer.seq_len)

        history = TokenizedHistory(
            self.timeline.steps[:step], tokenize, self.text_format.pad_id, self.cfg.trainer.attention_reset
        )
        return self.active.mix_examples(step, tokenize(self.timeline.steps[step]), history)

    def _train(self, step: int, examples, cache: Optional[Step0Cache]) -> StepResult:
        cfg, accelerator = self.cfg, self.accelerator
        log_fn = cache.recording(self.logger.log_train) if cache else self.logger.log_train
        pad_id = self.text_format.pad_id
        with StepStates(
            self.run_dir,
            step,
            cfg.trainer.save_every_n_steps,
            cfg.trainer.keep_last_states,
            accelerator,
            method=self.active,
            resume=str(cfg.resume).lower() != "false",
        ) as states:
            self.model, result = train_sharded(
                accelerator,
                self.model,
                lambda model: train_time_step(
                    model,
                    examples,
                    step=step,
                    epochs=self._epochs(step),
                    cfg=cfg.trainer,
                    method=self.active,
                    accelerator=accelerator,
                    collate_fn=lambda rows: collate(rows, pad_id, cfg.trainer.attention_reset),
                    seed=cfg.seed + 1000 * step,
                    log_fn=log_fn,
                    states=states,
                    n_time_steps=len(self.timeline.steps),
                    optimizer_carry=self.optimizer_carry,
                    schedule_step=0 if self.active.from_initial(step) else step,
                    probe=probe_for(self.timeline, self.text_format, cfg.eval),
                ),
            )  # FSDP2: sharded while it trains
        if cache and self.main:
            cache.store(self.model, self.tokenizer, result, trained_by=str(self.run_dir))
        return result

    def _epochs(self, step: int) -> float:
        """Passes over step ``step``'s corpus: ``epochs_step0`` for step 0 and for a step trained from the initial
        weights (the oracle), else ``epochs``."""
        initial = step == 0 or self.active.from_initial(step)
        return self.cfg.trainer.epochs_step0 if initial else self.cfg.trainer.epochs

    def save(self, step: int) -> None:
        """Checkpoint ``steps/<step>/`` (full weights gathered under FSDP / DeepSpeed) and mark it trained."""
        self.accelerator.wait_for_everyone()
        # LoRA without save_merged: the adapter only; an average is full weights
        weights = self.active.saves_weights(step) or self.averaging.enabled
        if self.averaging.enabled:  # steps/<k> (and the evaluation) get the average; the raw weights are carried
            raw = cpu_state(self.accelerator.unwrap_model(self.model))
            self.model.load_state_dict(self.averaging.update(raw, step))
            self._raw = raw if self.cfg.method.average_continue == "raw" else None
        gathered = gathered_state_dict(self.accelerator, self.model) if weights else None  # a collective
        if self.main:
            carried = self._carried()
            if carried:  # before state.json marks the step trained (training/carry.py)
                carry.save(self.run_dir, step, carried)
            save_checkpoint(
                self.run_dir,
                step,
                self.model,
                self.tokenizer,
                extra_files=lambda d: self.active.save_extra(self.model, d),
                state_dict=gathered,
                weights=weights,
            )
            self.state.trained = sorted(set(self.state.trained) | {step})
            self.state.method_state = self.method.state_dict()
            self.state.save(self.run_dir)

    def _carried(self) -> dict:
        """What step k hands to step k+1 besides its checkpoint: ``{file name: tensors}`` (training/carry.py)."""
        files = {}
        if self.optimizer_carry is not None and self.optimizer_carry.tensors:
            files[carry.OPTIMIZER_FILE] = self.optimizer_carry.tensors
        if self._raw is not None:
            files[carry.RAW_FILE] = self._raw
        return files

    def evaluate(self, checkpoint: int, model=None) -> list[dict]:
        """Score ``checkpoint`` (the model on the object, or ``model``) on every set introduced so far;
        the rows go to ``metrics.jsonl`` and the loggers, and ``state.json`` marks the checkpoint evaluated.
        Every process evaluates its share of the prompts (evaluation/context.py: ``Shards``) and computes the
        same rows; the main process writes them."""
        model = model if model is not None else self.model
        eval_model = (
            self.qa_adaptation.adapted(model, self.text_format, checkpoint=checkpoint, accelerator=self.accelerator)
            if self.qa_adaptation and checkpoint >= 0
            else model
        )  # a copy; the chain is untouched
        rows = self._score(checkpoint, eval_model)
        if self.main:
            self.logger.log_eval(checkpoint, rows)
            if checkpoint >= 0:
                self.state.evaluated = sorted(set(self.state.evaluated) | {checkpoint})
                self.state.save(self.run_dir)
                prune_states(self.run_dir, through_step=checkpoint)
                carry.prune(self.run_dir, before=checkpoint)  # a rerun of step checkpoint+1 needs this one's
        model.train()
        raw = getattr(self, "_raw", None)  # None also for saved checkpoints evaluated without training (saved_eval.py)
        if model is self.model and raw is not None and checkpoint >= 0:  # the average was evaluated:
            self.model.load_state_dict(raw)  # the next step trains from the raw weights
            self._raw = None
        self.accelerator.wait_for_everyone()
        return rows

    def _score(self, checkpoint: int, model) -> list[dict]:
        if checkpoint == INITIAL and self.main:
            DiskLogger(self.run_dir).truncate_after(INITIAL - 1)  # rows an interrupted attempt left
        self.accelerator.wait_for_everyone()  # metrics.jsonl as the main process left it, for every reader
        shared = (
            InitialEvalCache.for_run(self.cfg, self.tokenizer, self.timeline, self.accelerator.num_processes)
            if checkpoint == INITIAL
            else None
        )  # one process: the sweep's other arms evaluated it already?
        stored = shared.load(self.run_dir) if shared else None
        if stored:
            rows = record_private(self.run_dir, self.timeline, self.cfg.eval, checkpoint, stored["rows"])
            return self._decorate(rows, checkpoint, stored["seconds"], stored["evaluated"])
        # every checkpoint in the run's precision (trainer.mixed_precision), whatever made the model: trained
        # here (accelerate patched its forward with autocast), the step-0 cache, a resume, eval_initial
        plain = self.accelerator.unwrap_model(model, keep_fp32_wrapper=False)
        ctx = EvalContext(
            model=plain,
            text_format=self.text_format,
            timeline=self.timeline,
            checkpoint=checkpoint,
            cfg=self.cfg.eval,
            run_dir=self.run_dir,
            shards=Shards.of(self.accelerator),
            writes=self.main,
            shared=self.eval_shared,
            training=self._training_format(),
        )
        start = time.perf_counter()
        with self.accelerator.autocast(), CountPositions(plain) as counted:  # evaluation's tokens (§11)
            scored = evaluate_checkpoint(ctx)
        rows = record_private(
            self.run_dir if self.main else None, self.timeline, self.cfg.eval, checkpoint, scored
        )  # private_evaluations.jsonl
        faults.point("evaluate")
        positions = sum_over_processes(self.accelerator, counted.positions)  # every rank scored a share (§11)
        evaluated = {"eval_tokens": positions, "eval_flops": eval_flops(parameter_counts(plain)[0], positions)}
        seconds = round(time.perf_counter() - start, 2)
        if shared:
            shared.store(self.run_dir, rows, seconds, evaluated)
        return self._decorate(rows, checkpoint, seconds, evaluated)

    def _training_format(self) -> TrainingFormat:
        cfg = self.cfg
        return TrainingFormat(str(cfg.data.objective), cfg.trainer.seq_len, cfg.trainer.attention_reset)

    def _decorate(
        self, rows: list[dict], checkpoint: int, eval_seconds: float, evaluated: Optional[dict] = None
    ) -> list[dict]:
        """Run metadata on every row: method, seed, the training that made the checkpoint, evaluation time."""
        result = self.results.get(checkpoint)
        if checkpoint == INITIAL:
            result = StepResult(optimizer_steps=0, tokens=0, final_loss=float("nan"), seconds=0.0)
        meta = {"method": self.cfg.method.name, "seed": self.cfg.seed, **(evaluated or {})}
        if result is not None:
            meta.update(
                train_seconds=round(result.seconds, 2),
                eval_seconds=eval_seconds,
                train_tokens=result.tokens,
                train_optimizer_steps=result.optimizer_steps,
                train_tokens_per_s=result.tokens_per_s,
                num_processes=self.accelerator.num_processes,
                optimizer_steps=result.optimizer_steps,
                loss_tokens=result.loss_tokens,
                train_flops=result.flops,
            )
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
