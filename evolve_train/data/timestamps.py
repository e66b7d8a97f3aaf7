"""Timestamps of QA items: parsing to dates and removing timestamp phrases from questions.

A year-only timestamp is 1 January of that year and a year-month the first of that month
(docs/metrics.md#4-paired-temporal-metrics, "Automatic pairing").
"""

from __future__ import annotations

import re
from datetime import date
from typing import Union

TimestampLike = Union[str, int, date]

_MONTHS = {
    "january": 1,
    "february": 2,
    "march": 3,
    "april": 4,
    "may": 5,
    "june": 6,
    "july": 7,
    "august": 8,
    "september": 9,
    "october": 10,
    "november": 11,
    "december": 12,
}
_MONTHS.update({name[:3]: number for name, number in list(_MONTHS.items())})
_MONTHS["sept"] = 9

_YEAR = re.compile(r"(\d{4})")
_YEAR_MONTH = re.compile(r"(\d{4})-(\d{1,2})")
_ISO_DATE = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})(?:[T ][0-9:.+\-Z]*)?")
_MONTH_DAY_YEAR = re.compile(r"([A-Za-z]+)\.?\s+(\d{1,2}),?\s+(\d{4})")
_DAY_MONTH_YEAR = re.compile(r"(\d{1,2})\s+([A-Za-z]+)\.?,?\s+(\d{4})")
_MONTH_YEAR = re.compile(r"([A-Za-z]+)\.?,?\s+(\d{4})")


def _month_number(name: str, text: str) -> int:
    number = _MONTHS.get(name.lower())
    if number is None:
        raise ValueError(f"unparseable timestamp {text!r}: unknown month {name!r}")
    return number


def _make_date(year: int, month: int, day: int, text: str) -> date:
    try:
        return date(year, month, day)
    except ValueError as err:
        raise ValueError(f"unparseable timestamp {text!r}: {err}") from None


def parse_timestamp(timestamp: TimestampLike) -> date:
    """Parse a timestamp to the day it stands for (docs/metrics.md#4-paired-temporal-metrics).

    Accepts "2019" (→ 2019-01-01), "2019-05" (→ 2019-05-01), "2019-05-03" (an ISO time part is ignored),
    "February 07, 2021", "Feb 7, 2021", "7 February 2021", "February 2021", an int year or a date.
    Raises ValueError naming the text when it cannot be parsed.
    """
    if isinstance(timestamp, date):
        return timestamp
    if isinstance(timestamp, int) and not isinstance(timestamp, bool):
        timestamp = str(timestamp)
    if not isinstance(timestamp, str):
        raise ValueError(f"unparseable timestamp {timestamp!r}: expected a string")
    text = timestamp.strip()
    if match := _YEAR.fullmatch(text):
        return _make_date(int(match[1]), 1, 1, timestamp)
    if match := _YEAR_MONTH.fullmatch(text):
        return _make_date(int(match[1]), int(match[2]), 1, timestamp)
    if match := _ISO_DATE.fullmatch(text):
        return _make_date(int(match[1]), int(match[2]), int(match[3]), timestamp)
    if match := _MONTH_DAY_YEAR.fullmatch(text):
        return _make_date(int(match[3]), _month_number(match[1], timestamp), int(match[2]), timestamp)
    if match := _DAY_MONTH_YEAR.fullmatch(text):
        return _make_date(int(match[3]), _month_number(match[2], timestamp), int(match[1]), timestamp)
    if match := _MONTH_YEAR.fullmatch(text):
        return _make_date(int(match[2]), _month_number(match[1], timestamp), 1, timestamp)
    raise ValueError(f"unparseable timestamp {timestamp!r}")


def year_of(timestamp: TimestampLike) -> int:
    """Calendar year of a timestamp (the default time-accuracy slice, docs/metrics.md#4-paired-temporal-metrics)."""
    return parse_timestamp(timestamp).year


def _renderings(timestamp: str) -> list[str]:
    """The ways the timestamp may be written in a question: as given first, then common date forms."""
    forms = [timestamp.strip()]
    try:
        day = parse_timestamp(timestamp)
    except ValueError:
        return forms
    month_name = day.strftime("%B")
    if re.fullmatch(r"\d{4}", forms[0]):
        return forms
    if re.fullmatch(r"\d{4}-\d{1,2}", forms[0]) or _MONTH_YEAR.fullmatch(forms[0]):
        forms += [f"{month_name} {day.year}", f"{month_name[:3]} {day.year}", f"{day.year}-{day.month:02d}"]
    else:
        for month in (month_name, month_name[:3]):
            forms += [
                f"{month} {day.day:02d}, {day.year}",
                f"{month} {day.day}, {day.year}",
                f"{day.day} {month} {day.year}",
            ]
        forms.append(day.isoformat())
    return list(dict.fromkeys(forms))


_PREPOSITIONS = r"(?:as\s+of|in|on|at|by|during|since|until|from|for)"


def strip_timestamp_phrase(question: str, timestamp: TimestampLike | None) -> str:
    """The base question: `question` without a leading or trailing timestamp phrase (docs/metrics.md#4-paired-temporal-metrics).

    Removes e.g. "As of 2019, ", "In February 07, 2021, ", "(2019) " at the start and " in 2019",
    ", as of 2019", " (2019)" before the final punctuation. A question without such a phrase is returned
    stripped; a removed leading phrase leaves the first letter capitalised.
    """
    text = question.strip()
    if timestamp is None:
        return text
    if isinstance(timestamp, date):
        timestamp = timestamp.isoformat()
    for form in _renderings(str(timestamp)):
        ts = rf"(?<!\w){re.escape(form)}(?!\w)"
        leading = re.compile(
            rf"^\s*(?:[(\[]{ts}[)\]]|(?:{_PREPOSITIONS}\s+)?(?:the\s+year\s+)?{ts})\s*[,:\-–—]?\s*", re.IGNORECASE
        )
        trailing = re.compile(
            rf"\s*,?\s*(?:[(\[]{ts}[)\]]|(?:{_PREPOSITIONS}\s+)?(?:the\s+year\s+)?{ts})\s*(?=[?.!]?\s*$)", re.IGNORECASE
        )
        stripped, count = leading.subn("", text, count=1)
        if count and stripped:
            return stripped[0].upper() + stripped[1:]
        stripped, count = trailing.subn("", text, count=1)
        if count and stripped.strip(" ?.!"):
            return stripped.strip()
    return text
