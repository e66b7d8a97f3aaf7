"""Generic timestamped QA (``data=temporal_qa``): QA item files plus training files per step.

* ``data.train_files``: ``{step name: [entries]}``, each entry a file, a folder (its ``.txt``/``.jsonl``/``.csv``
  files, sorted, not recursive) or a glob (``**`` recurses), relative to ``data.root``
  (:func:`expand_entry`) — masked-entity pairs (CSV/JSONL ``input``, ``output``) or text documents (JSONL/CSV
  ``text``; a ``.txt`` file is one document, or one per blank-line-separated block with
  ``data.txt_documents=paragraph``). A step whose files hold no record is a DataError. The objective of each
  step follows its data under ``data.objective=auto`` (``data/objective.py``). Step order: ``data.steps``, else
  the names sorted as timestamps (so they must all parse: ``2019``, ``2019-05``, ``2019-05-03``,
  ``May 3, 2019``). When every name is a timestamp, the order must follow time.
  Without ``data.train_files`` the timeline is for evaluation only (``evolve-eval`` of a model on QA files):
  its steps are ``data.steps`` (else one step, ``eval``) with empty corpora, and training refuses it.
* ``data.eval_files``: QA items (JSONL/CSV, the contract of ``data/qa_items.py``, read through
  ``data.fields``), or EvolveBench-style event files (``loaders/evolvebench.py``). Without them the timeline is
  one of corpora only: it trains, and is evaluated by the evaluators that need no questions (time slices,
  held-out text, lm-eval tasks: ``evaluation/needs.py``).

Each item's step is its ``step`` (an index or a step name), else the last step whose name-timestamp is
not after the item's timestamp. Its split is its ``set``, else derived with the pairing of ``evolve-score``
(``resolve_pairs``: ``pair_id`` groups, or the automatic pairing of docs/metrics.md#4-paired-temporal-metrics): the newer item of a
pair is ``updated``; an item that is only the older one of a pair is the stale answer (it becomes the
Outdated twin's gold and is not evaluated on its own); others are ``unchanged`` at step 0 or without a
step and ``new`` later. Every Updated item needs an outdated answer: an ``outdated`` item sharing its
``pair_id`` (or paired with it), or an older paired item, which yields the Outdated twin
``<id>#outdated`` (same question, the older gold). Both members of every pair, with their own timestamps
and golds, also form ``paired_<k>`` sets (k = the newer item's step) for the paired metrics of §4.
"""

from __future__ import annotations

import glob
import logging
from datetime import date
from pathlib import Path
from typing import Optional

from evolve_train.config import DataConfig
from evolve_train.data.cache import resolve_cache_dir
from evolve_train.data.corpus import concat_records
from evolve_train.data.loaders.common import (
    TRAINING_SUFFIXES,
    is_saved_dataset,
    effective_fields,
    read_training_file,
    require_file,
    resolve_path,
)
from evolve_train.data.loaders.evolvebench import looks_like_events, read_events
from evolve_train.data.pairs import resolve_pairs
from evolve_train.data.qa_items import QAItem, _jsonl_records, iter_numbered_qa_items
from evolve_train.data.schema import SET_KINDS, EvalSet, TimeStep, Timeline
from evolve_train.data.timestamps import parse_timestamp
from evolve_train.errors import ConfigError, DataError

log = logging.getLogger(__name__)
EVAL_ONLY_STEP = "eval"
"""The one step of a timeline without training files (evaluation only; training refuses it)."""
PAIRED_KIND = "paired"
"""Kind of the sets holding both members of each pair (as the embedded world's ``paired_<k>`` probes)."""


def _timestamp(name: str) -> Optional[date]:
    try:
        return parse_timestamp(name)
    except ValueError:
        return None


