"""The run object: continual pretraining over the time steps of a timeline, step by step.

:class:`ContinualRun` (in the spirit of torchtune's recipe classes) reads top to bottom:

- ``setup()``: validate config and data (before anything is written), open the run dir, restore
  ``state.json`` (resume), build the accelerator, loggers, model, method and hooks;
- for every step not yet done: ``plan = method.plan(k)`` (what the step trains: ``training/plan.py``),
  ``train_step(plan)`` (the one loop, ``training/loop.py``), ``save(k)`` (the checkpoint ``steps/<k>/``, atomic,
  and ``state.json``), ``evaluate(k)`` (the evaluation half, ``evaluation/checkpoints.py``: rows to
  ``metrics.jsonl`` and the loggers);
- ``close(ok)``.

Everything optional around the steps is a
run hook (``training/hooks.py``; the built-in ones in ``evolve_train/hooks/``), called at fixed points; a method
changes what a step trains through its plan. ``train(cfg)`` is the entry point (``train.py`` calls it through
Hydra).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Optional

import torch
from accelerate.utils import set_seed
from omegaconf import DictConfig, OmegaConf

from evolve_train.config import Config
from evolve_train.data.objective import check_objectives
from evolve_train.errors import ConfigError, EvolveTrainError
from evolve_train.evaluation.checkpoints import INITIAL, CheckpointEvaluation
from evolve_train.evaluation.evaluator import check_eval_config
from evolve_train.evaluation.inputs import load_inputs
from evolve_train.hooks import build_hooks
from evolve_train.methods import Method, TokenizedHistory
from evolve_train.methods.lora import step0_policy
from evolve_train.models.build import (
    build_model,
    build_text_format,
    load_line,
    load_model,
    load_tokenizer,
    n_parameters,
    run_tokenizer,
)
from evolve_train.models.source import check_model_source
from evolve_train.reporting.summary import build_summary, format_summary_table
from evolve_train.tracking import build_logger
from evolve_train.tracking.disk import DiskLogger
from evolve_train.training import carry, identity
from evolve_train.training.collectives import agreed_signal, end_process_group, set_collective_timeout
from evolve_train.training.preflight import run_preflight as memory_preflight
from evolve_train.training.checkpoint import (
    RunState,
    ensure_writable,
    gathered_state_dict,
    preflight,
    remove_stale_tmp,
    save_checkpoint,
    step_dir,
)
from evolve_train.training.distributed import build_accelerator, train_sharded
from evolve_train.training.examples import collate
from evolve_train.training.loop import train_time_step
from evolve_train.training.plan import StepPlan, StepResult
from evolve_train.training.redact import redact_run
from evolve_train.training.signals import REPEAT_WINDOW_S, SIGNAL_NAMES, DeferredSignals, submitit_signal
from evolve_train.training.token_cache import step_tokenizer
from evolve_train.training.train_state import StepStates, TrainingInterrupted, prune_states
from evolve_train.utils.host_memory import resident_gib

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
    Method(cfg.method).check_config(cfg)  # strategy names and combinations, and each strategy's own checks


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


def start_loggers(cfg: Config, run_dir: Path, main: bool):
    """The run's loggers (``metrics.jsonl`` always; the main process writes, the others log nothing)."""
    backends = ["disk"] + [name for name in cfg.logger.backends if name != "disk"]
    return build_logger(backends, run_dir=run_dir, cfg=cfg) if main else build_logger([])


def summarize(evaluation: CheckpointEvaluation) -> dict:
    """``summary.json`` and the step x set table (printed by the main process)."""
    summary = build_summary(evaluation.run_dir, evaluation.timeline, evaluation.cfg)
    if evaluation.main:
        evaluation.logger.log_summary(summary)
        print(format_summary_table(summary))
    return summary


def process_index() -> int:
    """This process's global rank (torchrun's ``RANK``; 0 in a single process)."""
    return int(os.environ.get("RANK", "0") or 0)


def log_on_main_only(rank: int) -> None:
    """Only the main process logs INFO: the others log warnings and errors (console and ``train.log``), so
    a multi-process run's log reads as one process's."""
    if rank != 0:
        logging.getLogger().setLevel(logging.WARNING)


