"""``paraphrase_gap`` and ``flip_rate`` (docs/metrics.md#8-statistics-and-hygiene), and ``hygiene`` = both; see docs/hygiene.md.

Both ask every question of the EvolvingQA split sets (Unchanged, New_k, Updated_k, Outdated_k) again in
label-preserving **perturbed variants**: the item's ``extra.variants`` when it has them (the embedded world:
the relation's held-out phrasings, never in any corpus), otherwise the configured rewrites
(``eval.paraphrase_gap.rewrites``: regex or template rewrites that keep the gold). An item with no variant is
skipped (counted in ``n_skipped``).

* ``paraphrase_gap``: per split set, ``paraphrase_gap`` = acc(original) − mean over k of acc(variant k),
  with up to ``eval.paraphrase_gap.variants`` (3) variants per question (with unequal numbers of variants, the
  per-question mean over its variants); ``flagged`` when above ``eval.gate.paraphrase_gap_max``. A seeded
  sample of original/perturbed pairs with both predictions goes to ``<run_dir>/paraphrase_spotcheck.jsonl``
  (``label_preserved: null``, for a human to confirm the gold still holds).
* ``flip_rate``: per split set, the fraction of questions whose normalized prediction differs across K
  (``eval.flip_rate.templates`` = 4) equivalent templates: the original and K−1 variants. Greedy decoding
  with ``eval.flip_rate.samples`` = 1; with n > 1, n sampled answers per template and their majority.

Each row also carries ``by_kind``: per perturbation kind — the surface kinds ``case``, ``spacing``,
``punctuation``, ``qa_frame`` (:func:`surface_variants`) and ``heldout`` (the variants above) —
``paraphrase_gap``, ``acc_perturbed`` and ``flip_rate`` (the original against that kind, greedy), so a
user sees which kind of surface form the model depends on.

Each also writes an ``all`` row pooled over Unchanged, New and Updated (Outdated repeats Updated's questions
with the stale gold, so it is reported per set but not pooled); ``evolve-gate`` reads the ``all`` rows.
Greedy generations are shared with the other evaluators through ``EvalContext.answers``; sampled ones are
drawn by ``EvalContext.samples`` (``TextFormat.sample``).
"""

from __future__ import annotations

import json
import random
import re
from typing import Optional

from evolve_train.data.timeline import SET_KINDS, EvalSet
from evolve_train.errors import ConfigError
from evolve_train.evaluation.context import EvalContext
from evolve_train.evaluation.evaluators.common import ALL, row, sample, select
from evolve_train.evaluation.metrics.answer import exact_match, prediction_of
from evolve_train.evaluation.metrics.stats import flip_rate
from evolve_train.evaluation.registry import register_evaluator
from evolve_train.evaluation.rows import POOLED_KINDS  # pooled into the ``all`` rows

SPOTCHECK = "paraphrase_spotcheck.jsonl"


# ---------------------------------------------------------------- config


def _setting(cfg, section: str, name: str, default):
    return getattr(getattr(cfg, section, None), name, default)


def check_rewrites(rewrites) -> list[dict]:
    """Validate ``eval.paraphrase_gap.rewrites``; ConfigError names the bad entry."""
    checked = []
    for k, rewrite in enumerate(rewrites or []):
        key = f"eval.paraphrase_gap.rewrites[{k}]"
        rewrite = dict(rewrite)
        unknown = sorted(set(rewrite) - {"name", "pattern", "replacement", "template"})
        if unknown:
            raise ConfigError(f"{key}: unknown key(s) {unknown} (known: name, pattern, replacement, template)")
        if ("pattern" in rewrite) == ("template" in rewrite):
            raise ConfigError(f"{key}: give either 'pattern' (with 'replacement') or 'template'")
        if "pattern" in rewrite:
            if "replacement" not in rewrite:
                raise ConfigError(f"{key}: a 'pattern' rewrite needs a 'replacement'")
            try:
                re.compile(rewrite["pattern"])
            except re.error as err:
                raise ConfigError(f"{key}: invalid regular expression {rewrite['pattern']!r}: {err}") from None
        elif "{question}" not in rewrite["template"]:
            raise ConfigError(
                f"{key}: a template must contain {{question}} (it rewrites the question, keeping its gold)"
            )
        rewrite.setdefault("name", f"rewrite{k}")
        checked.append(rewrite)
    return checked


