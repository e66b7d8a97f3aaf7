"""Evidence for knowledge-cutoff estimates (``evaluation/metrics/cutoff.py``, docs/metrics.md#14-knowledge-cutoff)
read from others' released layouts. Nothing here is bundled: every reader takes the paths it reads.

* **TiC-LM perplexity evaluations** (:func:`read_tic_lm_evals`): ``<model>/ppl_evals/aggregated_ppl_evals.jsonl``,
  one JSON object per line with ``loss`` (mean token loss), ``loss_sequences_lower_95`` /
  ``loss_sequences_upper_95`` (a 95 % interval over the slice's sequences), ``sequences`` and ``val_data``
  (a list whose first path holds ``.../ppl_evals/<domain>/<YYYYMM>/...``). One loss matrix per domain, a row
  per model (named by the folder above ``ppl_evals``), columns the ``YYYYMM`` slices in order; each cell's
  standard error = interval width / (2 · 1.96).
* **A plain CSV** (:func:`read_loss_csv`): a header ``model,<slice>,<slice>,...`` (slices in time order), then
  one row per model with a loss per slice.
* **DyKnow's stored model outputs** (:func:`read_dyknow_answers`): per model folder,
  ``<category>_answer_sheet.json`` (entity -> relation -> prompt -> ``correct`` / ``outdated`` /
  ``irrelevant``; entity -> prompt -> ... for a category without relations) and ``<category>_dates.json`` (the
  same keys -> the start date ``+YYYY-MM-DDT00:00:00Z`` of the value the answer gave, only for answers that
  matched a value). With DyKnow's facts (``grc_generated.json`` read by :mod:`.dyknow_facts`) each answer also
  gets the start year of its fact's current value, and a model with only ``<category>_answers.json`` (the
  generated text per prompt) is judged here by :func:`match_value`.
"""

from __future__ import annotations

import csv
import json
import re
import unicodedata
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np

from evolve_train.data.loaders.dyknow_facts import Fact, FactKey, Value
from evolve_train.errors import DataError
from evolve_train.data.evidence import DatedAnswer, LossMatrix, LossRow

TIC_LM_FILE = "aggregated_ppl_evals.jsonl"
Z95 = 1.959964
_SLICE = re.compile(r"ppl_evals/([^/]+)/(\d{6})/")
_YEAR = re.compile(r"^\+?(\d{4})-")
JUDGEMENTS = {"correct": True, "outdated": False, "irrelevant": None}
SHEET, DATES, ANSWERS = "_answer_sheet.json", "_dates.json", "_answers.json"


def _model_name(path: Path) -> str:
    """The folder above ``ppl_evals`` (``<model>/ppl_evals/aggregated_ppl_evals.jsonl``), else the file stem."""
    parent = path.parent
    return parent.parent.name if parent.name == "ppl_evals" else path.stem


def _tic_lm_record(record: dict, path: Path, line: int) -> tuple[str, str, float, float, int]:
    """(domain, slice, loss, standard error, sequences) of one line."""
    try:
        match = _SLICE.search(str(record["val_data"][0]))
        loss = float(record["loss"])
        width = float(record["loss_sequences_upper_95"]) - float(record["loss_sequences_lower_95"])
        count = int(record["sequences"])
    except (KeyError, IndexError, TypeError, ValueError) as err:
        raise DataError(f"not a TiC-LM perplexity record ({err!r})", file=str(path), line=line) from None
    if not match:
        raise DataError("val_data names no .../ppl_evals/<domain>/<YYYYMM>/ path", file=str(path), line=line)
    return match.group(1), match.group(2), loss, width / (2 * Z95), count


def _tic_lm_cells(path: Path) -> dict[str, dict[str, tuple[float, float, int]]]:
    cells: dict[str, dict[str, tuple[float, float, int]]] = {}
    with open(path, encoding="utf-8") as handle:
        for line, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as err:
                raise DataError(f"not JSON ({err.msg})", file=str(path), line=line) from None
            domain, label, loss, stderr, count = _tic_lm_record(record, path, line)
            cells.setdefault(domain, {})[label] = (loss, stderr, count)
    return cells


