"""``retrieval``: open-book evaluation over the snapshots seen so far (docs/metrics.md#10-open-book-evaluation).

At checkpoint i each question retrieves the top ``eval.retrieval.k`` passages (BM25) from the store of steps
<= i (``retrieval_index.py``: ``scope=all`` every step 0..i, ``latest`` step i only, ``newest_version`` each
document's newest version up to step i); ``eval.retrieval.template``
puts them, best first and each rendered by ``passage_template`` with its step's date, before the item's
closed-book prompt. The answer is generated and scored by the code that scores closed-book answers
(``splits.score_prompts``, ``paired.paired_metrics``), only the prompt differs.

Rows (group ``retrieval``; ``store`` = the checkpoint whose store answered, ``scope``, ``k``):

* one per split set (the ``splits`` sets of steps <= ``store``) with the closed-book ``em``/``f1`` of the same
  checkpoint, ``em_open``, ``f1_open``, ``recall@k`` (share of questions with a gold alias in the retrieved
  passages, §10), each with a 95 % bootstrap interval over questions (``*_ci``), ``gap`` = ``em_open`` − ``em``
  with its paired-bootstrap interval (``gap_ci``, §8), ``em_open_hit`` (``em_open`` on those questions),
  ``cut`` (share of prompts whose passages were cut to fit the model's positions) and ``passages`` (mean
  retrieved); stale evidence (HoH's question), on the questions with a known outdated answer (:func:`stale_answers`:
  the golds of the Outdated item asking the same question or sharing its ``pair_id``, less the question's own):
  ``n_stale_known`` of them, ``stale_at_k`` (share whose retrieved passages hold an outdated value, with its
  interval ``stale_at_k_ci``), ``em_open_stale`` / ``em_open_no_stale`` (open-book EM on those with / without a
  stale passage, ``n_stale`` / ``n_no_stale``) and ``outdated_open_stale`` (share of those with a stale passage
  answered with the outdated value); null where the set has no such question; one over Unchanged + New + Updated
  (``set_name: all``) that also carries ``retrieval_seconds`` (BM25 queries) and ``index_seconds`` (stores built
  at this evaluation; 0 when reused);
* with ``eval.retrieval.paired``: per temporal set and over all of them (``set_name: paired_all``) the §4
  metrics of ``paired`` open-book (``set: paired``: update adoption, confusion index... with their intervals).

The model before training (``eval.eval_initial``, checkpoint -1) is asked at every step i's store on the sets
of checkpoint i (``eval.retrieval.initial_every_store``): the retriever-only arm, rows with ``store`` = i.

Passages are cut to fit: the prompt plus ``eval.max_new_tokens`` must fit the model's positions
(``n_positions`` / ``max_position_embeddings``). Passages are kept in rank order while they fit whole; the first
that does not is cut at a token boundary (when at least :data:`MIN_PIECE` tokens are left) and the rest dropped.
Per-question records go to ``predictions/step_<k>/open_book[_store<i>]/<set>.jsonl`` with the retrieved
passages' ids, steps, dates and scores, and ``stale`` (1/0: a retrieved passage holds an outdated answer; null
without a known one).
"""

from __future__ import annotations

import time
from typing import Optional

from evolve_train.data.answers import normalize
from evolve_train.data.timeline import EvalSet, Timeline
from evolve_train.data.world_probes import PROBE_KINDS
from evolve_train.evaluation.context import EvalContext, write_predictions
from evolve_train.evaluation.evaluators.common import ALL, generate, qa_item, row, temporal_sets
from evolve_train.evaluation.evaluators.paired import latest_answers, paired_metrics, slices
from evolve_train.evaluation.evaluators.splits import em_f1, score_prompts
from evolve_train.evaluation.metrics.answer import contains_answer, exact_match
from evolve_train.evaluation.metrics.stats import bootstrap_mean_ci, paired_bootstrap_diff
from evolve_train.evaluation.registry import register_evaluator
from evolve_train.evaluation.retrieval_index import Passage, RetrievalIndex, index_for, preflight
from evolve_train.evaluation.rows import POOLED_KINDS