def check_config(cfg) -> None:
    """Validate the hygiene settings of ``eval`` (called before training starts): the rewrites, and the
    sections' own range checks again (a config may have changed since it was built)."""
    gap, flips = getattr(cfg, "paraphrase_gap", None), getattr(cfg, "flip_rate", None)
    if gap is not None:
        check_rewrites(gap.rewrites)
        gap.check()
    if flips is not None:
        flips.check()


# ---------------------------------------------------------------- variants


def apply_rewrite(rewrite: dict, item: dict) -> Optional[str]:
    """The item's question rewritten, or None when the rewrite does not apply (no match, no change)."""
    question = item["question"]
    if "pattern" in rewrite:
        text = re.sub(rewrite["pattern"], rewrite["replacement"], question)
    else:
        text = rewrite["template"].format(**{**item, "question": question})
    return text if text != question else None


def perturbations(item: dict, rewrites: list[dict], limit: int) -> list[tuple[str, str]]:
    """Up to ``limit`` (name, perturbed question): the item's ``extra.variants``, else the rewrites."""
    variants = [
        (f"variant{k}", v) for k, v in enumerate((item.get("extra") or {}).get("variants") or []) if isinstance(v, str)
    ]
    if not variants:
        variants = [(r["name"], text) for r in rewrites if (text := apply_rewrite(r, item)) is not None]
    seen, out = {item["question"]}, []
    for name, text in variants:
        if text not in seen:
            seen.add(text)
            out.append((name, text))
    return out[:limit]


SURFACE_KINDS = ("case", "spacing", "punctuation", "qa_frame")
"""Surface perturbations of ``by_kind`` (besides ``heldout``, the item's variants): see :func:`surface_variants`."""


def surface_variants(question: str) -> dict[str, str]:
    """Label-preserving surface rewrites of a question, by kind: ``case`` (lowercased; uppercased if it already
    is), ``spacing`` (every space doubled), ``punctuation`` (a trailing ``.?!:`` removed, else ``:`` added) and
    ``qa_frame`` (``Question: <q>\nAnswer:``). A rewrite that leaves the question as it is is left out."""
    stripped = question.rstrip()
    punctuated = stripped[:-1].rstrip() if stripped[-1:] in (".", "?", "!", ":") else stripped + ":"
    kinds = {
        "case": question.lower() if question.lower() != question else question.upper(),
        "spacing": question.replace(" ", "  "),
        "punctuation": punctuated,
        "qa_frame": f"Question: {question}\nAnswer:",
    }
    return {kind: text for kind, text in kinds.items() if text != question}


def kind_variants(item: dict, rewrites: list[dict], limit: int) -> dict[str, list[str]]:
    """Per perturbation kind, the item's perturbed questions: the surface kinds, and ``heldout`` (the item's
    ``extra.variants`` or the configured rewrites, as :func:`perturbations`)."""
    kinds = {kind: [text] for kind, text in surface_variants(item["question"]).items()}
    heldout = [text for _, text in perturbations(item, rewrites, limit)]
    if heldout:
        kinds["heldout"] = heldout
    return kinds


