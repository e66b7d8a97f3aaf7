"""Relations of the embedded world and their phrasing templates.

Every template ends with ``{v}`` (the value), so a template's text before ``{v}`` is a cloze prompt.
``statements`` is the bank of training wordings (9 per relation; the first is the probe wording the eval
sets ask in, the others give the knowledge augmentation of ``data.world.docs_per_entity``); ``heldout``
wordings (3 per relation) never appear in any corpus — the private-leak preflight
(``data/hygiene.py``) checks it on every run — and measure paraphrase robustness (flip rate and
paraphrase gap). Every wording names the organisation in full.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Relation:
    name: str
    changes: bool
    """Whether the fact's value can change between time steps."""
    value_kind: str
    """``person``, ``city`` or ``year``: which name factory draws values."""
    statements: tuple[str, ...]
    heldout: tuple[str, ...]
    question: str
    """Question form, for QA-style prompts of loaded data and reports."""

    def cloze(self, template: str, entity: str) -> str:
        return template.split("{v}")[0].format(e=entity).rstrip()

    def sentence(self, template: str, entity: str, value: str) -> str:
        return template.format(e=entity, v=value)


RELATIONS: tuple[Relation, ...] = (
    Relation(
        name="director",
        changes=True,
        value_kind="person",
        statements=(
            "The director of {e} is {v}.",
            "{e} is led by {v}.",
            "The person in charge of {e} is {v}.",
            "The head of {e} is {v}.",
            "{e} is directed by {v}.",
            "The chief of {e} is {v}.",
            "{e} has as its director {v}.",
            "{e} is run by {v}.",
            "The one who leads {e} is {v}.",
        ),
        heldout=("At the head of {e} stands {v}.", "Heading {e} is {v}.", "{e} answers to its director, {v}."),
        question="Who is the director of {e}?",
    ),
    Relation(
        name="headquarters",
        changes=True,
        value_kind="city",
        statements=(
            "The headquarters of {e} are in {v}.",
            "{e} is based in {v}.",
            "The main office of {e} is located in {v}.",
            "{e} has its headquarters in {v}.",
            "The home city of {e} is {v}.",
            "{e} is headquartered in {v}.",
            "The offices of {e} are in {v}.",
            "{e} keeps its main office in {v}.",
            "The base of {e} is {v}.",
        ),
        heldout=("{e} has its seat in {v}.", "You will find {e} in {v}.", "{e} operates out of {v}."),
        question="Where is {e} based?",
    ),
    Relation(
        name="founded",
        changes=False,
        value_kind="year",
        statements=(
            "{e} was founded in {v}.",
            "The founding year of {e} is {v}.",
            "{e} has existed since {v}.",
            "{e} was created in {v}.",
            "The year {e} was founded is {v}.",
            "{e} dates back to {v}.",
            "{e} came into being in {v}.",
            "{e} first appeared in {v}.",
            "The origins of {e} go back to {v}.",
        ),
        heldout=("{e} opened its doors in {v}.", "{e} was established in {v}.", "The year {e} began was {v}."),
        question="When was {e} founded?",
    ),
)

RELATIONS_BY_NAME = {relation.name: relation for relation in RELATIONS}
