"""``train(cfg)``: the whole continual-pretraining run, step after step, testable without Hydra.

config -> timeline (validated) -> for each time step: method.prepare_model -> train -> checkpoint
``steps/<k>/`` -> evaluate every set introduced so far -> rows to the loggers -> after the last step,
``summary.json`` and a table. A run dir with completed steps is resumed (``resume=auto``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from omegaconf import DictConfig, OmegaConf

from evolve_train.config import Config
from evolve_train.data.timeline import Timeline, build_timeline
from evolve_train.errors import ConfigError
from evolve_train.evaluation.evaluator import (EvalContext, check_eval_config, evaluate_checkpoint,
                                              evaluate_initial)
from evolve_train.evaluation.evaluators.hygiene import preflight as hygiene_preflight, record_private
from evolve_train.evaluation.evaluators.matrix import INITIAL
from evolve_train.evaluation.qa_adaptation import QAAdaptation
from evolve_train.methods import Method, TokenizedHistory
from evolve_train.models.build import (build_model, is_seq2seq, load_model, load_tokenizer,
                                       n_parameters, train_tokenizer)
from evolve_train.reporting.summary import build_summary, format_summary_table
from evolve_train.tracking import build_logger
from evolve_train.tracking.disk import DiskLogger
from evolve_train.training import faults, identity
from evolve_train.training.checkpoint import (RunState, ensure_writable, gathered_state_dict, preflight,
                                              remove_stale_tmp, save_checkpoint, step_dir)
from evolve_train.training.examples import tokenize_step
from evolve_train.training.loop import train_time_step
from evolve_train.training.redact import redact_run
from evolve_train.training.train_state import StepStates, TrainingInterrupted, prune_states
from evolve_train.training.step0_cache import Step0Cache

log = logging.getLogger(__name__)


def validate(cfg: Config) -> None:
    """Checks Hydra's types cannot express; each error names the key."""
    positive = {"trainer.epochs_step0": cfg.trainer.epochs_step0, "trainer.epochs": cfg.trainer.epochs,
                "trainer.batch_size": cfg.trainer.batch_size, "trainer.grad_accum": cfg.trainer.grad_accum,
                "trainer.seq_len": cfg.trainer.seq_len, "trainer.lr": cfg.trainer.lr,
                "data.world.n_steps": cfg.data.world.n_steps, "eval.batch_size": cfg.eval.batch_size,
                "eval.max_new_tokens": cfg.eval.max_new_tokens}
    for key, value in positive.items():
        if not value > 0:
            raise ConfigError(f"{key} must be positive, got {value}")
    if cfg.resume not in ("auto", "false", "False"):
        raise ConfigError(f"resume must be 'auto' or false, got {cfg.resume!r}")
    if cfg.trainer.mixed_precision not in ("no", "bf16", "fp16"):
        raise ConfigError(f"trainer.mixed_precision must be no, bf16 or fp16, got {cfg.trainer.mixed_precision!r}")
    if cfg.trainer.nonfinite not in ("stop", "skip"):
        raise ConfigError(f"trainer.nonfinite must be stop or skip, got {cfg.trainer.nonfinite!r}")
    if cfg.trainer.save_every_n_steps < 0:
        raise ConfigError(f"trainer.save_every_n_steps must be >= 0, got {cfg.trainer.save_every_n_steps}")
    if cfg.trainer.keep_last_states < 1:
        raise ConfigError(f"trainer.keep_last_states must be >= 1, got {cfg.trainer.keep_last_states}")
    from transformers.activations import ACT2FN

    if cfg.model.activation not in ACT2FN:
        raise ConfigError(f"model.activation: unknown activation {cfg.model.activation!r} "
                          "(a transformers ACT2FN name such as gelu_pytorch_tanh, gelu_new, relu)")
    check_eval_config(cfg.eval)  # evaluator names and eval.* ranges
    Method(cfg.method)  # validates method.* (each strategy checks its section)


def resolve_run_dir(cfg: Config) -> Path:
    if cfg.run_dir:
        return Path(cfg.run_dir)
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    raise ConfigError("run_dir is not set (and no Hydra run dir exists)")


def check_run_dir(run_dir: Path, resume: str, state: RunState) -> None:
    has_work = any((run_dir / name).exists() for name in ("steps", "metrics.jsonl", "train_state"))
    if str(resume).lower() == "false" and has_work:
        raise ConfigError(f"{run_dir} already holds a run (steps/ or metrics.jsonl) and resume=false; "
                          "choose another hydra.run.dir or delete it")