def kind_stats(plan: list[tuple[dict, dict[str, list[str]]]], answer) -> dict:
    """``by_kind`` of one row: per kind, paraphrase_gap / acc_perturbed / flip_rate over the questions that
    have that kind (greedy answers; ``answer(item, question)`` gives the prediction)."""
    out = {}
    for kind in SURFACE_KINDS + ("heldout",):
        original, perturbed, templates = [], [], []
        for item, kinds in plan:
            if kind not in kinds:
                continue
            first = answer(item, item["question"])
            predictions = [answer(item, text) for text in kinds[kind]]
            original.append(exact_match(first, item["answers"]))
            perturbed.append([exact_match(p, item["answers"]) for p in predictions])
            templates.append([first] + predictions)
        stats = gap_stats(original, perturbed)
        out[kind] = {
            "paraphrase_gap": stats["paraphrase_gap"],
            "acc_perturbed": stats["acc_perturbed"],
            "flip_rate": flip_rate(templates),
            "n": stats["n"],
        }
    return out


def attach_by_kind(ctx: EvalContext, sets: list[EvalSet], rows: list[dict], limit: int) -> None:
    """Add ``by_kind`` (:func:`kind_stats`) to each set's row and to the pooled ``all`` row."""
    rewrites = _rewrites(ctx)
    plans = {s.name: [(item, kind_variants(item, rewrites, limit)) for item in s.items] for s in sets}
    prompts = [
        _prompt(ctx, item, q)
        for plan in plans.values()
        for item, kinds in plan
        for q in [item["question"]] + [t for texts in kinds.values() for t in texts]
    ]
    answers = _greedy(ctx, prompts)
    answer = lambda item, question: answers[_prompt(ctx, item, question)]  # noqa: E731
    pooled = [entry for s in sets if s.kind in POOLED_KINDS for entry in plans[s.name]]
    for r in rows:
        r["by_kind"] = kind_stats(pooled if r["set_name"] == ALL else plans[r["set_name"]], answer)


def gap_stats(original: list[int], perturbed: list[list[int]]) -> dict:
    """paraphrase_gap over questions: acc(original) − mean over questions of the mean over its variants
    (= acc(original) − mean over k of acc(variant k) when every question has the same k variants)."""
    n = len(original)
    if n == 0:
        return {
            "paraphrase_gap": None,
            "acc_original": None,
            "acc_perturbed": None,
            "acc_variants": None,
            "k": 0,
            "n": 0,
        }
    acc_original = sum(original) / n
    acc_perturbed = sum(sum(v) / len(v) for v in perturbed) / n
    ks = {len(v) for v in perturbed}
    per_k = [sum(v[j] for v in perturbed) / n for j in range(ks.pop())] if len(ks) == 1 else None
    return {
        "paraphrase_gap": acc_original - acc_perturbed,
        "acc_original": acc_original,
        "acc_perturbed": acc_perturbed,
        "acc_variants": per_k,
        "k": min(len(v) for v in perturbed),
        "n": n,
    }


def _flag(value: Optional[float], threshold: Optional[float]) -> Optional[bool]:
    return None if value is None or threshold is None else bool(value > threshold)


# ---------------------------------------------------------------- generation


def _prompt(ctx: EvalContext, item: dict, question: str) -> str:
    return ctx.timeline.prompt({**item, "question": question})


def _greedy(ctx: EvalContext, prompts: list[str]) -> dict[str, str]:
    unique = list(dict.fromkeys(prompts))
    stops = ctx.cfg.stop_strings, ctx.cfg.stop_patterns
    return dict(zip(unique, (prediction_of(g, *stops) for g in ctx.answers(unique))))


def _sampled(ctx: EvalContext, prompts: list[str]) -> dict[str, list[str]]:
    unique = list(dict.fromkeys(prompts))
    return {
        p: [prediction_of(g, ctx.cfg.stop_strings, ctx.cfg.stop_patterns) for g in generations]
        for p, generations in zip(unique, ctx.samples(unique))
    }


# ---------------------------------------------------------------- the evaluators


