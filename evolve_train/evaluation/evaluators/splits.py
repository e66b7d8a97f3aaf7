"""``splits``: EM and F1 per EvolvingQA split (METRICS.md sections 1-2), with per-item predictions."""

from __future__ import annotations

from evolve_train.data.world_probes import PROBE_KINDS
from evolve_train.evaluation.context import EvalContext, write_predictions
from evolve_train.evaluation.metrics.answer import exact_match, f1, prediction_of
from evolve_train.evaluation.registry import register_evaluator


@register_evaluator("splits")
def splits_evaluator(ctx: EvalContext) -> list[dict]:
    """One row per split set (paired and dimension probes have their own evaluators)."""
    rows = []
    for eval_set in ctx.sets():
        if eval_set.kind in PROBE_KINDS:
            continue
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
        if ctx.writes and ctx.run_dir is not None and ctx.cfg.save_predictions:
            write_predictions(ctx.run_dir, ctx.checkpoint, eval_set.name, records)
    return rows