def train(cfg: Config | DictConfig) -> dict:
    """Run the whole timeline; returns the summary (also written to ``summary.json``)."""
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_object(cfg)
    validate(cfg)
    run_dir = resolve_run_dir(cfg)
    state = RunState.load(run_dir)
    check_run_dir(run_dir, cfg.resume, state)
    identity.check_resume(run_dir, cfg, state)  # a changed result-affecting config: ConfigError, nothing written
    identity.record(state, cfg)  # state.json carries the config from the first save on
    timeline = build_timeline(cfg.data)  # validates input before anything is written
    qa_adaptation = QAAdaptation.from_config(cfg, timeline)  # checked up front too; None when off
    hygiene_preflight(cfg, timeline, qa_adaptation)  # no private eval item in training/prompts (docs/hygiene.md)

    if cfg.trainer.num_threads > 0:
        torch.set_num_threads(cfg.trainer.num_threads)
    accelerator = Accelerator(mixed_precision=cfg.trainer.mixed_precision,
                              gradient_accumulation_steps=cfg.trainer.grad_accum)
    main = accelerator.is_main_process
    seq2seq = is_seq2seq(cfg.model)
    start = state.last_complete + 1
    if main:
        ensure_writable(run_dir)  # mkdir + a probe write: a clear error before anything else
        state.save(run_dir)  # record the config now: a changed command cannot resume even a mid-step-0 state
        for stale in remove_stale_tmp(run_dir):
            log.warning("removed an incomplete checkpoint left by an interrupted run: %s", stale)
        prune_states(run_dir, through_step=start - 1)  # states of finished steps (docs/reliability.md)
        redact_run(dataclasses.asdict(cfg))  # secrets out of .hydra/*.yaml and sys.argv before loggers start
    disk = DiskLogger(run_dir)
    backends = ["disk"] + [name for name in cfg.logger.backends if name != "disk"]  # metrics.jsonl always
    logger = build_logger(backends, run_dir=run_dir, cfg=cfg) if main else build_logger([])
    if main:
        if start > 0:
            log.info("resuming %s after step %d", run_dir, start - 1)
        disk.truncate_after(start - 1)  # rows of an interrupted attempt (a mid-step state logs its own again)

    model, tokenizer = _initial_model(cfg, timeline, run_dir, start)
    method = Method(cfg.method)
    method.load_state_dict(state.method_state)
    if start > 0:
        method.load_extra(model, step_dir(run_dir, start - 1))
    model.to(accelerator.device)
    if main:  # fail now, not at the first checkpoint: run dir writable, disk space for a checkpoint
        preflight(run_dir, model, len(timeline.steps) - start, cfg.trainer.save_every_n_steps,
                  cfg.trainer.keep_last_states)
    ok = False
    try:
        if cfg.eval.eval_initial and start == 0 and main:  # A_init (METRICS.md §3): checkpoint -1
            disk.truncate_after(INITIAL - 1)  # rows an interrupted attempt left before step 0 finished
            initial_rows = evaluate_initial(model, tokenizer, timeline, cfg, run_dir, seq2seq)
            logger.log_eval(INITIAL, record_private(run_dir, timeline, cfg.eval, INITIAL, initial_rows))
        for step in range(start, len(timeline.steps)):
            model = _run_step(cfg, timeline, step, model, tokenizer, method, accelerator, run_dir, state,
                              logger, seq2seq, qa_adaptation)
        summary = build_summary(run_dir, timeline, cfg)
        if main:
            logger.log_summary(summary)
            print(format_summary_table(summary))
        ok = True
        return summary
    except KeyboardInterrupt as interrupt:  # Ctrl-C: resumable (mid-step state, or the last complete step)
        log.error("%s", interrupt if isinstance(interrupt, TrainingInterrupted) else
                  f"interrupted (Ctrl-C); the completed steps in {run_dir} are kept. Run the same command "
                  "again to resume.")
        raise SystemExit(130) from None
    finally:
        logger.close(ok)
        accelerator.wait_for_everyone()
        accelerator.end_training()
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()  # without it, multi-process runs may abort at exit