def hygiene_sets(ctx: EvalContext) -> list[EvalSet]:
    """The checkpoint's split sets, each reduced to a seeded sample (``eval.paraphrase_gap.max_items_per_set``)."""
    cap = _setting(ctx.cfg, "paraphrase_gap", "max_items_per_set", 0)
    return [
        EvalSet(s.name, s.kind, s.step, sample(s.items, cap, f"hygiene-{s.name}"))
        for s in select(ctx, lambda item: True, kinds=SET_KINDS)
    ]


def _rewrites(ctx: EvalContext) -> list[dict]:
    return check_rewrites(_setting(ctx.cfg, "paraphrase_gap", "rewrites", []))


@register_evaluator("paraphrase_gap")
def paraphrase_gap_evaluator(ctx: EvalContext) -> list[dict]:
    """Rows of group ``paraphrase_gap``: one per split set and one ``all`` (see the module docstring)."""
    limit = _setting(ctx.cfg, "paraphrase_gap", "variants", 3)
    threshold = _setting(ctx.cfg, "gate", "paraphrase_gap_max", 0.03)
    rewrites = _rewrites(ctx)
    sets = hygiene_sets(ctx)
    plans = [[(item, perturbations(item, rewrites, limit)) for item in s.items] for s in sets]
    prompts = [
        _prompt(ctx, item, q)
        for plan in plans
        for item, variants in plan
        for q in [item["question"]] + [text for _, text in variants]
        if variants
    ]
    answers = _greedy(ctx, prompts)
    rows, pooled_o, pooled_p, checks = [], [], [], []
    for eval_set, plan in zip(sets, plans):
        original, perturbed = [], []
        for item, variants in plan:
            if not variants:
                continue
            first = answers[_prompt(ctx, item, item["question"])]
            original.append(exact_match(first, item["answers"]))
            outcomes = []
            for name, text in variants:
                prediction = answers[_prompt(ctx, item, text)]
                outcomes.append(exact_match(prediction, item["answers"]))
                if eval_set.kind in POOLED_KINDS:
                    checks.append(
                        {
                            "checkpoint": ctx.checkpoint,
                            "set": eval_set.name,
                            "id": item["id"],
                            "variant": name,
                            "original": item["question"],
                            "perturbed": text,
                            "gold": item["answers"],
                            "prediction_original": first,
                            "prediction_perturbed": prediction,
                            "label_preserved": None,
                        }
                    )
            perturbed.append(outcomes)
        stats = gap_stats(original, perturbed)
        rows.append(
            row(
                ctx,
                "paraphrase_gap",
                eval_set.kind,
                eval_set.name,
                eval_set.step,
                **stats,
                n_skipped=len(plan) - len(original),
                threshold=threshold,
                flagged=_flag(stats["paraphrase_gap"], threshold),
            )
        )
        if eval_set.kind in POOLED_KINDS:
            pooled_o += original
            pooled_p += perturbed
    stats = gap_stats(pooled_o, pooled_p)
    skipped = sum(r["n_skipped"] for r in rows if r["set"] in POOLED_KINDS)
    rows.append(
        row(
            ctx,
            "paraphrase_gap",
            "splits",
            ALL,
            None,
            **stats,
            n_skipped=skipped,
            threshold=threshold,
            flagged=_flag(stats["paraphrase_gap"], threshold),
        )
    )
    attach_by_kind(ctx, sets, rows, limit)
    _write_spotcheck(ctx, checks)
    return rows


def _write_spotcheck(ctx: EvalContext, checks: list[dict]) -> None:
    count = _setting(ctx.cfg, "paraphrase_gap", "spotcheck", 20)
    if not ctx.writes or ctx.run_dir is None or count <= 0:
        return
    from evolve_train.utils.io import atomic_write_text

    chosen = sorted(random.Random(f"spotcheck-{ctx.checkpoint}").sample(range(len(checks)), min(count, len(checks))))
    path = ctx.run_dir / SPOTCHECK
    kept = []
    if path.exists():
        kept = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        kept = [r for r in kept if r.get("checkpoint") != ctx.checkpoint]
    records = kept + [checks[k] for k in chosen]
    records.sort(key=lambda r: r.get("checkpoint", 0))
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