def read_tic_lm_evals(paths: Iterable[Path | str]) -> dict[str, LossMatrix]:
    """One :class:`LossMatrix` per domain from TiC-LM ``aggregated_ppl_evals.jsonl`` files (one per model);
    every model must have every slice of a domain."""
    by_model = {_model_name(Path(p)): _tic_lm_cells(Path(p)) for p in sorted(map(str, paths))}
    domains = sorted({d for cells in by_model.values() for d in cells})
    out = {}
    for domain in domains:
        slices = sorted({s for cells in by_model.values() for s in cells.get(domain, {})})
        rows = []
        for model, cells in sorted(by_model.items()):
            missing = [s for s in slices if s not in cells.get(domain, {})]
            if missing:
                raise DataError(f"model {model!r} has no {domain} slice {missing[0]} (others do)")
            values = np.array([cells[domain][s] for s in slices])
            rows.append(LossRow(model, values[:, 0], stderr=values[:, 1], counts=values[:, 2].astype(int)))
        out[domain] = LossMatrix(slices, rows)
    return out


def read_loss_csv(path: Path | str) -> LossMatrix:
    """A :class:`LossMatrix` from ``model,<slice>,...`` rows (every cell a number)."""
    path = Path(path)
    with open(path, newline="", encoding="utf-8") as handle:
        table = list(csv.reader(handle))
    if not table or len(table[0]) < 3:
        raise DataError("the header must be model,<slice>,<slice>,... (two slices at least)", file=str(path))
    slices = [s.strip() for s in table[0][1:]]
    rows = []
    for line, cells in enumerate(table[1:], start=2):
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != len(slices) + 1:
            raise DataError(f"{len(cells)} cells, the header has {len(slices) + 1}", file=str(path), line=line)
        try:
            rows.append(LossRow(cells[0].strip(), np.array([float(c) for c in cells[1:]])))
        except ValueError as err:
            raise DataError(f"a loss is not a number ({err})", file=str(path), line=line) from None
    return LossMatrix(slices, rows)


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise DataError(f"not JSON ({err.msg})", file=str(path), line=err.lineno) from None


def _leaves(tree: dict, category: str, path: Path) -> dict[tuple[FactKey, str], Any]:
    """(fact key, prompt) -> leaf of entity -> relation -> prompt -> leaf (or entity -> prompt -> leaf)."""
    out = {}
    for entity, sub in tree.items():
        if not isinstance(sub, dict):
            raise DataError(f"entity {entity!r} does not map to an object", file=str(path))
        for name, value in sub.items():
            if isinstance(value, dict):
                for prompt, leaf in value.items():
                    out[((category, entity, name), prompt)] = leaf
            else:
                out[((category, entity, ""), name)] = value
    return out


def _answer_texts(tree: dict, category: str, path: Path) -> dict[tuple[FactKey, str], str]:
    """(fact key, prompt) -> generated text of an ``_answers.json`` (leaves under ``answers``)."""
    out = {}
    for entity, sub in tree.items():
        if isinstance(sub, dict) and isinstance(sub.get("answers"), dict):
            out.update({((category, entity, ""), p): t for p, t in sub["answers"].items()})
            continue
        for relation, entry in (sub or {}).items():
            answers = entry.get("answers") if isinstance(entry, dict) else None
            if not isinstance(answers, dict):
                raise DataError(f"entity {entity!r}, relation {relation!r}: no answers object", file=str(path))
            out.update({((category, entity, relation), p): t for p, t in answers.items()})
    return out


def year_of(text: str) -> int:
    """The year of a Wikidata date ``+YYYY-MM-DDT...``."""
    match = _YEAR.match(str(text))
    if not match:
        raise ValueError(f"date {text!r} is not +YYYY-MM-DD...")
    return int(match.group(1))


