"""Helpers shared by the evaluators: item selection, QA-item conversion, generation-based scoring."""

from __future__ import annotations

import random
from typing import Callable, Iterable, Optional

from evolve_train.data.qa_items import QAItem
from evolve_train.data.timeline import SET_KINDS, EvalSet
from evolve_train.data.world_probes import PAIRED_KIND
from evolve_train.evaluation.context import EvalContext, write_predictions
from evolve_train.evaluation.metrics.answer import exact_match, prediction_of

ALL = "all"
"""``set_name`` of a row aggregated over every set evaluated at the checkpoint."""


def qa_item(item: dict, question: Optional[str] = None, answers: Optional[list[str]] = None) -> QAItem:
    """The metric library's view of an eval item dict (timestamps as strings)."""
    timestamp = item.get("timestamp")
    return QAItem(
        id=item["id"],
        question=question if question is not None else item["question"],
        answers=list(answers if answers is not None else item["answers"]),
        set=item.get("set"),
        step=item.get("step"),
        timestamp=None if timestamp is None else str(timestamp),
        pair_id=item.get("pair_id"),
        dimension=item.get("dimension"),
        options=item.get("options"),
        gold_index=item.get("gold_index"),
        stable=item.get("stable"),
        base_question=item.get("base_question"),
        extra=item.get("extra") or {},
    )


def select(ctx: EvalContext, keep: Callable[[dict], bool], kinds: Optional[Iterable[str]] = None) -> list[EvalSet]:
    """The checkpoint's sets (of ``kinds`` when given) reduced to the items ``keep`` accepts; empty sets dropped.

    Sets of a later step (``eval.forward_transfer``) are left out: forward transfer is a §3 matrix notion,
    measured on the splits; the model before training (checkpoint -1) gets every set."""
    kinds = None if kinds is None else set(kinds)
    chosen = []
    for eval_set in ctx.sets():
        if kinds is not None and eval_set.kind not in kinds:
            continue
        if ctx.checkpoint >= 0 and eval_set.step is not None and eval_set.step > ctx.checkpoint:
            continue
        items = [item for item in eval_set.items if keep(item)]
        if items:
            chosen.append(EvalSet(eval_set.name, eval_set.kind, eval_set.step, items))
    return chosen


def temporal_sets(ctx: EvalContext) -> list[EvalSet]:
    """Sets of timestamped questions for §4/§5: the ``paired`` probe sets when the data has them; otherwise
    the timestamped items of every other set except Outdated (whose items repeat Updated's questions with
    the older gold)."""
    paired = select(ctx, lambda item: True, kinds=[PAIRED_KIND])
    if paired or any(s.kind == PAIRED_KIND for s in ctx.timeline.eval_sets):
        return paired
    return select(
        ctx,
        lambda item: item.get("timestamp") is not None and item.get("set") != "outdated",
        kinds=[k for k in {s.kind for s in ctx.timeline.eval_sets} if k != "outdated"],
    )


def split_sets(ctx: EvalContext) -> list[EvalSet]:
    """The checkpoint's EvolvingQA split sets (Unchanged, New_k, Updated_k, Outdated_k)."""
    return [s for s in ctx.sets() if s.kind in SET_KINDS]


def generate(
    ctx: EvalContext,
    eval_set: EvalSet,
    golds: Optional[list[list[str]]] = None,
    prompts: Optional[list[str]] = None,
    save: bool = True,
) -> tuple[dict[str, str], dict[str, int]]:
    """Greedy predictions (cut at the stop strings) and EM per item id; writes the set's predictions file."""
    prompts = prompts or [ctx.timeline.prompt(item) for item in eval_set.items]
    golds = golds or [item["answers"] for item in eval_set.items]
    raw = ctx.answers(prompts)
    predictions, correct, records = {}, {}, []
    for item, prompt, generation, gold in zip(eval_set.items, prompts, raw, golds):
        prediction = prediction_of(generation, ctx.cfg.stop_strings, ctx.cfg.stop_patterns)
        predictions[item["id"]] = prediction
        correct[item["id"]] = exact_match(prediction, gold)
        records.append(
            {
                "id": item["id"],
                "prompt": prompt,
                "generation": generation,
                "prediction": prediction,
                "golds": gold,
                "correct": correct[item["id"]],
            }
        )
    if save and ctx.writes and ctx.run_dir is not None and ctx.cfg.save_predictions:
        write_predictions(ctx.run_dir, ctx.checkpoint, eval_set.name, records)
    return predictions, correct


def row(ctx: EvalContext, group: str, kind: str, set_name: str, set_step: Optional[int], **metrics) -> dict:
    return {
        "group": group,
        "checkpoint": ctx.checkpoint,
        "set": kind,
        "set_name": set_name,
        "set_step": set_step,
        **metrics,
    }


def sample(items: list[dict], cap: int, seed: str) -> list[dict]:
    """A fixed seeded sample of at most ``cap`` items (all when ``cap`` <= 0), in their original order."""
    if cap <= 0 or len(items) <= cap:
        return list(items)
    keep = set(random.Random(seed).sample(range(len(items)), cap))
    return [item for index, item in enumerate(items) if index in keep]


def mean(values: list[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None
