"""Rows from outside the timeline mixed into a step: general documents (``data.mix_files``, :class:`GeneralMix`)
and the previous model's own samples (``methods/generative.py``).

Both are documents, tokenized as the ``clm`` objective packs them (``models/packing.py``) and appended after the
step's rows (after any replayed rows). A step trained as masked-entity pairs has no ``position_ids``: the mixed
rows then drop theirs (they train as plain packed rows, a document attending to the earlier ones of its row;
their labels still skip each document's first token). What a step mixed is counted apart (:class:`MixCounts`):
its own rows' tokens, the mixed rows' tokens and their share, logged as one ``group: mix`` row of the training
log (``hooks/mixing.py``), with the share of the step's trained tokens and FLOPs that were mixed ones.

The token share of ``data.mix_ratio`` (r): ``round(r / (1 - r) * S)`` mix tokens for a step of S tokens, so that
they are r of the mixed step's tokens. They are whole rows of the mix corpus in a seeded random order (seed:
the run's seed and the step), the last one cut to the remaining tokens; a corpus smaller than that is cycled
through again in a new order (said in the log).
"""

from __future__ import annotations

import logging
import random
from dataclasses import asdict, dataclass, field
from typing import Optional

import pyarrow.compute as pc

from evolve_train.methods.base import Strategy

log = logging.getLogger(__name__)
POSITION_IDS = "position_ids"


@dataclass
class MixCounts:
    """What one step mixed in (the ``group: mix`` training-log row)."""

    time_step: int
    source: str
    """``files`` (``data.mix_files``) or ``generated`` (generative replay)."""
    step_rows: int
    step_tokens: int
    """Tokens of the step's own rows (replayed rows included), before the mix."""
    mix_rows: int
    mix_tokens: int
    extra: dict = field(default_factory=dict)
    """What the source adds (generation cost, the samples file)."""

    @property
    def share(self) -> float:
        total = self.step_tokens + self.mix_tokens
        return self.mix_tokens / total if total else 0.0

    def row(self, result=None) -> dict:
        """The training-log row (``group: mix``); with the step's ``StepResult``, its optimizer steps and the
        trained tokens and FLOPs that were mix ones (every pass trains every row, so the token share holds for
        what was trained; a token budget draws rows at random, so there it is the expected share)."""
        out = {"group": "mix", **{k: v for k, v in asdict(self).items() if k != "extra"}}
        out["mix_share"] = round(self.share, 6)
        if result is not None:
            out["optimizer_step"] = result.optimizer_steps  # where the step ended (what the loss plots count)
            out["trained_tokens"] = result.tokens
            out["mix_trained_tokens"] = round(result.tokens * self.share)
            out["mix_train_flops"] = result.flops * self.share
        return {**out, **self.extra}


METRIC_FIELDS = (
    "mix_tokens",
    "mix_share",
    "mix_train_flops",
    "generated_tokens",
    "generation_seconds",
    "generation_flops",
)
"""Of the ``group: mix`` row, what every metric row of the step's checkpoint carries too."""


def metric_fields(row: dict) -> dict:
    """The :data:`METRIC_FIELDS` of a ``group: mix`` row, ``mix_source`` its source."""
    return {"mix_source": row["source"], **{key: row[key] for key in METRIC_FIELDS if key in row}}


def row_tokens(examples) -> int:
    """Tokens of tokenized rows: the summed lengths of their ``input_ids``."""
    if len(examples) == 0:
        return 0
    column = examples.with_format("arrow")[:]["input_ids"]
    return int(pc.sum(pc.list_value_length(column)).as_py())


def row_lengths(examples) -> list[int]:
    """Each row's ``input_ids`` length (read from Arrow, no Python pass over the tokens)."""
    if len(examples) == 0:
        return []
    return pc.list_value_length(examples.with_format("arrow")[:]["input_ids"]).to_pylist()


def mix_target(step_tokens: int, ratio: float) -> int:
    """Mix tokens that make ``ratio`` of a step of ``step_tokens`` tokens: ``round(ratio / (1 - ratio) * S)``."""
    return int(round(ratio / (1.0 - ratio) * step_tokens)) if ratio > 0 else 0


