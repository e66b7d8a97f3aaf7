"""The passage stores of the open-book evaluator (docs/metrics.md#10-open-book-evaluation; ``evaluators/retrieval.py``).

Each time step contributes passages (:func:`step_passages`): its training documents, the same text split into
sentences, or the records of an external passage file (``eval.retrieval.passages``), each passage carrying its
step, its step's date and the document it is a version of (:func:`document_key`). The store of checkpoint i
(:meth:`RetrievalIndex.store`) holds the passages of steps 0..i (``scope=all``), of step i only
(``scope=latest``), or of each document's newest version up to step i (``scope=newest_version``: the passages of
the latest step <= i holding that document, so no two versions of one document are in a store; a time-aware
index), never a later step's, and is a BM25 index over them
(``bm25s``: sparse-matrix scoring, maintained, fast; docs/evaluation.md says why not ``rank-bm25``). The
statistics BM25 uses (IDF, mean length) are those of the store's own passages: no later step leaks in through
them either. A store is built once, the first time a checkpoint asks for it, and reused by every set and
every later evaluation of the run (the evaluator keeps the :class:`RetrievalIndex` in ``EvalContext.shared``).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from evolve_train.config import PassageSource, RetrievalConfig, RetrievalScope
from evolve_train.data.schema import TimeStep, Timeline
from evolve_train.errors import ConfigError, DataError
from evolve_train.models.text_format import split_masked
from evolve_train.utils.io import JsonlError, iter_jsonl

log = logging.getLogger(__name__)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
"""Where ``passages=sentences`` splits a document: after ``.``, ``!`` or ``?`` followed by white space."""
STOPWORDS = "en"
"""bm25s' English stop-word list, dropped from passages and questions alike."""


@dataclass(frozen=True)
class Passage:
    id: str
    step: int
    """Index of the time step whose text this is."""
    date: str
    """The step's date (its name, e.g. ``2019``), or the passage file's own ``date``."""
    text: str
    doc: str = ""
    """The document this passage is a version of, across steps (:func:`document_key`)."""


def title_of(text: str) -> str:
    """A document's title when it names none: its first non-blank line, stripped."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def document_key(record: dict, text: str) -> str:
    """Which document a record is a version of: its ``doc_id``, else its ``title``, else its text's first line
    (:func:`title_of`). Versions of one document in two steps share the key."""
    for name in ("doc_id", "title"):
        value = record.get(name)
        if value not in (None, ""):
            return str(value)
    return title_of(text)


def versioned_documents(step: TimeStep) -> list[tuple[str, str, str]]:
    """``(id, document key, text)`` of a step's training documents; a step with masked-entity pairs only gives
    each pair's input with its mask filled by the output, keyed by the fact it states (its ``entity`` and
    ``relation`` where it names them, as the embedded world's pairs do, else its masked input: the same in every
    step where only the value changed)."""
    if len(step.texts):
        return [
            (str(doc.get("doc_id") or n), document_key(doc, doc["text"]), doc["text"])
            for n, doc in enumerate(step.texts)
        ]
    out = []
    for n, pair in enumerate(step.pairs):
        parts = split_masked(pair["input"])
        key = f"{pair['entity']}/{pair['relation']}" if pair.get("entity") and pair.get("relation") else pair["input"]
        out.append((str(n), key, pair["input"] if parts is None else parts[0] + pair["output"] + parts[1]))
    return out


def documents_of(step: TimeStep) -> list[tuple[str, str]]:
    """``(id, text)`` of a step's training documents (:func:`versioned_documents` without the key)."""
    return [(doc_id, text) for doc_id, _, text in versioned_documents(step)]


def sentences(text: str) -> list[str]:
    """``text`` split at sentence ends (:data:`SENTENCE_END`), blank pieces dropped."""
    return [piece.strip() for piece in SENTENCE_END.split(text) if piece.strip()]


