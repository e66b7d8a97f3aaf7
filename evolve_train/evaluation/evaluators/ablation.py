"""``ablation``: the three-way timestamp ablation and the invariance test of docs/metrics.md#5-timestamp-ablation.

Every timestamped question of the temporal sets (see ``common.temporal_sets``) is asked with its own
timestamp (``true``), with one drawn with a fixed seed from the data's other timestamps (``shuffled``) and
without one (``none``); all three are scored against the gold of the true timestamp. ``timestamp_reliance``
= acc_true − acc_shuffled. ``timestamp_invariance`` = share of questions whose normalized prediction is the
same under each of K other timestamps (``eval.ablation_k``; fewer when the data has fewer other
timestamps — the row's ``k`` says how many). Prompts are rebuilt from ``extra.ts_template`` /
``extra.cloze`` when the item has them, else by replacing (removing) the timestamp text in the question.
Generations are cached per checkpoint, so the ``true`` prompts (asked by ``paired``) cost nothing more.
"""

from __future__ import annotations

from typing import Optional

from evolve_train.data.timestamps import parse_timestamp, strip_timestamp_phrase
from evolve_train.evaluation.context import EvalContext
from evolve_train.evaluation.evaluators.common import ALL, qa_item, row, temporal_sets
from evolve_train.evaluation.metrics.answer import prediction_of
from evolve_train.evaluation.metrics.temporal import draw_other_timestamps, timestamp_ablation, timestamp_invariance
from evolve_train.evaluation.registry import register_evaluator


def retimestamped(item: dict, timestamp: Optional[str]) -> Optional[str]:
    """The item's question with another timestamp (None: without one); None when it cannot be rebuilt."""
    extra = item.get("extra") or {}
    own = str(item["timestamp"])
    if timestamp is None:
        return extra.get("cloze") or strip_timestamp_phrase(item["question"], own)
    if "ts_template" in extra:
        return extra["ts_template"].format(timestamp=timestamp)
    return item["question"].replace(own, timestamp) if own in item["question"] else None


def timestamp_pool(ctx: EvalContext) -> list[str]:
    """Distinct timestamps of the timeline's timestamped questions (all steps), in time order."""
    stamps = {
        str(item["timestamp"]) for s in ctx.timeline.eval_sets for item in s.items if item.get("timestamp") is not None
    }
    return sorted(stamps, key=lambda ts: (parse_timestamp(ts), ts))


def _ablate(ctx: EvalContext, items: list[dict], pool: list[str]) -> dict:
    seed, wanted = getattr(ctx.cfg, "ablation_seed", 0), getattr(ctx.cfg, "ablation_k", 3)
    usable, prompts = [], {"true": [], "shuffled": [], "none": []}
    replaced_prompts: list[list[str]] = []
    for item in items:
        own = str(item["timestamp"])
        others = [ts for ts in pool if parse_timestamp(ts) != parse_timestamp(own)]
        if not others or retimestamped(item, others[0]) is None:
            continue
        k = min(wanted, len(others))
        shuffled = draw_other_timestamps(own, pool, 1, seed, f"{item['id']}/shuffled")[0]
        invariance = draw_other_timestamps(own, pool, k, seed, f"{item['id']}/invariance")
        prompt = lambda question: ctx.timeline.prompt({**item, "question": question})  # noqa: E731
        usable.append(item)
        prompts["true"].append(ctx.timeline.prompt(item))
        prompts["shuffled"].append(prompt(retimestamped(item, shuffled)))
        prompts["none"].append(prompt(retimestamped(item, None)))
        replaced_prompts.append([prompt(retimestamped(item, ts)) for ts in invariance])
    flat = [p for group in prompts.values() for p in group] + [p for group in replaced_prompts for p in group]
    stops = ctx.cfg.stop_strings, ctx.cfg.stop_patterns
    answers = dict(zip(flat, (prediction_of(g, *stops) for g in ctx.answers(flat))))
    ids = [item["id"] for item in usable]
    by_group = {name: dict(zip(ids, (answers[p] for p in group))) for name, group in prompts.items()}
    replaced = {item_id: [answers[p] for p in group] for item_id, group in zip(ids, replaced_prompts)}
    result = timestamp_ablation(
        [qa_item(item) for item in usable], by_group["true"], by_group["shuffled"], by_group["none"]
    )
    ks = [len(group) for group in replaced_prompts]
    result.update(
        timestamp_invariance=timestamp_invariance(by_group["true"], replaced) if usable else None,
        k=min(ks) if ks else 0,
        n_skipped=len(items) - len(usable),
    )
    return result


@register_evaluator("ablation")
def ablation_evaluator(ctx: EvalContext) -> list[dict]:
    """Rows of group ``ablation``: one per set of timestamped questions and one over all of them."""
    pool = timestamp_pool(ctx)
    rows, everything = [], []
    sets = temporal_sets(ctx)
    for eval_set in sets:
        items = [item for item in eval_set.items if item.get("timestamp") is not None]
        everything += items
        rows.append(row(ctx, "ablation", eval_set.kind, eval_set.name, eval_set.step, **_ablate(ctx, items, pool)))
    if sets:
        rows.append(row(ctx, "ablation", sets[0].kind, ALL, None, **_ablate(ctx, everything, pool)))
    return rows
