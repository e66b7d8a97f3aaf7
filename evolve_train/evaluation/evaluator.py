"""Evaluation of a checkpoint: evaluators registered by name, listed in ``eval.evaluators``.

Each evaluator takes an :class:`EvalContext` and returns metric rows for ``metrics.jsonl``. Rows
carry ``checkpoint``, ``set``, ``set_step`` and a ``group`` naming the evaluator, so readers filter
on those keys. Generations are shared: a prompt asked by several sets (Updated_k and Outdated_k ask
the same questions) is generated once per checkpoint, and so is an option log-likelihood.

The evaluators beyond ``splits`` live in :mod:`evolve_train.evaluation.evaluators` (one module per group,
imported at the end of this module so that every name is registered before a config is validated).
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from tqdm.auto import tqdm

from evolve_train.config import EvalConfig
from evolve_train.data.timeline import EvalSet, Timeline
from evolve_train.data.world_probes import PROBE_KINDS
from evolve_train.errors import ConfigError
from evolve_train.evaluation.batching import AutoBatchSize
from evolve_train.evaluation.generation import GREEDY_DECODERS, generate_answers, prediction_of
from evolve_train.evaluation.metrics.answer import exact_match, f1


@dataclass
class EvalContext:
    model: object
    tokenizer: object
    timeline: Timeline
    checkpoint: int
    """Step whose checkpoint is evaluated (-1 = the model before any training)."""
    cfg: EvalConfig
    run_dir: Optional[Path]
    seq2seq: bool = False
    rows: list[dict] = field(default_factory=list)
    """Rows produced so far at this checkpoint: an evaluator may read those of the ones listed before it."""
    batch: AutoBatchSize = field(init=False)
    """Generation/scoring batch size: ``eval.batch_size``, halved for the rest of the checkpoint on OOM."""
    _answers: dict[str, str] = field(default_factory=dict)
    _scores: dict[tuple[str, str], float] = field(default_factory=dict)

    def __post_init__(self):
        self.batch = AutoBatchSize(self.cfg.batch_size)

    def sets(self) -> list[EvalSet]:
        """Sets introduced so far (and the next step's with ``forward_transfer``); every set for the model
        before training (checkpoint -1), which gives A_init of each step (METRICS.md §3)."""
        if self.checkpoint < 0:
            sets = list(self.timeline.eval_sets)
        else:
            sets = self.timeline.sets_for_checkpoint(self.checkpoint, self.cfg.forward_transfer)
        return [EvalSet(s.name, s.kind, s.step, sample_items(s.items, self.cfg.max_items_per_set)) for s in sets]

    def answers(self, prompts: list[str]) -> list[str]:
        """Raw generations for ``prompts``, generating only those not asked before at this checkpoint."""
        missing = sorted({p for p in prompts if p not in self._answers})
        if missing:
            with tqdm(total=len(missing), desc=f"eval ckpt {self.checkpoint}", leave=False,
                      dynamic_ncols=True) as bar:
                raw = generate_answers(self.model, self.tokenizer, missing, batch_size=self.batch,
                                       max_new_tokens=self.cfg.max_new_tokens, stop_strings=self.cfg.stop_strings,
                                       seq2seq=self.seq2seq, decoder=self.cfg.greedy_decoder, progress=bar)
            self._answers.update(zip(missing, raw))
        return [self._answers[p] for p in prompts]

    def option_scores(self, questions: list[tuple[str, list[str]]]) -> list[list[float]]:
        """Log-likelihood of each option given its prompt (METRICS.md §7), for ``(prompt, options)`` pairs;
        each (prompt, option) is scored once per checkpoint, many per forward pass."""
        from evolve_train.evaluation.evaluators.choice import option_loglikelihoods

        missing = sorted({(p, o) for p, options in questions for o in options} - set(self._scores))
        if missing:
            scores = option_loglikelihoods(self.model, self.tokenizer, missing, batch_size=self.batch,
                                           seq2seq=self.seq2seq)
            self._scores.update(zip(missing, scores))
        return [[self._scores[(p, o)] for o in options] for p, options in questions]


def sample_items(items: list[dict], cap: int) -> list[dict]:
    if cap <= 0 or len(items) <= cap:
        return items
    keep = set(random.Random(0).sample(range(len(items)), cap))
    return [item for i, item in enumerate(items) if i in keep]


def write_predictions(run_dir: Path, checkpoint: int, set_name: str, records: list[dict]) -> None:
    from evolve_train.training.checkpoint import atomic_write_text

    directory = run_dir / "predictions" / f"step_{checkpoint}"
    directory.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    atomic_write_text(directory / f"{set_name}.jsonl", text)


def splits_evaluator(ctx: EvalContext) -> list[dict]:
    """EM and F1 per EvolvingQA split (METRICS.md sections 1-2), with per-item predictions."""
    rows = []
    for eval_set in ctx.sets():
        if eval_set.kind in PROBE_KINDS:
            continue  # paired / dimension probes have their own evaluators
        prompts = [ctx.timeline.prompt(item) for item in eval_set.items]
        raw = ctx.answers(prompts)
        records = []
        for item, prompt, generation in zip(eval_set.items, prompts, raw):
            prediction = prediction_of(generation, ctx.cfg.stop_strings)
            records.append({"id": item["id"], "prompt": prompt, "generation": generation,
                            "prediction": prediction, "golds": item["answers"],
                            "correct": exact_match(prediction, item["answers"]),
                            "f1": f1(prediction, item["answers"])})
        n = len(records)
        rows.append({"group": "splits", "checkpoint": ctx.checkpoint, "set": eval_set.kind,
                     "set_name": eval_set.name, "set_step": eval_set.step, "n": n,
                     "em": sum(r["correct"] for r in records) / n if n else None,
                     "f1": sum(r["f1"] for r in records) / n if n else None})
        if ctx.run_dir is not None and ctx.cfg.save_predictions:
            write_predictions(ctx.run_dir, ctx.checkpoint, eval_set.name, records)
    return rows


EVALUATORS: dict[str, Callable[[EvalContext], list[dict]]] = {"splits": splits_evaluator}


def register_evaluator(name: str):
    def decorate(fn):
        EVALUATORS[name] = fn
        return fn
    return decorate


def check_evaluators(names: list[str]) -> None:
    unknown = [n for n in names if n not in EVALUATORS]
    if unknown:
        raise ConfigError(f"eval.evaluators: unknown evaluator '{unknown[0]}' (known: {', '.join(sorted(EVALUATORS))})")


def check_eval_config(cfg: EvalConfig) -> None:
    """Checks of ``eval.*`` that Hydra's types cannot express, before any training; ConfigError names the key."""
    from evolve_train.data.timestamps import parse_timestamp

    check_evaluators(evaluator_names(cfg))
    if getattr(cfg, "greedy_decoder", "pruned") not in GREEDY_DECODERS:
        raise ConfigError(f"eval.greedy_decoder must be one of {', '.join(GREEDY_DECODERS)}, "
                          f"got {cfg.greedy_decoder!r}")
    if getattr(cfg, "ablation_k", 1) < 1:
        raise ConfigError(f"eval.ablation_k must be >= 1, got {cfg.ablation_k}")
    for key in ("position_items", "position_rotations", "grad_norm_items"):
        if getattr(cfg, key, 0) < 0:
            raise ConfigError(f"eval.{key} must be >= 0, got {getattr(cfg, key)}")
    if not 0.0 <= getattr(cfg, "overconfidence_tau", 0.8) <= 1.0:
        raise ConfigError(f"eval.overconfidence_tau must be in [0, 1], got {cfg.overconfidence_tau}")
    for name, bounds in (getattr(cfg, "time_slices", None) or {}).items():
        if len(bounds) != 2:
            raise ConfigError(f"eval.time_slices.{name}: expected [start, end] (null = unbounded), got {list(bounds)}")
        for bound in bounds:
            if bound is not None:
                try:
                    parse_timestamp(str(bound))
                except ValueError as err:
                    raise ConfigError(f"eval.time_slices.{name}: {err}") from None


def evaluator_names(cfg: EvalConfig) -> list[str]:
    """``eval.evaluators``, plus ``grad_norms`` when ``eval.grad_norms`` is set."""
    names = list(cfg.evaluators)
    if getattr(cfg, "grad_norms", False) and "grad_norms" not in names:
        names.append("grad_norms")
    return names


def evaluate_checkpoint(ctx: EvalContext) -> list[dict]:
    """Run the evaluators in order; the rows, then one ``timing`` row (seconds per evaluator: generation
    shared with an earlier evaluator is counted there)."""
    names = evaluator_names(ctx.cfg)
    check_evaluators(names)
    seconds = {}
    for name in names:
        start = time.perf_counter()
        ctx.rows.extend(EVALUATORS[name](ctx))
        seconds[name] = round(time.perf_counter() - start, 3)
    return ctx.rows + [{"group": "timing", "checkpoint": ctx.checkpoint, "set": None, "set_step": None,
                        "seconds": seconds}]


def evaluate_initial(model, tokenizer, timeline: Timeline, cfg, run_dir: Optional[Path],
                     seq2seq: bool = False) -> list[dict]:
    """``eval.eval_initial``: the model before any training, as checkpoint -1, on every eval set."""
    ctx = EvalContext(model=model, tokenizer=tokenizer, timeline=timeline, checkpoint=-1, cfg=cfg.eval,
                      run_dir=run_dir, seq2seq=seq2seq)
    rows = evaluate_checkpoint(ctx)
    for row in rows:
        row.update(method=cfg.method.name, seed=cfg.seed, train_seconds=0.0, train_tokens=0)
    model.train()
    return rows


from evolve_train.evaluation import evaluators  # noqa: E402,F401  (registers the evaluators by name)