def step_passages(timeline: Timeline, cfg: RetrievalConfig) -> list[list[Passage]]:
    """Each step's passages, in step order (``eval.retrieval.passages``)."""
    if cfg.passages == PassageSource.files:
        return load_passage_files(cfg.passage_files, timeline.steps)
    out = []
    for step in timeline.steps:
        passages = []
        for doc_id, key, text in versioned_documents(step):
            pieces = sentences(text) if cfg.passages == PassageSource.sentences else [text]
            passages += [
                Passage(
                    f"{step.index}/{doc_id}" + (f"#{n}" if len(pieces) > 1 else ""), step.index, step.name, piece, key
                )
                for n, piece in enumerate(pieces)
            ]
        out.append(passages)
    return out


def _step_of(value, steps: Sequence[TimeStep], path: Path, line: int) -> int:
    names = {step.name: step.index for step in steps}
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(steps):
        return value
    if str(value) in names:
        return names[str(value)]
    raise DataError(
        f"{value!r} is not a time step of this timeline (indices 0..{len(steps) - 1} or names {', '.join(names)})",
        file=str(path),
        line=line,
        field="step",
    )


def load_passage_files(files: Sequence[str], steps: Sequence[TimeStep]) -> list[list[Passage]]:
    """``eval.retrieval.passage_files``: one JSONL file per step, or one file whose records name their ``step``
    (a record's document: its ``doc_id`` or ``title``, else its text's first line, :func:`document_key`).
    DataError names the file, line and field of a bad record; ConfigError a missing file or a wrong count."""
    paths = [Path(f).expanduser() for f in files]
    for path in paths:
        if not path.is_file():
            raise ConfigError(f"eval.retrieval.passage_files: {path} is not a file")
    if len(paths) not in (1, len(steps)):
        raise ConfigError(
            f"eval.retrieval.passage_files: {len(paths)} files for {len(steps)} time steps (give one "
            "per step, or one file whose records carry 'step')"
        )
    out: list[list[Passage]] = [[] for _ in steps]
    for file_index, path in enumerate(paths):
        try:
            records = list(iter_jsonl(path))
        except JsonlError as err:
            raise DataError(str(err)) from None
        for line, record in records:
            if not isinstance(record, dict) or not isinstance(record.get("text"), str) or not record["text"].strip():
                raise DataError(
                    "expected an object with a non-empty string 'text'", file=str(path), line=line, field="text"
                )
            if "step" in record:
                step = _step_of(record["step"], steps, path, line)
            elif len(paths) == len(steps):
                step = file_index
            else:
                raise DataError(
                    "a single passage file must name each record's step", file=str(path), line=line, field="step"
                )
            date = record.get("date")
            out[step].append(
                Passage(
                    str(record.get("id", f"{path.name}:{line}")),
                    step,
                    str(date) if date is not None else steps[step].name,
                    record["text"],
                    document_key(record, record["text"]),
                )
            )
    return out


class PassageStore:
    """A BM25 index (``bm25s``) over a fixed list of passages."""

    def __init__(self, passages: Sequence[Passage]):
        bm25s = require_bm25s()
        from bm25s.tokenization import Tokenizer

        self.tokenizer = Tokenizer(stopwords=STOPWORDS)
        ids = self.tokenizer.tokenize(
            [p.text for p in passages], update_vocab=True, return_as="ids", show_progress=False
        )
        self.empty = self.tokenizer.get_vocab_dict().get("")  # bm25s' id for "no token": never a match
        kept = [n for n, tokens in enumerate(ids) if tokens and tokens != [self.empty]]
        if len(kept) < len(passages):
            log.info("retrieval: %d passage(s) without a searchable word left out", len(passages) - len(kept))
        self.passages = [passages[n] for n in kept]
        self.index = bm25s.BM25()
        if self.passages:
            self.index.index([ids[n] for n in kept], show_progress=False)

    def __len__(self) -> int:
        return len(self.passages)

    def search(self, queries: Sequence[str], k: int) -> list[list[tuple[Passage, float]]]:
        """The top ``k`` passages of each query with their BM25 scores, best first (ties: lower passage index
        first). Passages that share no word with the query (score 0) are not returned, so a query may get
        fewer than ``k``, or none."""
        if not queries:
            return []
        k = min(k, len(self.passages))
        tokens = self.tokenizer.tokenize(list(queries), update_vocab=False, return_as="ids", show_progress=False)
        tokens = [[t for t in query if t != self.empty] for query in tokens]
        results: list[list[tuple[Passage, float]]] = [[] for _ in queries]
        asked = [n for n, query in enumerate(tokens) if query]
        if not k or not asked:
            return results
        found, scores = self.index.retrieve([tokens[n] for n in asked], k=k, show_progress=False, n_threads=1)
        for n, row, row_scores in zip(asked, found, scores):
            ranked = sorted(((float(s), int(d)) for d, s in zip(row, row_scores) if s > 0), key=lambda x: (-x[0], x[1]))
            results[n] = [(self.passages[d], s) for s, d in ranked]
        return results


