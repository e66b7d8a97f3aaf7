"""Evaluation of a checkpoint: evaluators registered by name, listed in ``eval.evaluators``.

Each evaluator takes an :class:`EvalContext` and returns metric rows for ``metrics.jsonl``. Rows
carry ``checkpoint``, ``set``, ``set_step`` and a ``group`` naming the evaluator, so readers filter
on those keys. Generations are shared: a prompt asked by several sets (Updated_k and Outdated_k ask
the same questions) is generated once per checkpoint.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from tqdm.auto import tqdm

from evolve_train.config import EvalConfig
from evolve_train.data.timeline import EvalSet, Timeline
from evolve_train.errors import ConfigError
from evolve_train.evaluation.generation import generate_answers, prediction_of
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
    _answers: dict[str, str] = field(default_factory=dict)

    def sets(self) -> list[EvalSet]:
        sets = self.timeline.sets_for_checkpoint(self.checkpoint, self.cfg.forward_transfer)
        return [EvalSet(s.name, s.kind, s.step, sample_items(s.items, self.cfg.max_items_per_set)) for s in sets]

    def answers(self, prompts: list[str]) -> list[str]:
        """Raw generations for ``prompts``, generating only those not asked before at this checkpoint."""
        missing = sorted({p for p in prompts if p not in self._answers})
        if missing:
            with tqdm(total=len(missing), desc=f"eval ckpt {self.checkpoint}", leave=False,
                      dynamic_ncols=True) as bar:
                raw = generate_answers(self.model, self.tokenizer, missing, batch_size=self.cfg.batch_size,
                                       max_new_tokens=self.cfg.max_new_tokens, stop_strings=self.cfg.stop_strings,
                                       seq2seq=self.seq2seq, progress=bar)
            self._answers.update(zip(missing, raw))
        return [self._answers[p] for p in prompts]


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


def evaluate_checkpoint(ctx: EvalContext) -> list[dict]:
    check_evaluators(ctx.cfg.evaluators)
    rows = []
    for name in ctx.cfg.evaluators:
        rows.extend(EVALUATORS[name](ctx))
    return rows