GROUP = "retrieval"
PAIRED_ALL = "paired_all"
"""``set_name`` of the open-book paired row over every temporal set."""
MIN_PIECE = 4
"""Fewest tokens of a passage kept when it has to be cut to fit (fewer: the passage is dropped)."""


def position_limit(ctx: EvalContext) -> Optional[int]:
    """Token ids a prompt and its answer may take together (None: no limit known, nothing is cut)."""
    config = getattr(ctx.model, "config", None)
    limit = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
    return int(limit) if limit and ctx.text_format is not None else None


class OpenBookPrompts:
    """The open-book prompts of questions and their retrieved passages, cut to fit the model's positions
    (batched: a few tokenizer calls for all the prompts of a call; each passage is tokenized once)."""

    def __init__(self, ctx: EvalContext):
        self.cfg, self.text_format = ctx.cfg.retrieval, ctx.text_format
        limit = position_limit(ctx)
        self.room = None if limit is None else limit - ctx.cfg.max_new_tokens
        self.separator = len(self.text_format.encode([self.cfg.separator])[0]) if self.room is not None else 0
        self._ids: dict[str, list[int]] = {}

    def render(self, passage: Passage) -> str:
        return self.cfg.passage_template.format(text=passage.text, date=passage.date, step=passage.step)

    def _prompt(self, question: str, pieces: list[str]) -> str:
        return self.cfg.template.format(passages=self.cfg.separator.join(pieces), question=question)

    def build(self, question: str, passages: list[Passage]) -> tuple[str, bool]:
        """``(prompt, cut)``: ``cut`` when a passage had to be shortened or left out to fit."""
        return self.build_many([(question, passages)])[0]

    def build_many(self, requests: list[tuple[str, list[Passage]]]) -> list[tuple[str, bool]]:
        if self.room is None:
            return [(self._prompt(q, [self.render(p) for p in ps]), False) for q, ps in requests]
        new = list({p.id: p for _, ps in requests for p in ps if p.id not in self._ids}.values())
        self._ids.update(zip((p.id for p in new), self.text_format.encode([self.render(p) for p in new])))
        bare = self.text_format.prompt_ids([self._prompt(q, []) for q, _ in requests])
        built = [self._fit(q, ps, self.room - len(ids)) for (q, ps), ids in zip(requests, bare)]
        lengths = self.text_format.prompt_ids([prompt for prompt, _, _ in built])
        out = []
        for (question, _), (prompt, cut, texts), ids in zip(requests, built, lengths):
            while texts and len(ids) > self.room:  # tokens merged across a boundary: shorten the last passage
                last = self.text_format.encode([texts[-1]])[0][:-2]
                texts = texts[:-1] + ([self.text_format.tokenizer.decode(last)] if len(last) >= MIN_PIECE else [])
                prompt, cut = self._prompt(question, texts), True
                ids = self.text_format.prompt_ids([prompt])[0]
            out.append((prompt, cut))
        return out

    def _fit(self, question: str, passages: list[Passage], room: int) -> tuple[str, bool, list[str]]:
        """Whole passages in rank order while they fit ``room`` tokens, then the next one cut at a token boundary
        (when :data:`MIN_PIECE` tokens are left); ``(prompt, cut, passage texts)``."""
        texts, cut = [], False
        for passage in passages:
            ids = self._ids[passage.id]
            need = len(ids) + (self.separator if texts else 0)
            if need <= room:
                texts.append(self.render(passage))
                room -= need
                continue
            cut, left = True, room - (self.separator if texts else 0)
            if left >= MIN_PIECE:
                texts.append(self.text_format.tokenizer.decode(ids[:left]))
            break
        return self._prompt(question, texts), cut, texts


def stores_of(ctx: EvalContext, index: RetrievalIndex) -> list[int]:
    """The stores this checkpoint is asked at: its own; every step's for the model before training."""
    if ctx.checkpoint >= 0:
        return [ctx.checkpoint]
    return list(range(len(index.by_step))) if ctx.cfg.retrieval.initial_every_store else []