def current_year(fact: Fact) -> Optional[int]:
    """The start year of the fact's current value (no end; the latest start when several), None without one."""
    starts = [v.start.year for v in fact.values if v.end is None and v.start is not None]
    return max(starts) if starts else None


def _normal(text: str) -> str:
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    words = re.sub(r"[^a-z0-9]+", " ", text).split()
    return " " + " ".join(w for w in words if w not in {"fc", "cf", "f", "c", "the"}) + " "


def match_value(text: str, fact: Fact) -> Optional[Value]:
    """The fact's value named earliest in ``text`` (lower case, accents and punctuation dropped, whole words,
    without ``FC``/``CF``/``the``), None when no value is named."""
    answer = _normal(text)
    found = []
    for value in fact.values:
        name = _normal(value.text)
        if name.strip() and name in answer:
            found.append((answer.index(name), -len(name), value))
    return min(found, key=lambda f: (f[0], f[1]))[2] if found else None


def _judged(key: FactKey, prompt: str, text: str, fact: Fact) -> DatedAnswer:
    value = match_value(text, fact)
    if value is None:
        return DatedAnswer(key, None, None, current_year(fact), prompt)
    year = value.start.year if value.start is not None else None
    return DatedAnswer(key, year, value.end is None, current_year(fact), prompt)


def _from_sheet(model_dir: Path, category: str, facts: dict[FactKey, Fact]) -> list[DatedAnswer]:
    sheet_path, dates_path = model_dir / f"{category}{SHEET}", model_dir / f"{category}{DATES}"
    sheet = _leaves(_load_json(sheet_path), category, sheet_path)
    dates = _leaves(_load_json(dates_path), category, dates_path) if dates_path.is_file() else {}
    out = []
    for (key, prompt), judgement in sheet.items():
        if judgement not in JUDGEMENTS:
            raise DataError(
                f"{key} / {prompt}: judgement {judgement!r} not in {sorted(JUDGEMENTS)}", file=str(sheet_path)
            )
        try:
            year = year_of(dates[(key, prompt)]) if (key, prompt) in dates else None
        except ValueError as err:
            raise DataError(str(err), file=str(dates_path)) from None
        fact = facts.get(key)
        out.append(DatedAnswer(key, year, JUDGEMENTS[judgement], current_year(fact) if fact else None, prompt))
    return out


def categories_of(model_dir: Path) -> list[str]:
    """Categories with an answer sheet, else with generated answers, in a model folder."""
    names = sorted(p.name[: -len(SHEET)] for p in model_dir.glob(f"*{SHEET}"))
    return names or sorted(p.name[: -len(ANSWERS)] for p in model_dir.glob(f"*{ANSWERS}"))


def read_dyknow_answers(
    model_dir: Path | str, facts: Optional[Iterable[Fact]] = None, judge: bool = False
) -> list[DatedAnswer]:
    """Every answer of one DyKnow model folder as :class:`DatedAnswer` (fact = (category, entity, relation)).

    From the stored answer sheet and dates when there is a sheet and ``judge`` is false; otherwise (``facts``
    needed) from the generated text judged by :func:`match_value`. ``current_year`` is set only with ``facts``."""
    model_dir = Path(model_dir)
    by_key = {f.key: f for f in facts or []}
    out: list[DatedAnswer] = []
    for category in categories_of(model_dir):
        if (model_dir / f"{category}{SHEET}").is_file() and not judge:
            out.extend(_from_sheet(model_dir, category, by_key))
            continue
        if not by_key:
            raise DataError(f"no answer sheet for {category}: judging the answers needs the facts", file=str(model_dir))
        path = model_dir / f"{category}{ANSWERS}"
        for (key, prompt), text in _answer_texts(_load_json(path), category, path).items():
            if key in by_key:
                out.append(_judged(key, prompt, str(text or ""), by_key[key]))
    if not out:
        raise DataError("no answer sheet or answers file", file=str(model_dir))
    return out
