"""Timestamp parsing and timestamp-phrase removal (docs/metrics.md#4-paired-temporal-metrics)."""

from datetime import date

import pytest

from evolve_train.data.timestamps import parse_timestamp, strip_timestamp_phrase, year_of


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2019", date(2019, 1, 1)),  # year only → 1 January
        ("2019-05", date(2019, 5, 1)),  # year-month → the 1st
        ("2019-05-03", date(2019, 5, 3)),
        ("February 07, 2021", date(2021, 2, 7)),
        ("Feb 7, 2021", date(2021, 2, 7)),
        ("7 February 2021", date(2021, 2, 7)),
        ("Sept 3, 2020", date(2020, 9, 3)),
        ("May 2019", date(2019, 5, 1)),
        ("2019-05-03T10:00:00Z", date(2019, 5, 3)),
        (" 2019 ", date(2019, 1, 1)),
        (2019, date(2019, 1, 1)),
    ],
)
def test_parse_timestamp(text, expected):
    assert parse_timestamp(text) == expected


def test_year_of():
    assert year_of("February 07, 2021") == 2021
    assert year_of("2019-05") == 2019


@pytest.mark.parametrize("text", ["yesterday", "", "2019-13", "2019-02-30", "Febr 7, 2021", "19"])
def test_unparseable_timestamps_name_the_text(text):
    with pytest.raises(ValueError, match="unparseable timestamp " + repr(text).replace("[", r"\[")):
        parse_timestamp(text)


@pytest.mark.parametrize(
    "question, timestamp, base",
    [
        ("As of 2019, who leads Acme?", "2019", "Who leads Acme?"),
        ("In February 07, 2021, who leads Acme?", "February 07, 2021", "Who leads Acme?"),
        ("(2019) who leads Acme?", "2019", "Who leads Acme?"),
        ("Who leads Acme? (2019)", "2019", "Who leads Acme?"),
        ("Who led Acme in 2019?", "2019", "Who led Acme?"),
        ("Who led Acme, as of 2019-05-03?", "2019-05-03", "Who led Acme?"),
        # the question writes the date differently from the timestamp field
        ("On Feb 7, 2021, who led Acme?", "2021-02-07", "Who led Acme?"),
        ("In May 2019, who led Acme?", "2019-05", "Who led Acme?"),
    ],
)
def test_strip_timestamp_phrase(question, timestamp, base):
    assert strip_timestamp_phrase(question, timestamp) == base


def test_strip_leaves_other_questions_alone():
    assert strip_timestamp_phrase("Who led Acme in 12019?", "2019") == "Who led Acme in 12019?"  # not a whole token
    assert strip_timestamp_phrase("  Who leads Acme? ", None) == "Who leads Acme?"
    assert strip_timestamp_phrase("Who founded Acme in 1990?", "2019") == "Who founded Acme in 1990?"
    assert strip_timestamp_phrase("2019", "2019") == "2019"  # nothing would be left
