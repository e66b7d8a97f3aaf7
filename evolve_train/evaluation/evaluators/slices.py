"""``slices``: time-sliced held-out loss P[i][j] (docs/metrics.md#9-time-sliced-perplexity, after TiC-LM).

Every step j's held-out slice (``data.heldout_share``, ``data/slices.py``: never trained on) is encoded as the
step's training rows are, in the step's objective (``data/objective.py``; ``TextFormat.encode_step``: the masked
entity and its EOS are the loss tokens of a masked-entity pair, every token but a document's first of packed
``clm`` rows), at most
``eval.slice_max_examples`` examples of each (a fixed seeded sample), and scored with the training loss
(``TextFormat.token_nll``) in one batched pass over all slices per checkpoint (rows sorted by length,
``eval.batch_size`` rows a batch, halved on out-of-memory). Every checkpoint scores every slice, earlier, own
and later (all corpora are known at the start); the model before training too (``eval.eval_initial``:
P_init).

Rows (one per slice): ``group=slices``, ``set=slice``, ``set_name=slice_<j>``, ``set_step=j``, ``nll`` (mean
NLL per loss token, nats), ``perplexity`` = exp(nll), ``tokens`` (loss tokens), ``n`` (examples). With
``eval.save_predictions`` the per-example sums go to ``predictions/step_<i>/slices.jsonl`` (``slice``,
``index``, ``nll_sum``, ``tokens``): the bootstrap intervals over examples of the aggregates
(``evaluation/metrics/timesliced.py``) are computed from them. In a multi-process run each process scores
whole batches of the pass, and every process gets every score.
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass

from evolve_train.data.objective import slice_objective
from evolve_train.data.schema import TimeStep
from evolve_train.evaluation.context import EvalContext, write_predictions
from evolve_train.evaluation.registry import SLICES, register_evaluator
from evolve_train.models.batching import in_batches
from evolve_train.training.examples import as_array_rows, collate

log = logging.getLogger(__name__)
GROUP = "slices"
PREDICTIONS = "slices"
"""``predictions/step_<i>/slices.jsonl``: the per-example NLL sums."""


@dataclass
class SliceRows:
    """The tokenized rows of the held-out slices: ``rows[k]`` belongs to slice ``steps[k]``."""

    rows: list[dict]
    steps: list[int]


_CACHE: list = []
"""One entry ``(timeline, text_format, format, cap, SliceRows)``: slices are encoded once per run, not per checkpoint."""


def slice_rows(ctx: EvalContext) -> SliceRows:
    """Every step's held-out examples (capped, seeded sample) as training rows, encoded once per run."""
    key = (ctx.timeline, ctx.text_format, ctx.training, ctx.cfg.slice_max_examples)
    if _CACHE and _CACHE[0][0] is key[0] and _CACHE[0][1] is key[1] and _CACHE[0][2:4] == key[2:4]:
        return _CACHE[0][4]
    seq_len = ctx.training.seq_len or _context_length(ctx.model)
    rows, steps = [], []
    for step in ctx.timeline.steps:
        examples = capped(list(step.heldout), ctx.cfg.slice_max_examples, step.index)
        if not examples:
            continue
        objective = slice_objective(ctx.training.objective, step)  # data.objective=auto: the step's own
        corpus = TimeStep(
            index=step.index,
            name=f"slice {step.name}",
            **({"texts": examples} if objective == "clm" else {"pairs": examples}),
        )
        encoded = as_array_rows(ctx.text_format.encode_step(corpus, objective, seq_len))
        rows.extend(encoded)
        steps.extend([step.index] * len(encoded))
    result = SliceRows(rows, steps)
    _CACHE[:] = [(*key, result)]
    return result


def capped(examples: list[dict], cap: int, step: int) -> list[dict]:
    """At most ``cap`` of ``examples`` (0 = all): a sample seeded by the step, in their order."""
    if cap <= 0 or len(examples) <= cap:
        return examples
    keep = sorted(random.Random(f"slices-{step}").sample(range(len(examples)), cap))
    return [examples[i] for i in keep]


def _context_length(model) -> int:
    config = model.config
    return getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None) or 1024


def score_rows(ctx: EvalContext, rows: list[dict]) -> list[tuple[float, int]]:
    """``(summed NLL, loss tokens)`` of each row, rows batched by length (one pass; with several processes each
    scores whole batches of that pass: ``EvalContext.each_process``)."""
    order = sorted(range(len(rows)), key=lambda k: len(rows[k]["input_ids"]))
    ctx.model.eval()

    def score(share: list[int]) -> list[tuple[float, int]]:
        scores: list[tuple[float, int]] = [(0.0, 0)] * len(share)

        def score_span(start: int, stop: int) -> None:
            batch = collate([rows[k] for k in share[start:stop]], ctx.text_format.pad_id, ctx.training.attention_reset)
            sums, counts = ctx.text_format.token_nll(ctx.model, batch)
            for at, total, count in zip(range(start, stop), sums, counts):
                scores[at] = (float(total), int(count))

        ctx.batch.run(len(share), score_span)
        return scores

    scored = dict(ctx.each_process(order, score, in_batches))
    return [scored[k] for k in range(len(rows))]


@register_evaluator(GROUP, needs=(SLICES,))
def slices_evaluator(ctx: EvalContext) -> list[dict]:
    """One row per held-out slice: P[checkpoint][j] (see the module docstring)."""
    encoded = slice_rows(ctx)
    if not encoded.rows:
        log.warning("slices: no step has a held-out slice (data.heldout_share=0?); no rows")
        return []
    scores = score_rows(ctx, encoded.rows)
    per_slice: dict[int, list[tuple[int, float, int]]] = {}
    for index, (step, (total, count)) in enumerate(zip(encoded.steps, scores)):
        per_slice.setdefault(step, []).append((index, total, count))
    rows, records = [], []
    for step, items in sorted(per_slice.items()):
        total, tokens = sum(t for _, t, _ in items), sum(c for _, _, c in items)
        nll = total / tokens if tokens else None
        rows.append(
            {
                "group": GROUP,
                "checkpoint": ctx.checkpoint,
                "set": "slice",
                "set_name": f"slice_{step}",
                "set_step": step,
                "n": len(items),
                "tokens": tokens,
                "nll": nll,
                "perplexity": math.exp(nll) if nll is not None else None,
            }
        )
        records.extend({"slice": step, "index": k, "nll_sum": t, "tokens": c} for k, (_, t, c) in enumerate(items))
    if ctx.writes and ctx.run_dir is not None and ctx.cfg.save_predictions:
        write_predictions(ctx.run_dir, ctx.checkpoint, PREDICTIONS, records)
    return rows