@register_evaluator("flip_rate")
def flip_rate_evaluator(ctx: EvalContext) -> list[dict]:
    """Rows of group ``flip_rate``: one per split set and one ``all`` (see the module docstring)."""
    k = _setting(ctx.cfg, "flip_rate", "templates", 4)
    samples = _setting(ctx.cfg, "flip_rate", "samples", 1)
    threshold = _setting(ctx.cfg, "gate", "flip_rate_max", 0.10)
    rewrites = _rewrites(ctx)
    sets = hygiene_sets(ctx)
    plans = [
        [(item, [item["question"]] + [t for _, t in perturbations(item, rewrites, k - 1)]) for item in s.items]
        for s in sets
    ]
    prompts = [
        _prompt(ctx, item, q) for plan in plans for item, templates in plan if len(templates) > 1 for q in templates
    ]
    answers = _greedy(ctx, prompts) if samples == 1 else _sampled(ctx, prompts)
    rows, pooled = [], []
    for eval_set, plan in zip(sets, plans):
        per_question = [
            [answers[_prompt(ctx, item, q)] for q in templates] for item, templates in plan if len(templates) > 1
        ]
        value = flip_rate(per_question)
        rows.append(
            row(
                ctx,
                "flip_rate",
                eval_set.kind,
                eval_set.name,
                eval_set.step,
                flip_rate=value,
                k=min((len(t) for t in per_question), default=0),
                samples=samples,
                n=len(per_question),
                n_skipped=len(plan) - len(per_question),
                threshold=threshold,
                flagged=_flag(value, threshold),
            )
        )
        if eval_set.kind in POOLED_KINDS:
            pooled += per_question
    value = flip_rate(pooled)
    skipped = sum(r["n_skipped"] for r in rows if r["set"] in POOLED_KINDS)
    rows.append(
        row(
            ctx,
            "flip_rate",
            "splits",
            ALL,
            None,
            flip_rate=value,
            k=min((len(t) for t in pooled), default=0),
            samples=samples,
            n=len(pooled),
            n_skipped=skipped,
            threshold=threshold,
            flagged=_flag(value, threshold),
        )
    )
    attach_by_kind(ctx, sets, rows, k - 1)
    return rows


@register_evaluator("hygiene")
def hygiene_evaluator(ctx: EvalContext) -> list[dict]:
    """``paraphrase_gap`` and ``flip_rate`` together."""
    return paraphrase_gap_evaluator(ctx) + flip_rate_evaluator(ctx)


# ---------------------------------------------------------------- the hooks in ``train`` (run.py)


def preflight(cfg, timeline, qa_adaptation=None) -> dict:
    """Before anything is written or trained: validate the hygiene settings and check that no private eval
    item leaks into the training examples, the QA-adaptation set or the prompt (``data/hygiene.py``)."""
    from evolve_train.data.hygiene import check_private_leaks

    check_config(cfg.eval)
    pairs = qa_adaptation.pairs if qa_adaptation is not None else None
    source = str(qa_adaptation.path) if qa_adaptation is not None else None
    return check_private_leaks(timeline, pairs, source)


def record_private(run_dir, timeline, eval_cfg, checkpoint: int, rows: list[dict]) -> list[dict]:
    """Append the evaluation of ``checkpoint`` on private items to ``<run_dir>/private_evaluations.jsonl``
    (time, checkpoint, set, count); returns ``rows`` unchanged."""
    from evolve_train.data.hygiene import record_private_evaluations

    if run_dir is not None:
        sets = EvalContext(timeline=timeline, checkpoint=checkpoint, cfg=eval_cfg, run_dir=run_dir).sets()
        record_private_evaluations(run_dir, checkpoint, sets, rows)
    return rows