def step_order(cfg: DataConfig) -> list[str]:
    """Step names in training order (see the module docstring). Without ``data.train_files`` (evaluation
    only: ``evolve-eval`` of a model on QA files), ``data.steps``, else one step :data:`EVAL_ONLY_STEP`."""
    if not cfg.train_files:
        return [str(name) for name in cfg.steps] if cfg.steps else [EVAL_ONLY_STEP]
    names = [str(name) for name in cfg.train_files]
    if cfg.steps:
        order = [str(name) for name in cfg.steps]
        missing = [name for name in order if name not in cfg.train_files]
        if missing:
            raise ConfigError(f"data.steps names step '{missing[0]}', which has no entry in data.train_files")
    else:
        if any(_timestamp(name) is None for name in names):
            bad = next(name for name in names if _timestamp(name) is None)
            raise ConfigError(
                f"data.steps is not set and step name '{bad}' is not a timestamp: give the order in data.steps"
            )
        order = sorted(names, key=_timestamp)
    days = [_timestamp(name) for name in order]
    if all(day is not None for day in days):
        for k in range(1, len(order)):
            if days[k] <= days[k - 1]:
                first = resolve_path(cfg.train_files[order[k]][0], cfg.root) if cfg.train_files[order[k]] else None
                raise DataError(
                    f"steps out of order: step {order[k]} is not after step {order[k - 1]}",
                    file=str(first) if first else None,
                    field="data.steps",
                )
    return order


def _supported(path: Path) -> bool:
    if path.name.startswith("."):
        return False
    return is_saved_dataset(path) or (path.is_file() and path.name.lower().endswith(TRAINING_SUFFIXES))


def _glob_base(pattern: Path) -> Path:
    """The folder a glob's matches are named relative to: its leading parts without a wildcard."""
    parts = []
    for part in pattern.parts:
        if glob.has_magic(part):
            break
        parts.append(part)
    return Path(*parts) if parts else Path(".")


def expand_entry(entry: str, root: Optional[str], step: str) -> list[tuple[Path, str]]:
    """``(file, document name)`` of one ``data.train_files`` entry of step ``step``, in order: a file as it is;
    a folder: its supported files (``.txt``, ``.jsonl``, ``.csv``; not hidden), sorted by name, not recursive;
    a glob (``*``, ``?``, ``[...]``; ``**`` recurses): the supported files it matches, sorted. The document name
    of a ``.txt`` file is its path relative to the folder (or the glob's fixed part), without ``.txt``. A
    folder or glob without a match is a DataError naming the step and the entry."""
    path = resolve_path(entry, root)
    key = f"data.train_files.{step}"
    kinds = ", ".join(TRAINING_SUFFIXES)
    if is_saved_dataset(path):
        return [(path, path.name)]
    if path.is_dir():
        files = sorted((p for p in path.iterdir() if _supported(p)), key=lambda p: p.name)
        if not files:
            raise DataError(
                f"step {step}: folder '{entry}' holds no training file ({kinds}; not recursive: use a "
                f"'{Path(entry) / '**' / '*.txt'}' glob for subfolders)",
                file=str(path),
                field=key,
            )
        return [(file, file.stem) for file in files]
    if path.exists() or not glob.has_magic(str(entry)):
        if not path.exists():
            raise DataError(f"missing file: training file of step {step} not found", file=str(path), field=key)
        return [(path, path.stem)]
    matches = sorted(Path(match) for match in glob.glob(str(path), recursive=True))
    files = [match for match in matches if _supported(match)]
    if not files:
        found = f"; it matches {len(matches)} other paths" if matches else ""
        raise DataError(f"step {step}: '{entry}' matches no training file ({kinds}){found}", file=str(path), field=key)
    base = _glob_base(path)
    return [(file, file.relative_to(base).with_suffix("").as_posix()) for file in files]


def training_files_of(cfg: DataConfig, step: str) -> list[tuple[Path, str]]:
    """``(file, document name)`` of every entry of ``data.train_files.<step>`` (:func:`expand_entry`), each
    file once (the first entry naming it decides its document name)."""
    entries = cfg.train_files.get(step) or []
    if isinstance(entries, str):
        entries = [entries]
    files, seen = [], set()
    for entry in entries:
        for path, name in expand_entry(str(entry), cfg.root, step):
            if path.resolve() in seen:
                continue
            seen.add(path.resolve())
            files.append((path, name))
    return files


