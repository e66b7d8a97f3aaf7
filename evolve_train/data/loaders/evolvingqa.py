"""The EvolvingQA release layout (``data=evolvingqa data.root=DIR``).

Files are found anywhere under ``data.root`` (the release keeps the training diffs and the QA sets in
different folders):

* ``wikipedia_<STEP>[_anything].csv`` — masked-entity training pairs (``input`` with ``<extra_id_0>`` /
  ``<mask>``, ``output``) of one time step. ``<STEP>`` is ``YYYYMMDD`` for a full snapshot (the initial
  pretraining) or ``MMNN`` for the diff from month MM to month NN. Order: ``data.steps``, else full
  snapshots first, then diffs by month; consecutive diffs must chain (``0203`` follows a step ending in 02).
* ``unchanged_eval.csv`` (or ``unchanged.csv``) — Unchanged (``question``, ``answer``), every checkpoint.
  ``unchanged_train*.csv`` is the QA-adaptation train set, never evaluated.
* ``new_<STEP>.csv`` — New_k (``question``, ``answer``).
* ``edited_<STEP>.csv`` — Updated_k (``question``; gold ``answer2``, or ``answer``) and, where the file has an
  ``answer1`` column, Outdated_k (the same questions, gold ``answer1``; every row needs one).

``question_time`` (the time-prompted question) and any other column stay on the item, so
``data.fields.question=question_time`` or a prompt template can use them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from evolve_train.config import DataConfig
from evolve_train.data.cache import resolve_cache_dir
from evolve_train.data.loaders.common import (
    csv_header,
    effective_fields,
    numbered_records,
    read_release_items,
    read_training_file,
    require_file,
)
from evolve_train.data.schema import EvalSet, TimeStep, Timeline
from evolve_train.errors import ConfigError, DataError

TRAIN_FILE = re.compile(r"^wikipedia_(\d+)(?:_.*)?\.csv$")
QA_FILE = re.compile(r"^(new|edited)_(\d+)\.csv$")
UNCHANGED_FILES = ("unchanged_eval.csv", "unchanged.csv")
ADAPTATION_FILE = re.compile(r"^unchanged_train.*\.csv$")


def _root(cfg: DataConfig) -> Path:
    if not cfg.root:
        raise ConfigError("data.root: the directory of the EvolvingQA release is not set (data.root=DIR)")
    root = Path(cfg.root).expanduser()
    if not root.is_dir():
        raise DataError("missing directory: data.root does not exist", file=str(root))
    return root


def _find(root: Path, pattern: re.Pattern) -> dict[str, Path]:
    """File name -> path for files under root matching ``pattern``; a name found twice fails."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.csv")):
        if pattern.match(path.name):
            if path.name in found:
                raise DataError(f"two files named {path.name}: {found[path.name]} and {path}; keep one", file=str(path))
            found[path.name] = path
    return found


def _span(name: str) -> Optional[tuple[Optional[int], int]]:
    """(start month, end month) of a step name: YYYYMMDD -> (None, MM); MMNN -> (MM, NN)."""
    if len(name) == 8:
        return None, int(name[4:6])
    if len(name) == 4:
        return int(name[:2]), int(name[2:])
    return None


def default_order(names: list[str]) -> list[str]:
    """Full snapshots (YYYYMMDD) first, then diffs (MMNN) by months, then other names."""

    def key(name: str):
        span = _span(name)
        if span is not None and span[0] is None:
            return 0, name, 0
        if span is not None:
            return 1, f"{span[0]:02d}{span[1]:02d}", 0
        return 2, name, 0

    return sorted(names, key=key)


def training_files(root: Path, steps: Optional[list[str]]) -> dict[str, Path]:
    """Step name -> training file, in step order; checks the order when names are months."""
    by_step: dict[str, Path] = {}
    for name, path in _find(root, TRAIN_FILE).items():
        step = TRAIN_FILE.match(name)[1]
        if step in by_step:
            raise DataError(
                f"two training files for step {step}: {by_step[step].name} and {name}; keep one",
                file=str(path),
                field="step",
            )
        by_step[step] = path
    if steps:
        order = [str(s) for s in steps]
        for step in order:
            if step not in by_step:
                raise DataError(
                    f"missing file: no training file wikipedia_{step}*.csv for step {step} named in data.steps",
                    file=str(root / f"wikipedia_{step}.csv"),
                    field="data.steps",
                )
    else:
        order = default_order(list(by_step))
    if not order:
        raise DataError(
            "missing file: no training file wikipedia_<STEP>*.csv under data.root",
            file=str(root / "wikipedia_<STEP>.csv"),
        )
    for previous, current in zip(order, order[1:]):
        before, now = _span(previous), _span(current)
        if before is not None and now is not None and (now[0] is None or now[0] != before[1]):
            starts = "is a full snapshot" if now[0] is None else f"starts at month {now[0]:02d}"
            raise DataError(
                f"steps out of order (or one missing): step {current} {starts} but the step before "
                f"it, {previous}, ends at month {before[1]:02d} (order them in data.steps)",
                file=str(by_step[current]),
                field="data.steps",
            )
    return {step: by_step[step] for step in order}


