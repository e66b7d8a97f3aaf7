"""A small invented fixture in DyKnow's layout (never the real data), and its hand-computed states.

Facts (key: category / entity / relation), every answer form of ``data/loaders/dyknow_facts.py``:

* F1 countries/Freedonia/President of Freedonia: Alice Arden [1990-03-01, 2004-05-10), Bob Brand from 2004-05-10.
* F2 countries/Freedonia/Prime Minister of Freedonia: Carl Cole (E only, day unknown: until 2001-06-15),
  Dora Dane [2001-06-15, 2008-07-01) (unknown day / month), Eve Ernst from 2008-07-01 (month unknown).
* F3 countries/Freedonia/monarch of Freedonia: King Kay from 1980 (never changes).
* F4 athletes/Ann Runner (no relation): Club One [1998-07-01, 2006-07-01), Club Two from 2006-07-01,
  Nation Team from 1999-07-01 (S + P: P bounds nothing) — two values at once = aliases; Youth Team on
  1997-07-01 only (start = end).
* F5 orgs/Acme Org/chairperson: Gus Grant S 2003-00-00 E 2003-01-01 (the middle of 2003 is after the end:
  both become 2003-01-01, the one day it holds), Hana Hill from 2003-01-02.
* F6 orgs/Acme Org/treasurer: Lee Lamb from 2007-02-03 (a new fact).
* F7 misc/Odd Entity/mascot (prompt names ``alpha``/``beta``, unseen by any default): Jay Jay
  [2000-01-01, 2005-01-01), Ivy Owl on 2010-01-01 only (P alone).
"""

from __future__ import annotations

import json
from pathlib import Path

S = "T00:00:00Z"


def d(text: str) -> str:
    return f"+{text}{S}"


def country_prompts(role: str) -> dict:
    return {
        "generic": f"The {role.split(' of ')[0].lower()} in Freedonia is",
        "contextualized": f"The {role} is",
        "rephrased_1": f"The name of the current {role} is",
        "rephrased_2": f"The position of the {role} is currently held by",
    }


FACTS = {
    "countries": {
        "Freedonia": {
            "President of Freedonia": {
                "questions": country_prompts("President of Freedonia"),
                "answers": [
                    f"Alice Arden |S: {d('1990-03-01')} |E: {d('2004-05-10')}",
                    f"Bob Brand |S: {d('2004-05-10')}",
                ],
            },
            "Prime Minister of Freedonia": {
                "questions": country_prompts("Prime Minister of Freedonia"),
                "answers": [
                    f"Carl Cole |E: {d('2001-06-00')}",
                    f"Dora Dane |S: {d('2001-06-00')} |E: {d('2008-00-00')}",
                    f"Eve Ernst |S: {d('2008-00-00')}",
                ],
            },
            "monarch of Freedonia": {
                "questions": country_prompts("monarch of Freedonia"),
                "answers": [f"King Kay |S: {d('1980-01-01')}"],
            },
        }
    },
    "athletes": {
        "Ann Runner": {
            "questions": {
                "generic": "The current team of Ann Runner is",
                "contextualized": "The team Ann Runner currently plays for is",
                "rephrased_1": "Ann Runner is currently playing for",
                "rephrased_2": "The current club of Ann Runner is",
            },
            "answers": [
                f"Club One |S: {d('1998-00-00')} |E: {d('2006-00-00')}",
                f"Club Two |S: {d('2006-00-00')}",
                f"Nation Team |S: {d('1999-00-00')} |P: {d('2009-06-01')}",
                f"Youth Team |S: {d('1997-00-00')} |E: {d('1997-00-00')}",
            ],
        }
    },
    "orgs": {
        "Acme Org": {
            "chairperson": {
                "questions": {
                    "generic": "The chairperson of Acme Org is",
                    "rephrased_1": "The position of chairperson at Acme Org is currently held by",
                    "rephrased_2": "The chairperson position at Acme Org is currently held by",
                    "rephrased_3": "The name of the current chairperson at Acme Org is",
                },
                "answers": [
                    f"Gus Grant |S: {d('2003-00-00')} |E: {d('2003-01-01')}",
                    f"Hana Hill |S: {d('2003-01-02')}",
                ],
            },
            "treasurer": {
                "questions": {
                    "generic": "The treasurer of Acme Org is",
                    "rephrased_1": "The name of the current treasurer at Acme Org is",
                },
                "answers": [f"Lee Lamb |S: {d('2007-02-03')}"],
            },
        }
    },
    "misc": {
        "Odd Entity": {
            "mascot": {
                "questions": {"alpha": "The mascot of Odd Entity is", "beta": "Odd Entity has as its mascot"},
                "answers": [f"Ivy Owl |P: {d('2010-01-01')}", f"Jay Jay |S: {d('2000-01-01')} |E: {d('2005-01-01')}"],
            }
        }
    },
}

