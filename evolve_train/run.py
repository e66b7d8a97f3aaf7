"""``train(cfg)``: the whole continual-pretraining run, step after step, testable without Hydra.

config -> timeline (validated) -> for each time step: method.prepare_model -> train -> checkpoint
``steps/<k>/`` -> evaluate every set introduced so far -> rows to the loggers -> after the last step,
``summary.json`` and a table. A run dir with completed steps is resumed (``resume=auto``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from omegaconf import DictConfig, OmegaConf

from evolve_train.config import Config
from evolve_train.data.timeline import Timeline, build_timeline
from evolve_train.errors import ConfigError
from evolve_train.evaluation.evaluator import EvalContext, check_evaluators, evaluate_checkpoint
from evolve_train.methods import Method
from evolve_train.models.build import (build_model, is_seq2seq, load_model, load_tokenizer,
                                       n_parameters, train_tokenizer)
from evolve_train.reporting.summary import build_summary, format_summary_table
from evolve_train.tracking import build_logger
from evolve_train.tracking.disk import DiskLogger
from evolve_train.training.checkpoint import RunState, remove_stale_tmp, save_checkpoint, step_dir
from evolve_train.training.examples import tokenize_step
from evolve_train.training.loop import train_time_step

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
    check_evaluators(list(cfg.eval.evaluators))


def resolve_run_dir(cfg: Config) -> Path:
    if cfg.run_dir:
        return Path(cfg.run_dir)
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    raise ConfigError("run_dir is not set (and no Hydra run dir exists)")


def check_run_dir(run_dir: Path, resume: str, state: RunState) -> None:
    has_work = (run_dir / "steps").exists() or (run_dir / "metrics.jsonl").exists()
    if str(resume).lower() == "false" and has_work:
        raise ConfigError(f"{run_dir} already holds a run (steps/ or metrics.jsonl) and resume=false; "
                          "choose another hydra.run.dir or delete it")


def train(cfg: Config | DictConfig) -> dict:
    """Run the whole timeline; returns the summary (also written to ``summary.json``)."""
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_object(cfg)
    validate(cfg)
    timeline = build_timeline(cfg.data)  # validates input before anything is written
    run_dir = resolve_run_dir(cfg)
    state = RunState.load(run_dir)
    check_run_dir(run_dir, cfg.resume, state)

    if cfg.trainer.num_threads > 0:
        torch.set_num_threads(cfg.trainer.num_threads)
    accelerator = Accelerator(mixed_precision=cfg.trainer.mixed_precision,
                              gradient_accumulation_steps=cfg.trainer.grad_accum)
    main = accelerator.is_main_process
    seq2seq = is_seq2seq(cfg.model)
    start = state.last_complete + 1
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
        for stale in remove_stale_tmp(run_dir):
            log.warning("removed an incomplete checkpoint left by an interrupted run: %s", stale)
    disk = DiskLogger(run_dir)
    backends = ["disk"] + [name for name in cfg.logger.backends if name != "disk"]  # metrics.jsonl always
    logger = build_logger(backends, run_dir=run_dir, cfg=cfg) if main else build_logger([])
    if main and start > 0:
        log.info("resuming %s after step %d", run_dir, start - 1)
        disk.truncate_after(start - 1)

    model, tokenizer = _initial_model(cfg, timeline, run_dir, start)
    method = Method(cfg.method)
    method.load_state_dict(state.method_state)
    model.to(accelerator.device)
    ok = False
    try:
        for step in range(start, len(timeline.steps)):
            model = _run_step(cfg, timeline, step, model, tokenizer, method, accelerator, run_dir, state,
                              logger, seq2seq)
        summary = build_summary(run_dir, timeline, cfg)
        if main:
            logger.log_summary(summary)
            print(format_summary_table(summary))
        ok = True
        return summary
    finally:
        logger.close(ok)
        accelerator.wait_for_everyone()
        accelerator.end_training()


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


def _run_step(cfg, timeline, step, model, tokenizer, method, accelerator, run_dir, state, logger, seq2seq):
    main = accelerator.is_main_process
    set_seed(cfg.seed + step)
    examples = tokenize_step(timeline.steps[step], cfg.data.objective, tokenizer, cfg.trainer.seq_len, seq2seq)
    examples = method.mix_examples(step, examples, timeline.steps[:step])
    model = method.prepare_model(model, step)
    epochs = cfg.trainer.epochs_step0 if step == 0 else cfg.trainer.epochs
    result = train_time_step(model, examples, step=step, epochs=epochs, cfg=cfg.trainer, method=method,
                             accelerator=accelerator, pad_id=tokenizer.pad_token_id, seed=cfg.seed + 1000 * step,
                             seq2seq=seq2seq, log_fn=logger.log_train)
    model = method.after_step(model, step, examples)
    accelerator.wait_for_everyone()
    if main:
        save_checkpoint(run_dir, step, model, tokenizer, extra_files=lambda d: method.save_extra(model, d))
        state.trained = sorted(set(state.trained) | {step})
        state.method_state = method.state_dict()
        state.save(run_dir)
        ctx = EvalContext(model=model, tokenizer=tokenizer, timeline=timeline, checkpoint=step, cfg=cfg.eval,
                          run_dir=run_dir, seq2seq=seq2seq)
        rows = evaluate_checkpoint(ctx)
        for row in rows:
            row.update(method=cfg.method.name, seed=cfg.seed, train_seconds=round(result.seconds, 2),
                       train_tokens=result.tokens)
        logger.log_eval(step, rows)
        state.evaluated = sorted(set(state.evaluated) | {step})
        state.save(run_dir)
        model.train()
    accelerator.wait_for_everyone()
    return model
