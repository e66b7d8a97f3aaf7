"""``year_resolved``: which year's value a checkpoint picks for a fact that changed (docs/metrics.md
"Year-resolved answers").

A fact is the undated question (``extra.cloze``) of the timeline's ``paired`` probes (the embedded world's
changed facts; DyKnow's); its values are the golds of its dated probes, one per timestamp ("year"), and a fact
with at least two distinct values is asked as a multiple-choice item whose options are those values (in year
order), scored by option log-likelihood as ``calibration`` scores options (docs/metrics.md#7-multiple-choice-and-confidence). It is asked once
undated and once with each of its years' dates (``extra.ts_template``). Every checkpoint is asked every fact
of the whole timeline, so the rows of all checkpoints are over the same items.

Rows (group ``year_resolved``): one per year (``set_name`` = the year) with ``n`` (facts with a value that
year), ``share_undated`` (the share of them whose undated answer is that year's value) and ``dated_acc`` (the
share answered with that year's value when asked with that year's date); one row ``all`` with
``knowledge_year`` (the year with the highest ``share_undated``; a tie goes to the latest year) with
``knowledge_year_ci`` (its 95 % bootstrap interval over facts, ``cutoff.resolved_year``), ``n`` (facts) and
``dated_acc`` over every (fact, year).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from evolve_train.data.timestamps import parse_timestamp
from evolve_train.data.world_probes import PAIRED_KIND
from evolve_train.evaluation.context import EvalContext
from evolve_train.evaluation.evaluators.ablation import retimestamped
from evolve_train.evaluation.evaluators.common import ALL, row
from evolve_train.evaluation.metrics.calibration import mc_predict
from evolve_train.evaluation.metrics.cutoff import resolved_year
from evolve_train.evaluation.registry import register_evaluator

GROUP = "year_resolved"


@dataclass
class Fact:
    key: str
    """The undated question."""
    item: dict
    """One of its dated probes (for the prompt template and the date form)."""
    values: dict[str, str]
    """Year (timestamp) -> the value it held then, in time order."""

    @property
    def options(self) -> list[str]:
        return list(dict.fromkeys(self.values.values()))


def _order(timestamp: str):
    return (parse_timestamp(timestamp), timestamp)


def changed_facts(eval_sets) -> list[Fact]:
    """Facts of the ``paired`` sets with at least two values: dated items grouped by ``extra.cloze`` (the first
    item seen for a year gives that year's value)."""
    facts: dict[str, Fact] = {}
    for eval_set in eval_sets:
        if eval_set.kind != PAIRED_KIND:
            continue
        for item in eval_set.items:
            extra = item.get("extra") or {}
            if item.get("timestamp") is None or not extra.get("cloze") or not extra.get("ts_template"):
                continue
            fact = facts.setdefault(extra["cloze"], Fact(extra["cloze"], item, {}))
            fact.values.setdefault(str(item["timestamp"]), item["answers"][0])
    out = []
    for fact in facts.values():
        fact.values = {year: fact.values[year] for year in sorted(fact.values, key=_order)}
        if len(fact.options) >= 2:
            out.append(fact)
    return out


def year_summary(
    facts: list[Fact], undated: Callable[[Fact], str], dated: Callable[[Fact, str], str]
) -> tuple[list[dict], dict]:
    """Per-year ``{year, n, share_undated, dated_acc}`` and the ``{knowledge_year, n, dated_acc}`` summary, from the
    option each fact is answered with undated (``undated(fact)``) and as of a year (``dated(fact, year)``)."""
    years = sorted({year for fact in facts for year in fact.values}, key=_order)
    picked = {fact.key: undated(fact) for fact in facts}
    per_year, right_total, asked_total = [], 0, 0
    for year in years:
        held = [fact for fact in facts if year in fact.values]
        same = sum(picked[fact.key] == fact.values[year] for fact in held)
        right = sum(dated(fact, year) == fact.values[year] for fact in held)
        right_total, asked_total = right_total + right, asked_total + len(held)
        per_year.append(
            {"year": year, "n": len(held), "share_undated": same / len(held), "dated_acc": right / len(held)}
        )
    knowledge: Optional[str] = None
    if per_year:
        best = max(entry["share_undated"] for entry in per_year)
        knowledge = [entry["year"] for entry in per_year if entry["share_undated"] == best][-1]
    summary = {
        "knowledge_year": _year(knowledge),
        "knowledge_year_ci": _year_interval(facts, picked, years),
        "n": len(facts),
        "dated_acc": right_total / asked_total if asked_total else None,
    }
    return per_year, summary


def _year(year: Optional[str]):
    return int(year) if year is not None and year.isdigit() else year


def _year_interval(facts: list[Fact], picked: dict[str, str], years: list[str]) -> Optional[list]:
    """The 95 % bootstrap interval (over facts) of ``knowledge_year`` (``cutoff.resolved_year``)."""
    if not facts:
        return None
    nan = float("nan")
    matches = [[float(picked[f.key] == f.values[y]) if y in f.values else nan for y in years] for f in facts]
    est = resolved_year(matches, years)
    return [_year(est.lo), _year(est.hi)] if est.lo is not None else None


@register_evaluator(GROUP)
def year_resolved_evaluator(ctx: EvalContext) -> list[dict]:
    """Rows of group ``year_resolved`` (none when the timeline has no fact with two values)."""
    facts = changed_facts(ctx.timeline.eval_sets)
    if not facts:
        return []
    prompt = lambda fact, year: ctx.timeline.prompt({**fact.item, "question": retimestamped(fact.item, year)})  # noqa: E731
    questions = [(fact, None) for fact in facts] + [(fact, year) for fact in facts for year in fact.values]
    scores = ctx.option_scores([(prompt(fact, year), fact.options) for fact, year in questions])
    chosen = {(fact.key, year): fact.options[mc_predict(s)] for (fact, year), s in zip(questions, scores)}
    per_year, summary = year_summary(
        facts, lambda fact: chosen[(fact.key, None)], lambda fact, year: chosen[(fact.key, year)]
    )
    rows = [row(ctx, GROUP, GROUP, entry["year"], None, **entry) for entry in per_year]
    return rows + [row(ctx, GROUP, GROUP, ALL, None, **summary)]
