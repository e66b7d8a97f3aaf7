"""Reading DyKnow's files (``grc_generated.json``, ``qa_generated.json``, ``passages.json``) into dated facts.

Layout: category -> entity -> (relation ->) ``{"questions": {name: cloze prompt, ...}, "answers": [...]}``.
An entity object that itself holds ``questions``/``answers`` is one fact without a relation (DyKnow's athletes);
otherwise each of its keys is a relation. Prompt names are taken as they come (``generic``, ``contextualized``,
``rephrased_1``... or any other), in the file's order.

An answer is ``Value |S: +YYYY-MM-DDThh:mm:ssZ |E: ... |P: ...`` (:func:`parse_answer`):

* ``S`` start, ``E`` end, ``P`` point in time, each at most once, in any order; at least one of them.
* A date's ``00`` month or day is unknown: a date known to the year is dated 1 July, one known to the month
  the 15th (the middle of what is known, so an unknown part moves a change neither earlier nor later). Where
  that would put a start after its end (``S: 2011-00-00``, ``E: 2011-01-01``), both become the earliest day
  the two allow (the value holds on that day); a start whose earliest day is after the end's latest fails.
* Validity is half-open, ``S <= d < E``: the handover day belongs to the successor. No ``S``: valid from
  the beginning; no ``E``: still valid at the dump. A value whose start equals its end holds on that day.
  ``P`` alone (no ``S``, no ``E``): valid on that day only; with ``S`` or ``E`` it is kept but bounds nothing.

Anything else fails with a :class:`DataError` naming the file, category, entity, relation and the answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any, Optional

from evolve_train.errors import DataError

FACTS_FILE = "grc_generated.json"
QA_FILE = "qa_generated.json"
PASSAGES_FILE = "passages.json"
QUALIFIERS = {"S": "start", "E": "end", "P": "point"}
FACT_KEYS = ("questions", "answers")
_DATE = re.compile(r"^\+(\d{4,})-(\d{2})-(\d{2})T\d{2}:\d{2}:\d{2}Z$")
_QUALIFIER = re.compile(r"^([A-Za-z]+):\s*(\S*)$")
UNKNOWN_MONTH, UNKNOWN_DAY = 7, 15
"""How a ``00`` month (1 July: with it the day is 1) or a ``00`` day (the 15th) is dated."""

FactKey = tuple[str, str, str]
"""(category, entity, relation; ``""`` for a fact without a relation)."""


@dataclass(frozen=True)
class Value:
    text: str
    start: Optional[date] = None
    end: Optional[date] = None
    point: Optional[date] = None

    def valid_on(self, day: date) -> bool:
        """Whether the value holds on ``day`` (see the module docstring)."""
        if self.start is None and self.end is None:
            return day == self.point
        if self.start is not None and self.end is not None and self.start == self.end:
            return day == self.start
        return (self.start is None or self.start <= day) and (self.end is None or day < self.end)


@dataclass
class Fact:
    category: str
    entity: str
    relation: str
    """``""`` when the entity holds the prompts itself."""
    prompts: dict[str, str]
    """Prompt name -> cloze prompt, in the file's order."""
    values: list[Value]
    questions: list[str] = field(default_factory=list)
    """Question forms from ``qa_generated.json`` (empty without it)."""

    @property
    def key(self) -> FactKey:
        return self.category, self.entity, self.relation

    def state(self, day: date) -> tuple[str, ...]:
        """The distinct values valid on ``day``, in the file's order (several = aliases of one fact)."""
        return tuple(dict.fromkeys(v.text for v in self.values if v.valid_on(day)))


def where(category: str, entity: str, relation: str) -> str:
    named = f"relation '{relation}'" if relation else "no relation (the entity holds the prompts)"
    return f"category '{category}', entity '{entity}', {named}"


def date_range(text: str) -> tuple[date, date, date]:
    """(dated as, earliest, latest day) of a Wikidata date ``+YYYY-MM-DDThh:mm:ssZ``; a ``00`` month or day
    is dated as the module docstring says."""
    match = _DATE.match(text)
    if not match:
        raise ValueError(f"date {text!r} is not +YYYY-MM-DDThh:mm:ssZ")
    year, month, day = (int(part) for part in match.groups())
    if month == 0 and day != 0:
        raise ValueError(f"date {text!r} has an unknown month but a known day")
    if year < 1 or year > 9999:
        raise ValueError(f"date {text!r}: only years 1 to 9999 are supported")
    try:
        if month == 0:
            return date(year, UNKNOWN_MONTH, 1), date(year, 1, 1), date(year, 12, 31)
        if day == 0:
            last = (date(year + 1, 1, 1) if month == 12 else date(year, month + 1, 1)) - timedelta(days=1)
            return date(year, month, UNKNOWN_DAY), date(year, month, 1), last
        exact = date(year, month, day)
    except ValueError as err:
        raise ValueError(f"date {text!r} is not a calendar date ({err})") from None
    return exact, exact, exact