def up_to(sets: list[EvalSet], store: int) -> list[EvalSet]:
    return [s for s in sets if s.step is None or s.step <= store]


class OpenBook:
    """One checkpoint asked at one store: retrieval for every question, cached by question."""

    def __init__(self, ctx: EvalContext, index: RetrievalIndex, store: int, prompts: OpenBookPrompts):
        self.ctx, self.store, self.prompts = ctx, store, prompts
        built = index.build_seconds
        self.passages = index.store(store)
        self.index_seconds = index.build_seconds - built
        self.retrieval_seconds = 0.0
        self.found: dict[str, list[tuple[Passage, float]]] = {}
        self.built: dict[str, tuple[str, bool]] = {}
        self.outdated = OutdatedAnswers(ctx.timeline)

    def ask(self, items: list[dict]) -> list[str]:
        """The open-book prompts of ``items`` (retrieving for the questions not asked before)."""
        missing = sorted({item["question"] for item in items} - set(self.found))
        if missing:
            start = time.perf_counter()
            self.found.update(zip(missing, self.passages.search(missing, self.ctx.cfg.retrieval.k)))
            self.retrieval_seconds += time.perf_counter() - start
        closed = [self.ctx.timeline.prompt(item) for item in items]
        todo = {prompt: item for prompt, item in zip(closed, items) if prompt not in self.built}
        requests = [(prompt, [p for p, _ in self.found[item["question"]]]) for prompt, item in todo.items()]
        self.built.update(zip(todo, self.prompts.build_many(requests)))
        return [self.built[prompt][0] for prompt in closed]

    def retrieved(self, item: dict) -> list[tuple[Passage, float]]:
        return self.found[item["question"]]

    def cut(self, item: dict) -> bool:
        return self.built[self.ctx.timeline.prompt(item)][1]


class OutdatedAnswers:
    """The outdated golds of the timeline's questions: each Outdated item's answers, by its question and by its
    ``pair_id`` (an Updated item and its Outdated twin ask the same question, and share the pair id where the
    data gives one)."""

    def __init__(self, timeline: Timeline):
        self.by_question: dict[str, list[str]] = {}
        self.by_pair: dict[str, list[str]] = {}
        for eval_set in timeline.eval_sets:
            if eval_set.kind != "outdated":
                continue
            for item in eval_set.items:
                self.by_question.setdefault(item["question"], []).extend(item["answers"])
                if item.get("pair_id"):
                    self.by_pair.setdefault(str(item["pair_id"]), []).extend(item["answers"])

    def of(self, item: dict) -> list[str]:
        """:func:`stale_answers` of ``item``."""
        return stale_answers(item, self)


def stale_answers(item: dict, outdated: OutdatedAnswers) -> list[str]:
    """The outdated values of ``item``'s question: the golds of the Outdated items with its question or its
    ``pair_id``, without those that normalize (§1) to one of the item's own golds (an Outdated item has none of
    its own), in order, each once; ``[]`` when none is known."""
    found = outdated.by_question.get(item["question"], []) + outdated.by_pair.get(str(item.get("pair_id")), [])
    seen = {normalize(answer) for answer in item["answers"]}
    out: list[str] = []
    for answer in found:
        key = normalize(answer)
        if key and key not in seen:
            seen.add(key)
            out.append(answer)
    return out


def _mean(values: list) -> Optional[float]:
    return sum(values) / len(values) if values else None


def split_records(ctx: EvalContext, book: OpenBook, eval_set: EvalSet) -> tuple[list[dict], list[dict]]:
    """(open-book records, closed-book records) of a set, scored by ``splits.score_prompts``."""
    items = eval_set.items
    closed = score_prompts(ctx, items, [ctx.timeline.prompt(item) for item in items])
    records = score_prompts(ctx, items, book.ask(items))
    outdated = book.outdated
    for record, item, shut in zip(records, items, closed):
        found = book.retrieved(item)
        stale = outdated.of(item)
        record.update(
            closed_correct=shut["correct"],
            hit=contains_answer([p.text for p, _ in found], item["answers"]),
            stale=contains_answer([p.text for p, _ in found], stale) if stale else None,
            stale_answers=stale,
            outdated_answer=exact_match(record["prediction"], stale) if stale else None,
            cut=book.cut(item),
            retrieved=[{"id": p.id, "step": p.step, "date": p.date, "score": round(s, 4)} for p, s in found],
        )
    return records, closed