def hand_over(handler, signum: int) -> None:
    """Call the handler the run deferred ``signum`` from (submitit's: checkpoint and requeue on rank 0, which
    exits there), now that every process stopped at the same point with its state saved."""
    if callable(handler):
        log.warning("every process stopped with its state saved: submitit requeues the job")
        handler(signum, None)


def shut_down(logger, accelerator, ok: bool, agreed: Optional[bool] = None) -> None:
    """Close the loggers (``ok``: the run finished) and the accelerator, whatever set-up got to build.

    ``agreed`` (default ``ok``): every process ends the same way (finished, or stopped together by a signal
    at the same point); only then a barrier and the process group's orderly end. After a failure there is no
    collective and no ``destroy_process_group`` (which waits for pending collectives): the other processes may
    sit in another collective, or be gone, and either would hang the job until the collective timeout. The
    failing process aborts its NCCL communicators and exits at once (non-zero), and the launcher (torchrun,
    ``srun --kill-on-bad-exit``) ends the others (``training/collectives.py: end_process_group``)."""
    agreed = ok if agreed is None else agreed
    if logger is not None:
        logger.close(ok)
    end_process_group(accelerator, agreed)


class ContinualRun:
    """One run: ``setup()``, then per step plan, ``train_step``, ``save``, ``evaluate``; ``close(ok)``."""

    def __init__(self, cfg: Config | DictConfig):
        self.cfg: Config = OmegaConf.to_object(cfg) if isinstance(cfg, DictConfig) else cfg
        self.results: dict[int, StepResult] = {}
        """What training each step took (its metric rows carry it); absent for a step trained earlier."""

    # ----------------------------------------------------------------------------------- setup

    def setup(self) -> "ContinualRun":
        """Everything that can fail on bad input fails here, before the run dir is written."""
        cfg = self.cfg
        validate(cfg)
        policy = step0_policy(cfg.method.name, cfg.method.strategies, cfg.method.at_step0)
        if policy is not None and process_index() == 0:  # the run's first line: what trains at step 0
            log.info(policy)
        check_model_source(cfg.model.name_or_path)  # a missing path, a GGUF file or dir: one clear error
        check_model_source(cfg.model.tokenizer, "model.tokenizer")
        self.run_dir = resolve_run_dir(cfg)
        self.state = RunState.load(self.run_dir)
        check_run_dir(self.run_dir, cfg.resume)
        # a changed result-affecting config: ConfigError before anything (even a log line) reaches the dir
        identity.check_resume(self.run_dir, cfg, self.state)
        identity.record(self.state, cfg)  # state.json carries the config from the first save on
        self.timeline, self.qa_adaptation = load_inputs(cfg)
        require_training_data(cfg, self.timeline)
        check_objectives(cfg, self.timeline)  # an objective that does not fit a step's data: before training
        if cfg.trainer.num_threads > 0:
            torch.set_num_threads(cfg.trainer.num_threads)
        self.accelerator = build_accelerator(cfg.trainer, gradient_accumulation_steps=cfg.trainer.grad_accum)
        log_on_main_only(self.accelerator.process_index)
        memory_preflight(cfg, self.accelerator)  # before any weights load: a step that cannot fit stops here
        self.start = self._agreed_start()
        self.hooks = build_hooks(cfg)
        self._open_run_dir()
        self.model, self.tokenizer = self._initial_model()
        self.text_format = build_text_format(cfg.model, self.tokenizer)  # models/text_format.py
        self.method = Method(cfg.method)
        self.method.load_state_dict(self.state.method_state)
        self.hooks.load_state_dict(self.state.hook_state)
        if self.start > 0:
            self.method.load_extra(self.model, step_dir(self.run_dir, self.start - 1))
        self.model.to(self.accelerator.device)
        self.evaluation = self._evaluation()
        self.hooks.call("on_run_start", self)
        if self.main:  # fail now, not at the first checkpoint: run dir writable, disk space for a checkpoint
            steps_left = len(self.timeline.steps) - self.start
            preflight(
                self.run_dir, self.model, steps_left, cfg.trainer.save_every_n_steps, cfg.trainer.keep_last_states
            )
        return self

    def _evaluation(self) -> CheckpointEvaluation:
        evaluation = CheckpointEvaluation(
            self.cfg,
            self.run_dir,
            self.timeline,
            self.qa_adaptation,
            self.accelerator,
            self.logger,
            self.state,
            hooks=self.hooks,
        )
        evaluation.text_format, evaluation.tokenizer = self.text_format, self.tokenizer
        return evaluation

    def _agreed_start(self) -> int:
        """The first step to train, as the main process reads ``state.json`` (broadcast: every rank agrees).
        A step trained but not evaluated (stopped during its evaluation) is ``pending``: evaluated, not
        retrained; training starts after it."""
        start = [self.state.last_complete + 1]
        if self.accelerator.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            broadcast_object_list(start)
        self.pending = start[0] if start[0] in self.state.trained else None
        if self.pending is not None:
            saved = self.state.results.get(str(self.pending))
            if saved is not None:
                self.results[self.pending] = StepResult(**saved)
            return start[0] + 1
        return start[0]

    @property
    def last_complete(self) -> int:
        """The last step trained and evaluated before this attempt (-1: none)."""
        return (self.start if self.pending is None else self.pending) - 1

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
            prune_states(run_dir, through_step=self.start - 1)  # states of trained steps (docs/reliability.md)
            carry.prune(run_dir, before=self.start - 1)  # what the step to train next needs is kept
            redact_run(dataclasses.asdict(cfg))  # secrets out of .hydra/*.yaml and sys.argv before loggers start
        self.logger = start_loggers(cfg, run_dir, self.main)
        if self.main:
            if self.pending is not None:
                log.info("resuming %s: step %d is trained, its evaluation runs again", run_dir, self.pending)
            elif self.start > 0:
                log.info("resuming %s after step %d", run_dir, self.start - 1)
            DiskLogger(run_dir).truncate_after(self.last_complete, self.start - 1)  # rows of an interrupted attempt

    def _initial_model(self):
        """The model the run starts from, on the run's device, with a log line of what it cost in host memory."""
        cfg, device, before = self.cfg, self.accelerator.device, resident_gib()
        if self.start > 0:
            source = f"steps/{self.start - 1}"
            model, tokenizer = self.load_checkpoint(self.start - 1)
        else:
            source = cfg.model.name_or_path or f"config (model.arch={cfg.model.arch})"
            set_seed(cfg.seed)
            tokenizer = run_tokenizer(cfg.model, self.timeline.steps[0])
            model = build_model(cfg.model, tokenizer, device)
        log.info("model: %.2fM parameters from %s", n_parameters(model) / 1e6, source)
        log.info(load_line(model, device, before, resident_gib()))
        return model, tokenizer

    def initial_weights(self):
        """The model before step 0 again, as :meth:`_initial_model` built it (same seed, same tokenizer; a
        pretrained model loaded again): where a step planned ``from_initial`` starts."""
        set_seed(self.cfg.seed)
        return build_model(self.cfg.model, self.tokenizer, self.accelerator.device)

    def load_checkpoint(self, step: int):
        """``(model, tokenizer)`` of the saved checkpoint ``steps/<step>/``, read onto the run's device."""
        path = str(step_dir(self.run_dir, step))
        model = load_model(path, self.cfg.model, device=self.accelerator.device)
        return model, load_tokenizer(path, self.cfg.model)

    # ----------------------------------------------------------------------------------- the steps

    def run(self) -> dict:
        """Every remaining step (plan, train, save, evaluate), then the summary; resumable after any interruption.

        Ctrl-C and SIGTERM (and submitit's requeue) are deferred for the whole run: inside training to the end
        of the optimizer step in progress (a mid-step state is saved there), elsewhere to the next boundary
        (after set-up, after a step's examples and samples, after its checkpoint, after its evaluation). Every
        process stops at the same point, and the rerun redoes no completed work."""
        requeue = submitit_signal()  # a submitit job's preemption signal: deferred too, handed over once stopped
        self.signals = DeferredSignals(notify=self._on_signal, extra=(requeue,) if requeue else ())
        self.signals.install()
        ok = agreed = False
        stopped_by = None
        try:
            self.setup()
            self._stop_if_signalled("after set-up, before training")
            if (
                evaluates_initial(self.cfg) and self.start == 0
            ):  # A_init (docs/metrics.md#3-continual-learning-matrix): checkpoint -1
                self.evaluate(INITIAL)
                self._stop_if_signalled("after the initial model's evaluation")
            if self.pending is not None:  # trained and checkpointed, not evaluated: evaluated now, not retrained
                self.evaluate(self.pending)
                self._stop_if_signalled(f"after step {self.pending}'s evaluation")
            for step in range(self.start, len(self.timeline.steps)):
                self.train_step(self.plan(step))
                self.save(step)
                self._stop_if_signalled(f"after step {step}'s checkpoint, before its evaluation")
                self.evaluate(step)
                self._stop_if_signalled(f"after step {step}'s evaluation")
            summary = summarize(self.evaluation)
            ok = agreed = True
            return summary
        except TrainingInterrupted as interrupt:  # every process stopped here: resumable
            agreed, stopped_by = True, interrupt.signum
            log.error("%s", interrupt)
            raise SystemExit(interrupt.exit_code) from None
        except KeyboardInterrupt:  # a second Ctrl-C: at once
            log.error(
                "interrupted (Ctrl-C); the completed steps in %s are kept. Run the same command again to resume.",
                getattr(self, "run_dir", "the run dir"),
            )
            raise SystemExit(130) from None
        except EvolveTrainError:
            raise  # one clear line (cli/errors.py)
        except BaseException as error:
            if not isinstance(error, SystemExit):
                log.exception("the run failed in process %d: %s", process_index(), error)
            raise
        finally:
            self.signals.restore()
            self.close(ok, agreed)
            if stopped_by is not None and stopped_by == requeue:
                hand_over(self.signals.handlers.get(requeue), requeue)

    def _on_signal(self, signum: int) -> None:
        log.warning(
            "%s: stopping at the next safe point (the end of the optimizer step in progress, or of the "
            "checkpoint, evaluation or sampling in progress); a second signal, more than %.0f s later, stops at once",
            SIGNAL_NAMES[signum],
            REPEAT_WINDOW_S,
        )

    def _stop_if_signalled(self, where: str) -> None:
        """Stop every process here (:class:`TrainingInterrupted`) once a deferred signal reached any of them
        (a collective: every process calls it at the same point)."""
        signum = agreed_signal(self.signals.received, getattr(self, "accelerator", None))
        if signum:
            raise TrainingInterrupted(
                f"interrupted ({SIGNAL_NAMES[signum]}) {where}; the completed work in {self.run_dir} is kept. "
                "Run the same command again to resume.",
                signum,
            )

    def plan(self, step: int) -> StepPlan:
        """The method's plan of time step ``step`` (``Method.plan``), with the text format's batches."""
        cfg = self.cfg
        plan = self.method.plan(step, cfg.trainer, len(self.timeline.steps), cfg.seed)
        pad_id, reset = self.text_format.pad_id, cfg.trainer.attention_reset
        plan.collate = lambda rows: collate(rows, pad_id, reset)
        return plan

    def train_step(self, plan: StepPlan) -> StepResult:
        """Train the plan's step on its corpus (mixed by the method; or take it from a hook); the model stays
        on the object, ready for :meth:`save`."""
        step, active = plan.step, plan.strategies
        set_seed(self.cfg.seed + step)
        self.active = active
        if plan.from_initial:  # a retrain from the initial weights, not step-1's checkpoint
            self.model = self.initial_weights()
            set_seed(self.cfg.seed + step)
        plan.examples = self.examples(plan)
        if hasattr(self, "signals"):  # a signal while sampling or tokenizing: the step starts on the rerun
            self._stop_if_signalled(f"after step {step}'s examples (and samples), before its training")
        self.model = active.prepare_model(self.model, step)
        loaded = self.hooks.first("load_step", self, plan)
        if loaded:
            self.model, result = loaded
        else:
            result = self._train(plan)
        self.model = active.after_step(self.model, step, plan.examples)
        self.results[step] = result
        return result

    def examples(self, plan: StepPlan):
        """The plan's tokenized examples: its step's, mixed by the method with earlier steps'."""
        cfg = self.cfg
        tokenize = step_tokenizer(cfg, self.text_format, self.accelerator)
        step = plan.step
        history = TokenizedHistory(
            self.timeline.steps[:step], tokenize, self.text_format.pad_id, cfg.trainer.attention_reset
        )
        return plan.strategies.mix_examples(step, tokenize(self.timeline.steps[step]), history)

    def _train(self, plan: StepPlan) -> StepResult:
        """The one loop on the plan (FSDP2: sharded while it trains), resumable from a mid-step state."""
        cfg, accelerator = self.cfg, self.accelerator
        log_fn = self.hooks.wrap_train_log(self, plan, self.logger.log_train)
        resume = str(cfg.resume).lower() != "false"
        states = StepStates(
            self.run_dir,
            plan.step,
            cfg.trainer.save_every_n_steps,
            cfg.trainer.keep_last_states,
            accelerator,
            method=plan.strategies,
            resume=resume,
            signals=getattr(self, "signals", None),
            timeout_s=(cfg.trainer.dist_timeout_s, cfg.trainer.train_timeout_s),
            async_save=cfg.trainer.async_save,
            every_minutes=cfg.trainer.save_every_minutes,
        )
        with states:
            self.model, result = train_sharded(
                accelerator,
                self.model,
                lambda model: train_time_step(plan, model, accelerator, self.hooks, log_fn=log_fn, states=states),
            )
        set_collective_timeout(cfg.trainer.dist_timeout_s)  # training's short timeout ends with its training
        self.hooks.call("on_step_trained", self, plan, result)
        return result

    def save(self, step: int) -> None:
        """Checkpoint ``steps/<step>/`` (full weights gathered under FSDP / DeepSpeed) and mark it trained."""
        self.accelerator.wait_for_everyone()
        # full weights unless the method saves what rebuilds them, and a hook needs no full weights
        weights = self.active.saves_weights(step) or self.hooks.full_weights(self, step)
        self.hooks.call("before_save", self, step)
        gathered = gathered_state_dict(self.accelerator, self.model) if weights else None  # a collective
        if not self.main:
            return
        carried = self.hooks.carried(self, step)
        if carried:  # what step k hands to step k+1, before state.json marks the step trained (training/carry.py)
            carry.save(self.run_dir, step, carried)
        save_checkpoint(
            self.run_dir,
            step,
            self.model,
            self.tokenizer,
            state_dict=gathered,
            weights=weights,
            extra_files=lambda d: self.active.save_extra(self.model, d),
        )
        self.state.trained = sorted(set(self.state.trained) | {step})
        if step in self.results:  # a rerun that finds the step unevaluated puts it in the step's rows
            self.state.results[str(step)] = dataclasses.asdict(self.results[step])
        self.state.method_state = self.method.state_dict()
        self.state.hook_state = self.hooks.state_dict()
        self.state.save(self.run_dir)

    def evaluate(self, checkpoint: int, model=None) -> list[dict]:
        """Score ``checkpoint`` (the model on the object, or ``model``) on every set introduced so far
        (``evaluation/checkpoints.py``); then drop the mid-step states and carried files it no longer needs."""
        model = model if model is not None else self.model
        rows = self.evaluation.evaluate(checkpoint, model, self.results.get(checkpoint))
        if self.main and checkpoint >= 0:
            prune_states(self.run_dir, through_step=checkpoint)
            carry.prune(self.run_dir, before=checkpoint)  # a rerun of step checkpoint+1 needs this one's
        model.train()
        self.hooks.call("after_evaluate", self, checkpoint, model)
        self.accelerator.wait_for_everyone()
        return rows

    def close(self, ok: bool, agreed: Optional[bool] = None) -> None:
        shut_down(getattr(self, "logger", None), getattr(self, "accelerator", None), ok, agreed)


def train(cfg: Config | DictConfig) -> dict:
    """Run the whole timeline; returns the summary (also written to ``summary.json``)."""
    log_on_main_only(process_index())  # before anything logs (the accelerator confirms it in setup)
    return ContinualRun(cfg).run()