def parse_date(text: str) -> date:
    """The day a Wikidata date is dated as (see :func:`date_range`)."""
    return date_range(text)[0]


def _answer(raw: Any) -> Value:
    if not isinstance(raw, str):
        raise ValueError(f"an answer must be a string, got {type(raw).__name__}")
    text, *parts = raw.split("|")
    text = text.strip()
    if not text:
        raise ValueError("no value before the first '|'")
    dates: dict[str, tuple[date, date, date]] = {}
    for part in parts:
        match = _QUALIFIER.match(part.strip())
        if not match:
            raise ValueError(f"malformed qualifier {part.strip()!r} (expected 'S: <date>', 'E: <date>' or 'P: <date>')")
        name, stamp = match[1], match[2]
        if name not in QUALIFIERS:
            raise ValueError(f"unknown qualifier '{name}' (known: {', '.join(QUALIFIERS)})")
        if QUALIFIERS[name] in dates:
            raise ValueError(f"qualifier '{name}' given twice")
        dates[QUALIFIERS[name]] = date_range(stamp)
    if not dates:
        raise ValueError("no date: a value needs S, E or P")
    days = {name: dated for name, (dated, _, _) in dates.items()}
    if "start" in dates and "end" in dates and days["end"] < days["start"]:
        (_, start_earliest, _), (_, end_earliest, end_latest) = dates["start"], dates["end"]
        if start_earliest > end_latest:
            raise ValueError(f"it ends ({end_latest}) before it starts ({start_earliest})")
        days["start"] = days["end"] = max(start_earliest, end_earliest)
    return Value(text, **days)


def parse_answer(
    raw: Any,
    category: str = "?",
    entity: str = "?",
    relation: str = "",
    file: Optional[str] = None,
    index: Optional[int] = None,
) -> Value:
    """One answer as a :class:`Value`; DataError naming category, entity, relation and the answer."""
    try:
        return _answer(raw)
    except ValueError as err:
        raise DataError(
            f"malformed answer {raw!r} of {where(category, entity, relation)}: {err}",
            file=file,
            field=_field(category, entity, relation, f"answers[{index}]" if index is not None else "answers"),
        ) from None


def _field(category: str, entity: str, relation: str, leaf: str) -> str:
    return "/".join(part for part in (category, entity, relation, leaf) if part)