def open_metrics(records: list[dict], closed: list[dict]) -> dict:
    """The row metrics of scored records, with 95 % bootstrap intervals over questions (``*_ci``) and the paired
    open − closed EM difference (``gap``, ``gap_ci``: paired bootstrap, §8)."""
    shut, opened = em_f1(closed), em_f1(records)
    hits = [r for r in records if r["hit"]]
    open_em, closed_em = [r["correct"] for r in records], [r["correct"] for r in closed]
    gap = paired_bootstrap_diff(open_em, closed_em) if records else None
    return {
        "n": opened["n"],
        "em": shut["em"],
        "em_ci": bootstrap_mean_ci(closed_em),
        "f1": shut["f1"],
        "em_open": opened["em"],
        "em_open_ci": bootstrap_mean_ci(open_em),
        "f1_open": opened["f1"],
        "gap": gap["diff"] if gap else None,
        "gap_ci": [gap["ci_low"], gap["ci_high"]] if gap else None,
        "recall@k": _mean([r["hit"] for r in records]),
        "recall@k_ci": bootstrap_mean_ci([r["hit"] for r in records]),
        "em_open_hit": _mean([r["correct"] for r in hits]),
        "n_hit": len(hits),
        "cut": _mean([int(r["cut"]) for r in records]),
        "passages": _mean([len(r["retrieved"]) for r in records]),
        **stale_metrics(records),
    }


def stale_metrics(records: list[dict]) -> dict:
    """Stale evidence of scored open-book records (see the module docstring): over the records with a known
    outdated answer (``stale`` not null)."""
    known = [r for r in records if r.get("stale") is not None]
    stale = [r for r in known if r["stale"]]
    fresh = [r for r in known if not r["stale"]]
    return {
        "n_stale_known": len(known),
        "stale_at_k": _mean([r["stale"] for r in known]),
        "stale_at_k_ci": bootstrap_mean_ci([r["stale"] for r in known]),
        "em_open_stale": _mean([r["correct"] for r in stale]),
        "n_stale": len(stale),
        "em_open_no_stale": _mean([r["correct"] for r in fresh]),
        "n_no_stale": len(fresh),
        "outdated_open_stale": _mean([r["outdated_answer"] for r in stale]),
    }


def folder(ctx: EvalContext, store: int) -> str:
    return "open_book" if ctx.checkpoint >= 0 else f"open_book_store{store}"


def split_rows(ctx: EvalContext, book: OpenBook) -> list[dict]:
    cfg, rows, pooled, pooled_closed = ctx.cfg.retrieval, [], [], []
    sets = up_to([s for s in ctx.sets() if s.kind not in PROBE_KINDS], book.store)
    meta = {"store": book.store, "scope": str(cfg.scope), "k": cfg.k}
    for eval_set in sets:
        records, closed = split_records(ctx, book, eval_set)
        rows.append(
            row(ctx, GROUP, eval_set.kind, eval_set.name, eval_set.step, **meta, **open_metrics(records, closed))
        )
        if eval_set.kind in POOLED_KINDS:
            pooled, pooled_closed = pooled + records, pooled_closed + closed
        if ctx.writes and ctx.run_dir is not None and ctx.cfg.save_predictions:
            write_predictions(ctx.run_dir, ctx.checkpoint, f"{folder(ctx, book.store)}/{eval_set.name}", records)
    if sets:
        rows.append(row(ctx, GROUP, ALL, ALL, None, **meta, **open_metrics(pooled, pooled_closed)))
    return rows