def _initial_model(cfg: Config, timeline: Timeline, run_dir: Path, start: int):
    if start > 0:
        last = str(step_dir(run_dir, start - 1))
        return load_model(last, cfg.model), load_tokenizer(last, cfg.model)
    set_seed(cfg.seed)
    if cfg.model.tokenizer or cfg.model.name_or_path:
        tokenizer = load_tokenizer(cfg.model.tokenizer or cfg.model.name_or_path, cfg.model)
    else:
        first = timeline.steps[0]
        texts = [t["text"] for t in first.texts] + [p["input"] + " " + p["output"] for p in first.pairs]
        tokenizer = train_tokenizer(texts, cfg.model.vocab_size, cfg.model.arch)
    model = build_model(cfg.model, tokenizer)
    log.info("model: %.2fM parameters", n_parameters(model) / 1e6)
    return model, tokenizer


def _run_step(cfg, timeline, step, model, tokenizer, method, accelerator, run_dir, state, logger, seq2seq,
              qa_adaptation=None):
    main = accelerator.is_main_process
    set_seed(cfg.seed + step)
    active = method.at_step(step)  # step 0: plain full training unless method.at_step0
    tokenize = lambda s: tokenize_step(s, cfg.data.objective, tokenizer, cfg.trainer.seq_len, seq2seq)  # noqa: E731
    examples = tokenize(timeline.steps[step])
    history = TokenizedHistory(timeline.steps[:step], tokenize, tokenizer.pad_token_id, seq2seq)
    examples = active.mix_examples(step, examples, history)
    model = active.prepare_model(model, step)
    epochs = cfg.trainer.epochs_step0 if step == 0 else cfg.trainer.epochs
    cache = Step0Cache.for_run(cfg, tokenizer, accelerator.num_processes, timeline.steps[0]) if step == 0 else None
    cached = cache.load(cfg.model, accelerator, logger.log_train) if cache else None
    if cached:
        model, result = cached
    else:
        with StepStates(run_dir, step, cfg.trainer.save_every_n_steps, cfg.trainer.keep_last_states,
                        accelerator, method=active, resume=str(cfg.resume).lower() != "false") as states:
            result = train_time_step(model, examples, step=step, epochs=epochs, cfg=cfg.trainer, method=active,
                                     accelerator=accelerator, pad_id=tokenizer.pad_token_id,
                                     seed=cfg.seed + 1000 * step, seq2seq=seq2seq,
                                     log_fn=cache.recording(logger.log_train) if cache else logger.log_train,
                                     states=states)
        if cache and main:
            cache.store(model, tokenizer, result, trained_by=str(run_dir))
    model = active.after_step(model, step, examples)
    accelerator.wait_for_everyone()
    gathered = gathered_state_dict(accelerator, model)  # FSDP / DeepSpeed: full weights (every process)
    if main:
        save_checkpoint(run_dir, step, model, tokenizer, extra_files=lambda d: active.save_extra(model, d),
                        state_dict=gathered)
        state.trained = sorted(set(state.trained) | {step})
        state.method_state = method.state_dict()
        state.save(run_dir)
        eval_model = (qa_adaptation.adapted(model, tokenizer, checkpoint=step, accelerator=accelerator,
                                            seq2seq=seq2seq) if qa_adaptation else model)  # a copy; chain untouched
        ctx = EvalContext(model=eval_model, tokenizer=tokenizer, timeline=timeline, checkpoint=step, cfg=cfg.eval,
                          run_dir=run_dir, seq2seq=seq2seq)
        eval_start = time.perf_counter()
        rows = record_private(run_dir, timeline, cfg.eval, step, evaluate_checkpoint(ctx))  # private_evaluations.jsonl
        faults.point("evaluate")
        eval_seconds = round(time.perf_counter() - eval_start, 2)
        for row in rows:
            row.update(method=cfg.method.name, seed=cfg.seed, train_seconds=round(result.seconds, 2),
                       eval_seconds=eval_seconds,
                       train_tokens=result.tokens, num_processes=accelerator.num_processes)
            if cfg.trainer.nonfinite == "skip":  # batches dropped for a non-finite loss/gradient
                row["skipped_batches"] = result.skipped_batches
        logger.log_eval(step, rows)
        state.evaluated = sorted(set(state.evaluated) | {step})
        state.save(run_dir)
        prune_states(run_dir, through_step=step)
        model.train()
    accelerator.wait_for_everyone()
    return model