def _read_eval_file(path: Path, cfg: DataConfig) -> list[tuple[int, QAItem]]:
    require_file(path, "eval file")
    if path.suffix.lower() == ".json":
        return read_events(path, cfg.default_split)
    if path.suffix.lower() != ".csv":
        first = next(iter(_jsonl_records(path)), None)
        if first is not None and looks_like_events(first[1]):
            return read_events(path, cfg.default_split)
    return list(iter_numbered_qa_items(path, effective_fields(cfg.fields), cfg.default_split))


def _assign_step(item: QAItem, names: list[str], days: list[Optional[date]], where: dict) -> Optional[int]:
    if item.step is not None:
        if 0 <= item.step < len(names):
            return item.step
        if str(item.step) in names:
            return names.index(str(item.step))
        raise DataError(
            f"step {item.step} is neither a step index (0..{len(names) - 1}) nor a step name ({', '.join(names)})",
            **where,
            field="step",
        )
    if item.timestamp is not None and all(day is not None for day in days):
        day = parse_timestamp(item.timestamp)
        return max([k for k, start in enumerate(days) if start <= day], default=0)
    return None


def _derive_sets(items: list[tuple[QAItem, dict]]) -> list[dict]:
    """Item dicts with ``set`` and ``step`` filled in, plus Outdated twins; see the module docstring."""
    plain = [item for item, _ in items]
    pairs = resolve_pairs(plain)
    older_of = {new.id: old for old, new in pairs}
    newer_ids = set(older_of)
    older_ids = {old.id for old, _ in pairs}
    explicit_outdated = {}
    for item in plain:
        if item.set == "outdated":
            explicit_outdated.setdefault(item.pair_id, item)
    records, dropped = [], 0
    for item, where in items:
        kind = item.set
        if kind is None:
            if item.id in newer_ids:
                kind = "updated"
            elif item.id in older_ids:
                dropped += 1
                continue
            else:
                kind = "unchanged" if not item.step else "new"
        if kind in ("new", "updated", "outdated") and item.step is None:
            raise DataError(
                f"a{'n' if kind[0] in 'aeiou' else ''} {kind} item needs a step: give 'step' or a "
                "timestamp (with step names that are timestamps)",
                **where,
                field="step",
            )
        record = {**item.to_dict(), "set": kind, "step": None if kind == "unchanged" else item.step}
        records.append(record)
        if kind != "updated":
            continue
        has_twin = (item.pair_id is not None and item.pair_id in explicit_outdated) or (
            item.id in older_of and older_of[item.id].set == "outdated"
        )
        if has_twin:
            continue
        old = older_of.get(item.id)
        if old is None:
            raise DataError(
                f"Updated item '{item.id}' has no outdated answer: add an 'outdated' item with the "
                "same pair_id, or an older item of the same question",
                **where,
                field="pair_id",
            )
        twin = {
            **record,
            "id": f"{item.id}#outdated",
            "answers": list(old.answers),
            "set": "outdated",
            "pair_id": item.pair_id or f"{old.id}->{item.id}",
            "outdated_from": old.id,
        }
        if item.options is not None:  # multiple choice: the gold option is the stale answer, if offered
            stale = [k for k, option in enumerate(item.options) if option in old.answers]
            if stale:
                twin["gold_index"] = stale[0]
            else:
                twin.pop("options"), twin.pop("gold_index", None)
        records.append(twin)
        record.setdefault("pair_id", f"{old.id}->{item.id}")
    if dropped:
        log.info(
            "temporal_qa: %d items are only the older answer of a pair (Outdated golds; asked in paired_<k>)", dropped
        )
    return records + _paired_records(pairs, {item.id: item.step for item in plain})


