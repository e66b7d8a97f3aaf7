"""``paired``: the paired temporal metrics of docs/metrics.md#4-paired-temporal-metrics on every checkpoint.

Per set of timestamped questions (the world's ``paired_<k>``) and over all of them (``set_name: all``):
``update_adoption``, ``confusion_index`` (each with a 95 % bootstrap interval over pairs, ``*_ci``),
``pair_asymmetry`` and ``n_pairs`` (explicit ``pair_id`` pairs,
automatic pairing for the rest), ``time_accuracy`` per slice with ``n`` (``eval.time_slices``, default one
per year), ``old_knowledge_retention`` (items flagged stable) and ``now``: the questions without a
timestamp, scored against the latest answer — at the evaluated checkpoint, for items that carry
``extra.answers_by_step`` (the world's), else their own gold.
"""

from __future__ import annotations

from typing import Any, Optional

from evolve_train.evaluation.context import EvalContext
from evolve_train.evaluation.evaluators.common import ALL, generate, qa_item, row, temporal_sets
from evolve_train.evaluation.metrics.answer import exact_match
from evolve_train.evaluation.metrics.stats import bootstrap_mean_ci
from evolve_train.evaluation.metrics.temporal import (
    adoption_per_pair,
    confusion_per_pair,
    old_knowledge_retention,
    pair_asymmetry,
    resolve_pairs,
    time_accuracy,
)
from evolve_train.evaluation.registry import register_evaluator


def latest_answers(item: dict, checkpoint: int) -> list[str]:
    """Gold of a question without timestamp: the answer at ``checkpoint`` (``extra.answers_by_step``: the
    entry of the checkpoint, or of the last step before it), else the item's own answers."""
    by_step = (item.get("extra") or {}).get("answers_by_step")
    if not by_step:
        return item["answers"]
    known = sorted((int(step) for step in by_step), reverse=True)
    at = next((step for step in known if step <= checkpoint), None)
    return by_step[str(at)] if at is not None else item["answers"]


def slices(ctx: EvalContext) -> Optional[dict[str, tuple[Optional[str], Optional[str]]]]:
    configured = getattr(ctx.cfg, "time_slices", None) or {}
    if not configured:
        return None
    result = {}
    for name, bounds in configured.items():
        bounds = list(bounds)
        if len(bounds) != 2:
            raise ValueError(f"eval.time_slices.{name}: expected [start, end], got {bounds}")
        result[str(name)] = (bounds[0], bounds[1])
    return result


def paired_metrics(items, predictions: dict[str, str], time_slices=None) -> dict[str, Any]:
    """The §4 metrics of scored QA items (golds already resolved)."""
    pairs = resolve_pairs(items)
    adopted, crossed = adoption_per_pair(pairs, predictions), confusion_per_pair(pairs, predictions)
    undated = [item for item in items if item.timestamp is None]
    now_em = [exact_match(predictions[i.id], i.answers) for i in undated]
    return {
        "update_adoption": sum(adopted) / len(adopted) if adopted else None,  # = update_adoption(pairs, ...)
        "update_adoption_ci": bootstrap_mean_ci(adopted),  # 95 %, pairs resampled
        "confusion_index": sum(crossed) / len(crossed) if crossed else None,  # = confusion_index(pairs, ...)
        "confusion_index_ci": bootstrap_mean_ci(crossed),
        "pair_asymmetry": pair_asymmetry(pairs, predictions),
        "n_pairs": len(pairs),
        "time_accuracy": time_accuracy(items, predictions, time_slices),
        "old_knowledge_retention": old_knowledge_retention(items, predictions),
        "now": {"em": sum(now_em) / len(now_em) if now_em else None, "n": len(now_em)},
        "n": len(items),
    }


@register_evaluator("paired")
def paired_evaluator(ctx: EvalContext) -> list[dict]:
    """Rows of group ``paired``: one per set of timestamped questions and one over all of them."""
    time_slices = slices(ctx)
    rows, all_items, all_predictions = [], [], {}
    sets = temporal_sets(ctx)
    for eval_set in sets:
        golds = [
            latest_answers(item, ctx.checkpoint) if item.get("timestamp") is None else item["answers"]
            for item in eval_set.items
        ]
        predictions, _ = generate(ctx, eval_set, golds=golds)
        items = [qa_item(item, answers=gold) for item, gold in zip(eval_set.items, golds)]
        rows.append(
            row(
                ctx,
                "paired",
                eval_set.kind,
                eval_set.name,
                eval_set.step,
                **paired_metrics(items, predictions, time_slices),
            )
        )
        all_items += items
        all_predictions.update(predictions)
    if sets:
        rows.append(
            row(ctx, "paired", sets[0].kind, ALL, None, **paired_metrics(all_items, all_predictions, time_slices))
        )
    return rows