def newest_versions(passages: Sequence[Passage]) -> list[Passage]:
    """The passages of each document's newest version: those of the latest step holding the document (a
    version split into sentences keeps all its pieces), in the given order."""
    newest: dict[str, int] = {}
    for passage in passages:
        newest[passage.doc] = max(newest.get(passage.doc, passage.step), passage.step)
    return [p for p in passages if p.step == newest[p.doc]]


class RetrievalIndex:
    """Every step's passages (read once) and the store of each checkpoint (built once, on first use)."""

    def __init__(self, timeline: Timeline, cfg: RetrievalConfig):
        start = time.perf_counter()
        self.timeline, self.scope = timeline, cfg.scope
        self.by_step = step_passages(timeline, cfg)
        self._stores: dict[int, PassageStore] = {}
        self.build_seconds = time.perf_counter() - start
        """Seconds spent reading passages and building stores so far."""

    def steps_in(self, checkpoint: int) -> list[int]:
        """The steps whose passages the store of ``checkpoint`` may hold (``newest_version``: of each document,
        only the newest of these steps' versions)."""
        return [checkpoint] if self.scope == RetrievalScope.latest else list(range(checkpoint + 1))

    def store(self, checkpoint: int) -> PassageStore:
        if checkpoint not in self._stores:
            if not 0 <= checkpoint < len(self.by_step):
                raise ValueError(f"no store for checkpoint {checkpoint} (steps 0..{len(self.by_step) - 1})")
            start = time.perf_counter()
            passages = [p for step in self.steps_in(checkpoint) for p in self.by_step[step]]
            if self.scope == RetrievalScope.newest_version:
                passages = newest_versions(passages)
            self._stores[checkpoint] = PassageStore(passages)
            seconds = time.perf_counter() - start
            self.build_seconds += seconds
            log.info(
                "retrieval: store of checkpoint %d (%d passages, scope %s) built in %.2f s",
                checkpoint,
                len(self._stores[checkpoint]),
                self.scope,
                seconds,
            )
        return self._stores[checkpoint]

    def built(self, checkpoint: int) -> bool:
        return checkpoint in self._stores


def index_for(shared: dict, timeline: Timeline, cfg: RetrievalConfig) -> RetrievalIndex:
    """The run's :class:`RetrievalIndex` for this configuration, from ``shared`` (built there on first use)."""
    key = ("retrieval", str(cfg.passages), tuple(cfg.passage_files), str(cfg.scope))
    if key not in shared or shared[key].timeline is not timeline:
        shared[key] = RetrievalIndex(timeline, cfg)
    return shared[key]


def require_bm25s():
    """The ``bm25s`` module; ConfigError saying how to install it when it is missing."""
    try:
        import bm25s
    except ImportError:
        raise ConfigError(
            "eval.evaluators lists 'retrieval', which needs bm25s: pip install -e '.[retrieval]' "
            "(scripts/setup.sh installs it)"
        ) from None
    return bm25s


def preflight(retrieval: Optional[RetrievalConfig], timeline: Timeline) -> None:
    """Before any training: bm25s importable, and ``eval.retrieval.passage_files`` read (DataError / ConfigError
    naming the file, line and field)."""
    require_bm25s()
    if retrieval is not None and retrieval.passages == PassageSource.files:
        load_passage_files(retrieval.passage_files, timeline.steps)
