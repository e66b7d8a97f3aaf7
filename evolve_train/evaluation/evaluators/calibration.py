"""``calibration``: multiple choice by option log-likelihood and confidence calibration (docs/metrics.md#7-multiple-choice-and-confidence).

Every item with ``options`` (the world's paired and dimension probes carry them) is scored by the sum of
its options' token log-probabilities given the prompt, batched (``EvalContext.option_scores``). Per set
and over all of them: acc, acc_norm, ece, brier, overconfident_error_rate (τ = ``eval.overconfidence_tau``)
and n. The ``all`` row adds ``position_consistency``: a seeded sample of ``eval.position_items``
questions is asked with lettered options ("A. ...") under K cyclic rotations of the option order
(``eval.position_rotations``, 0 = one per option) and the letter with the highest log-likelihood chosen;
a question counts when the chosen option text is the same under every rotation.
"""

from __future__ import annotations

from evolve_train.evaluation.context import EvalContext
from evolve_train.evaluation.evaluators.common import ALL, row, sample, select
from evolve_train.evaluation.metrics.calibration import (
    calibration_summary,
    cyclic_rotations,
    mc_predict,
    position_consistency,
)
from evolve_train.evaluation.registry import register_evaluator

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def gold_index(item: dict) -> int:
    return item["gold_index"] if item.get("gold_index") is not None else item["options"].index(item["answers"][0])


def lettered_prompt(prompt: str, options: list[str]) -> str:
    """The prompt followed by the options as "A. ..." lines and "Answer:"."""
    lines = [f"{LETTERS[k]}. {option}" for k, option in enumerate(options)]
    return "\n".join([prompt, *lines, "Answer:"])


def _summary(ctx: EvalContext, items: list[dict]) -> dict:
    scores = ctx.option_scores([(ctx.timeline.prompt(item), item["options"]) for item in items])
    return calibration_summary(
        scores,
        [item["options"] for item in items],
        [gold_index(item) for item in items],
        getattr(ctx.cfg, "overconfidence_tau", 0.8),
    )


def position_check(ctx: EvalContext, items: list[dict]) -> dict:
    """§7 position_consistency on a seeded sample (lettered options under K cyclic rotations)."""
    chosen_items = sample(
        [i for i in items if len(i["options"]) <= len(LETTERS)],
        getattr(ctx.cfg, "position_items", 64),
        f"position-{ctx.checkpoint}",
    )
    rotations_wanted = getattr(ctx.cfg, "position_rotations", 0)
    questions, owners = [], []
    for index, item in enumerate(chosen_items):
        options = item["options"]
        for rotated in cyclic_rotations(options, rotations_wanted or len(options)):
            questions.append(
                (lettered_prompt(ctx.timeline.prompt(item), rotated), [LETTERS[k] for k in range(len(rotated))])
            )
            owners.append((index, rotated))
    chosen: list[list[str]] = [[] for _ in chosen_items]
    for (index, rotated), scores in zip(owners, ctx.option_scores(questions)):
        chosen[index].append(rotated[mc_predict(scores)])
    return {"position_consistency": position_consistency(chosen) if chosen else None, "position_n": len(chosen_items)}


@register_evaluator("calibration")
def calibration_evaluator(ctx: EvalContext) -> list[dict]:
    """Rows of group ``calibration``: one per set with multiple-choice items and one over all of them."""
    rows, everything = [], []
    sets = select(ctx, lambda item: bool(item.get("options")))
    for eval_set in sets:
        rows.append(
            row(ctx, "calibration", eval_set.kind, eval_set.name, eval_set.step, **_summary(ctx, eval_set.items))
        )
        everything += eval_set.items
    if sets:
        rows.append(
            row(
                ctx,
                "calibration",
                "mixed" if len({s.kind for s in sets}) > 1 else sets[0].kind,
                ALL,
                None,
                **_summary(ctx, everything),
                **position_check(ctx, everything),
            )
        )
    return rows