def take_tokens(pool, target: int, seed) -> tuple[object, bool]:
    """``(rows, cycled)``: whole rows of ``pool`` in a random order of ``random.Random(seed)`` (a fresh order of
    ``random.Random(f"{seed}-<pass>")`` each further pass) until ``target`` tokens, the last row cut to the rest."""
    from datasets import concatenate_datasets

    from evolve_train.training import compact_rows
    from evolve_train.training.compact_rows import decode_row

    lengths = row_lengths(pool)
    if target <= 0 or not lengths or sum(lengths) == 0:
        return pool.select([]), False
    chosen, total, passes = [], 0, 0
    while total < target:
        order = list(range(len(lengths)))
        random.Random(seed if passes == 0 else f"{seed}-{passes}").shuffle(order)
        for index in order:
            if total >= target:
                break
            chosen.append(index)
            total += lengths[index]
        passes += 1
    rows = pool.select(chosen)
    over = total - target
    if over == 0:
        return rows, passes > 1
    last = decode_row(pool[chosen[-1]])
    keep = lengths[chosen[-1]] - over
    cut = compact_rows.like([{name: values[:keep] for name, values in last.items()}], pool)
    return concatenate_datasets([rows.select(range(len(chosen) - 1)), cut]), passes > 1


def append_rows(examples, rows):
    """``examples`` followed by ``rows``, in ``examples``' columns (``position_ids`` dropped from ``rows`` where
    ``examples`` has none: a masked-entity step)."""
    from datasets import concatenate_datasets

    if len(rows) == 0:
        return examples
    columns = examples.column_names
    missing = [name for name in columns if name not in rows.column_names]
    if missing:
        raise ValueError(f"mixed rows lack the step's columns {missing}")
    return concatenate_datasets([examples, rows.select_columns(columns).cast(examples.features)])


def document_rows(run, corpus):
    """``corpus`` (a :class:`~evolve_train.data.schema.TimeStep` of documents) as ``clm`` rows of the run's text
    format at ``trainer.seq_len``, through the tokenized cache (``data.cache_dir``)."""
    from evolve_train.data import cache
    from evolve_train.training.token_cache import TokenCache

    tokens = TokenCache(cache.resolve_cache_dir(run.cfg.data.cache_dir), run.text_format, run.accelerator)
    return tokens.examples(corpus, "clm", run.cfg.trainer.seq_len)


class MixingStrategy(Strategy):
    """A strategy that needs the run (its config, model, text format, run dir): ``hooks/mixing.py`` binds it
    when the run starts (:meth:`bind`). Its last step's :class:`MixCounts` is :attr:`counts`."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.run = None
        self.counts: Optional[MixCounts] = None

    def bind(self, run) -> None:
        self.run = run

    def require_run(self):
        if self.run is None:
            raise RuntimeError(f"strategy {self.name} is not bound to a run (hooks/mixing.py binds it at run start)")
        return self.run


class GeneralMix(MixingStrategy):
    """``data.mix_files`` at ``data.mix_ratio`` of every step after step 0 (see the module docstring). Added to
    the run's method by ``hooks/mixing.py`` (it is no strategy name: the data config turns it on)."""

    name = "general_mix"

    def __init__(self, cfg, corpus=None, ratio: float = 0.0):
        super().__init__(cfg)
        self.corpus, self.ratio = corpus, ratio
        self._pool = None

    def pool(self):
        if self._pool is None:
            self._pool = document_rows(self.require_run(), self.corpus)
        return self._pool

    def mix_examples(self, step, examples, history):
        self.counts = None
        if step == 0 or self.ratio <= 0:
            return examples
        run = self.require_run()
        step_tokens = row_tokens(examples)
        rows, cycled = take_tokens(self.pool(), mix_target(step_tokens, self.ratio), f"{run.cfg.seed}-mix-{step}")
        self.counts = MixCounts(step, "files", len(examples), step_tokens, len(rows), row_tokens(rows))
        log.info(
            "general mix (step %d): %d rows, %d tokens (%.1f %% of the mixed step) from %d documents%s",
            step,
            self.counts.mix_rows,
            self.counts.mix_tokens,
            100 * self.counts.share,
            len(self.corpus.texts),
            "; the mix corpus is smaller than that and was cycled through again" if cycled else "",
        )
        return append_rows(examples, rows)