def paired_rows(ctx: EvalContext, book: OpenBook) -> list[dict]:
    """``paired``'s §4 metrics on open-book answers (same golds, same functions)."""
    cfg, time_slices = ctx.cfg.retrieval, slices(ctx)
    meta = {"store": book.store, "scope": str(cfg.scope), "k": cfg.k}
    rows, all_items, all_predictions = [], [], {}
    sets = up_to(temporal_sets(ctx), book.store)
    for eval_set in sets:
        golds = [
            latest_answers(item, book.store) if item.get("timestamp") is None else item["answers"]
            for item in eval_set.items
        ]
        predictions, _ = generate(ctx, eval_set, golds=golds, prompts=book.ask(eval_set.items), save=False)
        items = [qa_item(item, answers=gold) for item, gold in zip(eval_set.items, golds)]
        rows.append(
            row(
                ctx,
                GROUP,
                eval_set.kind,
                eval_set.name,
                eval_set.step,
                **meta,
                **paired_metrics(items, predictions, time_slices),
            )
        )
        all_items += items
        all_predictions.update(predictions)
    if sets:
        rows.append(
            row(
                ctx,
                GROUP,
                sets[0].kind,
                PAIRED_ALL,
                None,
                **meta,
                **paired_metrics(all_items, all_predictions, time_slices),
            )
        )
    return rows


def check_inputs(cfg, timeline) -> None:
    """Before training: bm25s importable and the passage files read (``retrieval_index.preflight``)."""
    preflight(cfg.eval.retrieval, timeline)


@register_evaluator(GROUP, preflight=check_inputs)
def retrieval_evaluator(ctx: EvalContext) -> list[dict]:
    """Rows of group ``retrieval`` at each store of :func:`stores_of` (see the module docstring)."""
    index = index_for(ctx.shared, ctx.timeline, ctx.cfg.retrieval)
    prompts = OpenBookPrompts(ctx)
    rows = []
    for store in stores_of(ctx, index):
        book = OpenBook(ctx, index, store, prompts)
        asked = up_to([s for s in ctx.sets() if s.kind not in PROBE_KINDS], store)
        asked += up_to(temporal_sets(ctx), store) if ctx.cfg.retrieval.paired else []
        ctx.answers(book.ask([item for eval_set in asked for item in eval_set.items]))  # one batched generation
        found = split_rows(ctx, book)
        if ctx.cfg.retrieval.paired:
            found += paired_rows(ctx, book)
        timing = {"retrieval_seconds": round(book.retrieval_seconds, 4), "index_seconds": round(book.index_seconds, 4)}
        for r in found:
            if r["set_name"] == ALL:
                r.update(timing)
        rows += found
    return rows


def retrieval_summary(rows: list[dict]) -> dict:
    """``summary.json``'s ``retrieval``: ``{"checkpoints": {checkpoint: {set_name: row}}, "initial": {store:
    {set_name: row}}}`` (the model before training at each step's store), metadata stripped; ``{}`` without rows."""
    from evolve_train.evaluation.rows import ROW_META

    out: dict = {}
    for r in rows:
        if r.get("group") != GROUP:
            continue
        part, key = ("initial", r["store"]) if r["checkpoint"] < 0 else ("checkpoints", r["checkpoint"])
        body = {k: v for k, v in r.items() if k not in ROW_META}
        out.setdefault(part, {}).setdefault(str(key), {})[r["set_name"]] = body
    return out


def format_retrieval(summary: dict) -> list[str]:
    """Console lines: closed vs open EM and recall@k over Unchanged + New + Updated at the last checkpoint, and
    the model before training at the last store."""
    lines = []
    for part, label in (("checkpoints", "checkpoint"), ("initial", "initial @ store")):
        per = summary.get(part) or {}
        if not per:
            continue
        last = max(per, key=int)
        body = per[last].get(ALL) or {}
        cells = [f"{key}={body[key]:.3f}" for key in ("em", "em_open", "recall@k") if body.get(key) is not None]
        lines.append(
            f"retrieval @ {label} {last} (all; scope {body.get('scope')}, k={body.get('k')}): " + "  ".join(cells)
        )
    return lines
