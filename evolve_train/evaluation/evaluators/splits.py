"""``splits``: EM and F1 per EvolvingQA split (docs/metrics.md#1-answer-matching, docs/metrics.md#2-evolvingqa-splits), with per-item predictions.

:func:`score_prompts` and :func:`em_f1` are the scoring of a set's answers; the open-book evaluator
(``retrieval``) runs the same two on its prompts with passages before the question."""

from __future__ import annotations

from typing import Optional

from evolve_train.data.world_probes import PROBE_KINDS
from evolve_train.evaluation.context import EvalContext, write_predictions
from evolve_train.evaluation.metrics.answer import exact_match, f1, prediction_of
from evolve_train.evaluation.registry import register_evaluator


def score_prompts(
    ctx: EvalContext, items: list[dict], prompts: list[str], golds: Optional[list[list[str]]] = None
) -> list[dict]:
    """One record per item: its prompt's greedy generation (shared per checkpoint: ``ctx.answers``), the
    prediction cut at the stop strings, the golds (the items' own unless given), EM and F1 (§1)."""
    golds = golds or [item["answers"] for item in items]
    records = []
    for item, prompt, generation, gold in zip(items, prompts, ctx.answers(prompts), golds):
        prediction = prediction_of(generation, ctx.cfg.stop_strings, ctx.cfg.stop_patterns)
        records.append(
            {
                "id": item["id"],
                "prompt": prompt,
                "generation": generation,
                "prediction": prediction,
                "golds": gold,
                "correct": exact_match(prediction, gold),
                "f1": f1(prediction, gold),
            }
        )
    return records


def em_f1(records: list[dict]) -> dict:
    """``n``, ``em`` and ``f1`` of scored records (null metrics when n = 0, §2)."""
    n = len(records)
    return {
        "n": n,
        "em": sum(r["correct"] for r in records) / n if n else None,
        "f1": sum(r["f1"] for r in records) / n if n else None,
    }


@register_evaluator("splits")
def splits_evaluator(ctx: EvalContext) -> list[dict]:
    """One row per split set (paired and dimension probes have their own evaluators)."""
    rows = []
    for eval_set in ctx.sets():
        if eval_set.kind in PROBE_KINDS:
            continue
        records = score_prompts(ctx, eval_set.items, [ctx.timeline.prompt(item) for item in eval_set.items])
        rows.append(
            {
                "group": "splits",
                "checkpoint": ctx.checkpoint,
                "set": eval_set.kind,
                "set_name": eval_set.name,
                "set_step": eval_set.step,
                **em_f1(records),
            }
        )
        if ctx.writes and ctx.run_dir is not None and ctx.cfg.save_predictions:
            write_predictions(ctx.run_dir, ctx.checkpoint, eval_set.name, records)
    return rows
