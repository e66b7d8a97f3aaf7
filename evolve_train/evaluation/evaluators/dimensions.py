"""``dimensions``: accuracy per EvolveBench dimension and error clustering (docs/metrics.md#6-the-five-dimensions).

Every item that carries a ``dimension`` (the world's ``dimension_<k>`` probes, or loaded data) is asked
open-form (greedy generation, EM against its gold) and, when it has ``options``, as multiple choice
(argmax option log-likelihood, docs/metrics.md#7-multiple-choice-and-confidence; scores shared with ``calibration``). Per set and over all of
them (``set_name: all``): ``dimensions[d]`` = {em, n, error_share, mc_acc, mc_n}; error_share is computed
on the open-form answers.
"""

from __future__ import annotations

from evolve_train.evaluation.context import EvalContext
from evolve_train.evaluation.evaluators.common import ALL, generate, row, select
from evolve_train.evaluation.metrics.calibration import mc_predict
from evolve_train.evaluation.metrics.dimensions import dimension_summary
from evolve_train.evaluation.registry import register_evaluator


def _summary(ctx: EvalContext, items: list[dict], correct: dict[str, int]) -> dict:
    summary = dimension_summary([item["dimension"] for item in items], [correct[item["id"]] for item in items])
    with_options = [item for item in items if item.get("options")]
    scores = ctx.option_scores([(ctx.timeline.prompt(item), item["options"]) for item in with_options])
    mc: dict[str, list[int]] = {}
    for item, option_scores in zip(with_options, scores):
        gold = item.get("gold_index")
        if gold is None:
            gold = item["options"].index(item["answers"][0])
        mc.setdefault(item["dimension"], []).append(int(mc_predict(option_scores) == gold))
    for dimension, entry in summary.items():
        hits = mc.get(dimension, [])
        entry.update(mc_acc=sum(hits) / len(hits) if hits else None, mc_n=len(hits))
    n = len(items)
    return {"em": sum(correct[item["id"]] for item in items) / n if n else None, "n": n, "dimensions": summary}


@register_evaluator("dimensions")
def dimensions_evaluator(ctx: EvalContext) -> list[dict]:
    """Rows of group ``dimensions``: one per set with dimension items and one over all of them."""
    rows, everything, all_correct = [], [], {}
    sets = select(ctx, lambda item: item.get("dimension") is not None)
    for eval_set in sets:
        _, correct = generate(ctx, eval_set)
        rows.append(
            row(
                ctx, "dimensions", eval_set.kind, eval_set.name, eval_set.step, **_summary(ctx, eval_set.items, correct)
            )
        )
        everything += eval_set.items
        all_correct.update(correct)
    if sets:
        rows.append(row(ctx, "dimensions", sets[0].kind, ALL, None, **_summary(ctx, everything, all_correct)))
    return rows