QUESTIONS = {
    "countries": {
        "Freedonia": {"President of Freedonia": {"questions": ["Who is the President of Freedonia?"], "answers": []}}
    }
}

PASSAGE = "Bob Brand has led Freedonia as its president since the spring election."
PASSAGES = {
    "countries": {
        "Freedonia": {
            "President of Freedonia": {
                "matches": {
                    "full": [
                        {
                            "paragraph": {"text": PASSAGE, "header_name": "Freedonia", "header_level": "1"},
                            "matched": ["president", "Bob Brand"],
                        }
                    ],
                    "em": [
                        {
                            "paragraph": {
                                "text": "Alice Arden was president of Freedonia.",
                                "header_name": "Freedonia",
                                "header_level": "1",
                            },
                            "matched": "Alice Arden",
                        }
                    ],
                }
            }
        }
    }
}

F1 = ("countries", "Freedonia", "President of Freedonia")
F2 = ("countries", "Freedonia", "Prime Minister of Freedonia")
F3 = ("countries", "Freedonia", "monarch of Freedonia")
F4 = ("athletes", "Ann Runner", "")
F5 = ("orgs", "Acme Org", "chairperson")
F6 = ("orgs", "Acme Org", "treasurer")
F7 = ("misc", "Odd Entity", "mascot")

STATES = {  # hand-computed: the values valid on 1 January of each year
    "2000": {
        F1: ("Alice Arden",),
        F2: ("Carl Cole",),
        F3: ("King Kay",),
        F4: ("Club One", "Nation Team"),
        F5: (),
        F6: (),
        F7: ("Jay Jay",),
    },
    "2003": {
        F1: ("Alice Arden",),
        F2: ("Dora Dane",),
        F3: ("King Kay",),
        F4: ("Club One", "Nation Team"),
        F5: ("Gus Grant",),
        F6: (),
        F7: ("Jay Jay",),
    },
    "2005": {
        F1: ("Bob Brand",),
        F2: ("Dora Dane",),
        F3: ("King Kay",),
        F4: ("Club One", "Nation Team"),
        F5: ("Hana Hill",),
        F6: (),
        F7: (),
    },
    "2010": {
        F1: ("Bob Brand",),
        F2: ("Eve Ernst",),
        F3: ("King Kay",),
        F4: ("Club Two", "Nation Team"),
        F5: ("Hana Hill",),
        F6: ("Lee Lamb",),
        F7: ("Ivy Owl",),
    },
}


def write_fixture(root: Path, facts: dict | None = None, qa: bool = True, passages: bool = True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "grc_generated.json").write_text(json.dumps(facts if facts is not None else FACTS), encoding="utf-8")
    if qa:
        (root / "qa_generated.json").write_text(json.dumps(QUESTIONS), encoding="utf-8")
    if passages:
        (root / "passages.json").write_text(json.dumps(PASSAGES), encoding="utf-8")
    return root