def _load(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise DataError(
            f"missing file: DyKnow's {path.name} not found (data.root must hold it)", file=str(path)
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        line = getattr(err, "lineno", None)
        raise DataError(f"malformed JSON: {err}", file=str(path), line=line) from None
    if not isinstance(data, dict):
        raise DataError(f"expected an object of categories, got {type(data).__name__}", file=str(path))
    return data


def _entries(data: dict, path: Path, leaf_keys: tuple[str, ...]):
    """(category, entity, relation, entry) of every fact entry of one DyKnow file."""
    for category, entities in data.items():
        if not isinstance(entities, dict):
            raise DataError(
                f"category '{category}': expected an object of entities, got {type(entities).__name__}",
                file=str(path),
                field=category,
            )
        for entity, body in entities.items():
            if not isinstance(body, dict) or not body:
                raise DataError(
                    f"{where(category, entity, '')}: expected an object of relations or of {'/'.join(leaf_keys)}",
                    file=str(path),
                    field=_field(category, entity, "", ""),
                )
            if any(key in body for key in leaf_keys):
                yield category, entity, "", body
                continue
            for relation, entry in body.items():
                if not isinstance(entry, dict):
                    raise DataError(
                        f"{where(category, entity, relation)}: expected an object with "
                        f"{'/'.join(leaf_keys)}, got {type(entry).__name__}",
                        file=str(path),
                        field=_field(category, entity, relation, ""),
                    )
                yield category, entity, relation, entry


def _prompts(entry: dict, category: str, entity: str, relation: str, path: Path) -> dict[str, str]:
    prompts = entry.get("questions")
    name = _field(category, entity, relation, "questions")
    if not isinstance(prompts, dict) or not prompts:
        raise DataError(
            f"{where(category, entity, relation)}: 'questions' must be a non-empty object of "
            "prompt name -> cloze prompt",
            file=str(path),
            field=name,
        )
    for key, prompt in prompts.items():
        if not isinstance(prompt, str) or not prompt.strip():
            raise DataError(
                f"{where(category, entity, relation)}: prompt '{key}' must be a non-empty string, got {prompt!r}",
                file=str(path),
                field=f"{name}/{key}",
            )
    return {key: prompt.strip() for key, prompt in prompts.items()}


def _values(entry: dict, category: str, entity: str, relation: str, path: Path) -> list[Value]:
    answers = entry.get("answers")
    if not isinstance(answers, list) or not answers:
        raise DataError(
            f"{where(category, entity, relation)}: 'answers' must be a non-empty list",
            file=str(path),
            field=_field(category, entity, relation, "answers"),
        )
    return [parse_answer(raw, category, entity, relation, str(path), k) for k, raw in enumerate(answers)]


def read_facts(root: Path, categories: Optional[list[str]] = None, qa: bool = True) -> list[Fact]:
    """Every fact of ``<root>/grc_generated.json`` (only ``categories`` when given), validated; with ``qa``
    and ``qa_generated.json`` present, each fact's question forms from it."""
    path = Path(root) / FACTS_FILE
    data = _load(path)
    if categories is not None:
        missing = [c for c in categories if c not in data]
        if missing:
            raise DataError(
                f"data.dyknow.categories: {missing} not in the file (it has: {', '.join(data)})", file=str(path)
            )
        data = {c: data[c] for c in categories}
    facts = [
        Fact(c, e, r, _prompts(entry, c, e, r, path), _values(entry, c, e, r, path))
        for c, e, r, entry in _entries(data, path, FACT_KEYS)
    ]
    qa_path = Path(root) / QA_FILE
    if qa and qa_path.is_file():
        questions = read_questions(qa_path)
        for fact in facts:
            fact.questions = questions.get(fact.key, [])
    return facts


def read_questions(path: Path) -> dict[FactKey, list[str]]:
    """Question forms per fact of ``qa_generated.json`` (same layout, ``questions`` a list of strings)."""
    out: dict[FactKey, list[str]] = {}
    for c, e, r, entry in _entries(_load(path), path, FACT_KEYS):
        questions = entry.get("questions")
        if not isinstance(questions, list) or not all(isinstance(q, str) and q.strip() for q in questions):
            raise DataError(
                f"{where(c, e, r)}: 'questions' must be a list of non-empty strings",
                file=str(path),
                field=_field(c, e, r, "questions"),
            )
        out[(c, e, r)] = [q.strip() for q in questions]
    return out


def read_passages(root: Path) -> dict[FactKey, list[tuple[str, tuple[str, ...]]]]:
    """(paragraph text, matched strings) per fact of ``<root>/passages.json``, each paragraph once per fact.
    ``matched`` is a string (the value found) or a list of strings (the ``full`` kind: relation and value)."""
    path = Path(root) / PASSAGES_FILE
    out: dict[FactKey, list[tuple[str, tuple[str, ...]]]] = {}
    for c, e, r, entry in _entries(_load(path), path, ("matches",)):
        matches = entry.get("matches")
        if not isinstance(matches, dict):
            raise DataError(
                f"{where(c, e, r)}: 'matches' must be an object of match kinds",
                file=str(path),
                field=_field(c, e, r, "matches"),
            )
        seen: dict[str, tuple[str, ...]] = {}
        for kind, found in matches.items():
            for k, match in enumerate(found or []):
                text = ((match or {}).get("paragraph") or {}).get("text") if isinstance(match, dict) else None
                matched = match.get("matched") if isinstance(match, dict) else None
                matched = [matched] if isinstance(matched, str) else matched
                if (
                    not isinstance(text, str)
                    or not isinstance(matched, list)
                    or not all(isinstance(m, str) for m in matched)
                ):
                    raise DataError(
                        f"{where(c, e, r)}: a match needs paragraph.text (a string) and matched (a "
                        "string or a list of strings)",
                        file=str(path),
                        field=_field(c, e, r, f"matches/{kind}[{k}]"),
                    )
                seen.setdefault(text.strip(), tuple(m.strip() for m in matched))
        out[(c, e, r)] = list(seen.items())
    return out
