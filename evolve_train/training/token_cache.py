"""The tokenized cache: each time step's training rows are tokenized once and reused by every run of a sweep
and by every rank (``data.cache_dir``; docs/data.md, "The tokenized cache").

An entry ``<root>/tokens/<key>/`` is ``rows.arrow``, the rows of ``text_format.encode_batches(step, objective,
seq_len)`` written batch by batch as they are encoded (``data/corpus.py: write_int_rows``; read back
memory-mapped with ``Dataset.from_file``), and ``token_meta.json``. Nothing holds the step's rows in memory
or reads them back while the entry is written. The key
(:func:`token_key`) is a SHA-256 of the step's data (``data/corpus.py: step_fingerprint``), the tokenizer
(its ``tokenizer.json``: vocabulary, merges, special tokens, post-processor), the text format's class, the
special ids it uses and the source of its module (a change to the encoding code is a miss), the encoding
settings (objective, ``seq_len``, ...), the versions of this package, ``datasets`` and ``tokenizers``, and
:data:`FORMAT`. Entries are written atomically (``data/cache.py``) under a file lock per entry: the first
process (a rank of this run, or a run of the sweep) builds a missing entry while the others wait on the lock,
never in a collective (no rank sits in a barrier bounded by ``trainer.dist_timeout_s``), then they map it.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import sys
import time
from pathlib import Path
from typing import Optional

from datasets import Dataset

from evolve_train.data import cache
from evolve_train.data.corpus import step_fingerprint
from evolve_train.data.objective import step_objective
from evolve_train.training import compact_rows
from evolve_train.training.step0_cache import tokenizer_fingerprint

log = logging.getLogger(__name__)
FORMAT = 3
"""Version of the entries' layout (part of the key). 2: one ``rows.arrow`` stream written while encoding; 3: its
rows compact (``training/compact_rows.py``)."""
META = "token_meta.json"
ROWS = "rows.arrow"


def encoder_fingerprint(text_format) -> str:
    """SHA-256 of what decides the rows besides the data and the tokenizer: the text format's class, its special
    ids and the source of the module defining it and of the document packer (``training/packing.py``)."""
    from evolve_train.training import packing

    cls = type(text_format)
    source = (
        inspect.getsource(sys.modules[cls.__module__]) + inspect.getsource(packing) + inspect.getsource(compact_rows)
    )
    parts = [
        cls.__module__,
        cls.__qualname__,
        text_format.prefix,
        text_format.suffix,
        text_format.eos_id,
        text_format.pad_id,
        hashlib.sha256(source.encode("utf-8")).hexdigest(),
    ]
    return hashlib.sha256(json.dumps(parts, default=str).encode("utf-8")).hexdigest()


def token_key(step, text_format, settings: dict) -> str:
    """The key of ``step``'s rows encoded by ``text_format`` with ``settings`` (see the module docstring)."""
    import datasets
    import tokenizers

    import evolve_train

    return cache.digest(
        {
            "format": FORMAT,
            "data": step_fingerprint(step),
            "tokenizer": tokenizer_fingerprint(text_format.tokenizer),
            "encoder": encoder_fingerprint(text_format),
            "settings": settings,
            "versions": [evolve_train.__version__, datasets.__version__, tokenizers.__version__],
        }
    )


class TokenCache:
    """Tokenized rows of time steps through ``root`` (``None``: no cache, every call encodes)."""

    def __init__(self, root: Optional[Path], text_format, accelerator=None):
        self.root = None if root is None else Path(root)
        self.text_format, self.accelerator = text_format, accelerator
        self.seconds = 0.0
        """Time spent preparing rows so far (encoding, or mapping a cached entry)."""
        self.misses = 0
        """Entries this cache built (tokenized) so far."""

    def examples(self, step, objective: str, seq_len: int, **settings) -> Dataset:
        """The rows of ``text_format.encode_step(step, objective, seq_len)`` in the compact layout
        (``training/compact_rows.py``), from the cache when an entry exists."""
        start = time.perf_counter()
        try:
            if self.root is None:
                batches = self.text_format.encode_batches(step, objective, seq_len)
                return compact_rows.rows_in_memory(batches, vocab_size(self.text_format))
            settings = {"objective": str(objective), "seq_len": seq_len, **settings}
            final = self.root / "tokens" / token_key(step, self.text_format, settings)
            return self._load_or_build(final, step, objective, seq_len, settings)
        finally:
            self.seconds += time.perf_counter() - start

    def _load_or_build(self, final: Path, step, objective: str, seq_len: int, settings: dict) -> Dataset:
        if not (final / META).is_file():
            with cache.entry_lock(final):
                if not (final / META).is_file():  # else built by a concurrent run while this one waited
                    log.info("tokenized cache miss %s (step %s): tokenizing", final, step.name)
                    cache.remove_incomplete(final)
                    self.misses += 1
                    batches = self.text_format.encode_batches(step, objective, seq_len)
                    vocab = vocab_size(self.text_format)
                    cache.write_entry(final, lambda tmp: _save(batches, tmp, step, settings, vocab))
                    return Dataset.from_file(str(final / ROWS))
        log.info("tokenized cache hit %s (step %s)", final, step.name)
        return Dataset.from_file(str(final / ROWS))


def vocab_size(text_format) -> int:
    """Ids the tokenizer can give (its vocabulary with added tokens): what the compact id type must hold."""
    return len(text_format.tokenizer)


def _save(batches, tmp: Path, step, settings: dict, vocab: int) -> None:
    rows = compact_rows.write_rows(batches, str(tmp / ROWS), vocab)
    meta = {"format": FORMAT, "step": step.name, "rows": rows, "settings": settings, "data": step_fingerprint(step)}
    (tmp / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def step_tokenizer(cfg, text_format, accelerator=None):
    """``time step -> its tokenized training rows`` for a run config: from the tokenized cache under
    ``data.cache_dir`` (built on first use), in the step's objective (``data.objective``, ``auto`` resolved per
    step by ``data/objective.py: step_objective``, which refuses a step with nothing to train) at
    ``trainer.seq_len``. The key holds the resolved objective: ``auto`` and the objective it resolves to share
    entries."""
    tokens = TokenCache(cache.resolve_cache_dir(cfg.data.cache_dir), text_format, accelerator)
    return lambda step: tokens.examples(step, step_objective(cfg.data.objective, step), cfg.trainer.seq_len)