def unchanged_file(root: Path) -> Path:
    for name in UNCHANGED_FILES:
        found = _find(root, re.compile(re.escape(name) + "$"))
        if found:
            return found[name]
    return require_file(root / UNCHANGED_FILES[0], "the Unchanged eval set (unchanged_eval.csv or unchanged.csv)")


def adaptation_file(root: Path) -> Path:
    """The release's QA-adaptation train set (``unchanged_train.csv``)."""
    found = _find(root, ADAPTATION_FILE)
    if "unchanged_train.csv" in found:
        return found["unchanged_train.csv"]
    if len(found) == 1:
        return next(iter(found.values()))
    return require_file(root / "unchanged_train.csv", "the QA-adaptation train set (unchanged_train.csv)")


def _items(
    path: Path, cfg: DataConfig, set_name: str, kind: str, step: Optional[int], answers: Optional[str] = None
) -> list[tuple[int, dict]]:
    """(line, item dict) of one QA file; ids are ``<set_name>/<id column or L<line>>``."""
    fields = effective_fields(cfg.fields)
    if answers:
        fields["answers"] = answers
    out = []
    for number, item in read_release_items(path, fields, cfg.default_split, None):
        record = item.to_dict()
        record.update(id=f"{set_name}/{item.id}", set=kind, step=step)
        out.append((number, record))
    return out


def _edited_sets(path: Path, cfg: DataConfig, index: int) -> list[EvalSet]:
    header = csv_header(path)
    updated_column = effective_fields(cfg.fields).get("answers") or ("answer2" if "answer2" in header else "answer")
    updated = _items(path, cfg, f"updated_{index}", "updated", index, updated_column)
    sets = [EvalSet(f"updated_{index}", "updated", index, [record for _, record in updated])]
    if "answer1" not in header:
        return sets
    outdated = _items(path, cfg, f"outdated_{index}", "outdated", index, "answer1")
    for (number, new), (_, old) in zip(updated, outdated):
        pair = f"edited_{index}/L{number}"
        new["pair_id"] = old["pair_id"] = pair
    sets.append(EvalSet(f"outdated_{index}", "outdated", index, [record for _, record in outdated]))
    return sets


def _check_outdated_answers(path: Path) -> None:
    """Every Updated row of a file with an ``answer1`` column needs its outdated answer."""
    if "answer1" not in csv_header(path):
        return
    for number, record in numbered_records(path, ("answer1",)):
        if not str(record.get("answer1") or "").strip():
            raise DataError(
                "an Updated item needs its outdated answer: empty 'answer1'",
                file=str(path),
                line=number,
                field="answer1",
            )


def evolvingqa_timeline(cfg: DataConfig) -> Timeline:
    """Build and validate the timeline of an EvolvingQA release (see the module docstring)."""
    root = _root(cfg)
    files = training_files(root, cfg.steps)
    index_of = {name: k for k, name in enumerate(files)}
    cache_dir = resolve_cache_dir(cfg.cache_dir)
    steps = []
    for name, path in files.items():
        pairs, texts = read_training_file(path, cache_dir)
        steps.append(TimeStep(index=index_of[name], name=name, pairs=pairs, texts=texts, files=[str(path)]))
    sets = [
        EvalSet(
            "unchanged",
            "unchanged",
            None,
            [record for _, record in _items(unchanged_file(root), cfg, "unchanged", "unchanged", None)],
        )
    ]
    qa_files = sorted(
        _find(root, QA_FILE).items(),  # in step order; per step new, then edited
        key=lambda kv: (index_of.get(QA_FILE.match(kv[0])[2], len(index_of)), kv[0].startswith("edited"), kv[0]),
    )
    for name, path in qa_files:
        kind, step = QA_FILE.match(name).groups()
        if step not in index_of:
            if cfg.steps:
                continue  # a step left out of data.steps: its QA sets are left out too
            raise DataError(
                f"missing file: no training file wikipedia_{step}*.csv for the step of this QA set",
                file=str(path),
                field="step",
            )
        index = index_of[step]
        if kind == "new":
            sets.append(
                EvalSet(
                    f"new_{index}",
                    "new",
                    index,
                    [record for _, record in _items(path, cfg, f"new_{index}", "new", index)],
                )
            )
        else:
            _check_outdated_answers(path)
            sets += _edited_sets(path, cfg, index)
    return Timeline(steps=steps, eval_sets=sets, prompt_template=cfg.prompt_template)