def _paired_records(pairs, steps: dict[str, Optional[int]]) -> list[dict]:
    """``paired_<k>`` members (kind ``paired``, docs/metrics.md#4-paired-temporal-metrics): both items of every dated pair whose newer item
    is at step k, each with its own timestamp and gold, so the ``paired`` evaluator sees every pair."""
    records, seen = [], set()
    for old, new in pairs:
        if old.timestamp is None or new.timestamp is None:
            continue  # an explicit pair without dates has no temporal order to probe
        step = steps[new.id] or 0
        for item in (old, new):
            if (item.id, step) not in seen:
                seen.add((item.id, step))
                records.append({**item.to_dict(), "set": PAIRED_KIND, "step": step})
    return records


def eval_sets_of(records: list[dict]) -> list[EvalSet]:
    """Group item dicts into eval sets: ``unchanged``, and ``<kind>_<step>`` for the others."""
    groups: dict[tuple[str, Optional[int]], list[dict]] = {}
    for record in records:
        groups.setdefault((record["set"], record["step"]), []).append(record)
    order = {kind: k for k, kind in enumerate(SET_KINDS)}
    sets = []
    for (kind, step), members in sorted(
        groups.items(), key=lambda kv: (kv[0][1] is not None, kv[0][1] or 0, order.get(kv[0][0], 9), kv[0][0])
    ):
        name = kind if step is None else f"{kind}_{step}"
        sets.append(EvalSet(name=name, kind=kind, step=step, items=members))
    return sets


def temporal_qa_timeline(cfg: DataConfig) -> Timeline:
    """Build and validate the timeline of generic timestamped QA data (see the module docstring)."""
    names = step_order(cfg)
    cache_dir = resolve_cache_dir(cfg.cache_dir)
    steps = []
    for index, name in enumerate(names):
        files = training_files_of(cfg, name) if cfg.train_files else []
        if cfg.train_files and not files:
            raise ConfigError(f"data.train_files.{name}: no training files listed for step {name}")
        read = [
            read_training_file(path, cache_dir, cfg.txt_documents, doc_id, cfg.text_field) for path, doc_id in files
        ]
        pairs = concat_records([file_pairs for file_pairs, _ in read])
        texts = concat_records([file_texts for _, file_texts in read])
        shown = [str(path) for path, _ in files]
        if files and not len(pairs) and not len(texts):
            raise DataError(
                f"step {name}: its {len(files)} training file(s) hold no record (no masked-entity pair, no "
                "non-blank document)",
                file=", ".join(shown[:5]) + (f" and {len(shown) - 5} more" if len(shown) > 5 else ""),
                field=f"data.train_files.{name}",
            )
        steps.append(TimeStep(index=index, name=name, pairs=pairs, texts=texts, files=shown))
    if not cfg.eval_files:
        if not cfg.train_files:
            raise ConfigError(
                "data.train_files and data.eval_files: neither is given (corpora per step to train, QA item "
                "files to evaluate, or both)"
            )
        log.info("temporal_qa: no data.eval_files: a timeline of corpora, evaluated without questions")
        return Timeline(steps=steps, eval_sets=[], prompt_template=cfg.prompt_template)
    days = [_timestamp(name) for name in names]
    items: list[tuple[QAItem, dict]] = []
    first_seen: dict[str, str] = {}
    for file in cfg.eval_files:
        path = resolve_path(file, cfg.root)
        for number, item in _read_eval_file(path, cfg):
            where = {"file": str(path), "line": number}
            if item.id in first_seen:
                raise DataError(
                    f"duplicate id '{item.id}' (also in {first_seen[item.id]})",
                    **where,
                    field=cfg.fields.get("id", "id"),
                )
            first_seen[item.id] = f"{path}, line {number}"
            item.step = _assign_step(item, names, days, where)
            items.append((item, where))
    return Timeline(steps=steps, eval_sets=eval_sets_of(_derive_sets(items)), prompt_template=cfg.prompt_template)
