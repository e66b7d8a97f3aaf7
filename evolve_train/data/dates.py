"""How a date is written into training text and into timestamped prompts (``data.world.dates``, ``data.time_prefix``).

Three forms (``DATE_FORMS``):

* ``prefix`` — the TempLAMA form (Dhingra et al. 2022): ``"year: 2019 text: "`` before the text (the format is
  ``data.time_prefix_format``; ``{date}`` is the slot);
* ``inline`` — ``"As of 2019, "`` before the text, its first letter lowercased unless the text starts with
  the entity's proper name;
* ``none`` — training text carries no date. Timestamped probes must still name their time (the timestamp
  ablation asks them with another date and without one), so they are asked in the ``inline`` form, which
  the model never read: the negative control of time-aware training.
"""

from __future__ import annotations

from typing import Optional

from evolve_train.errors import ConfigError

DATE_FORMS = ("prefix", "inline", "none")
PREFIX_FORMAT = "year: {date} text: "
INLINE_FORMAT = "As of {date}, "


def check_form(form: str, key: str = "data.world.dates") -> str:
    if form not in DATE_FORMS:
        raise ConfigError(f"{key}: unknown date form '{form}' (known: {', '.join(DATE_FORMS)})")
    return form


def check_prefix_format(prefix_format: str, key: str = "data.time_prefix_format") -> str:
    """The prefix format must hold exactly one ``{date}`` slot and nothing else to fill."""
    try:
        rendered = prefix_format.format(date="\0")
    except (KeyError, IndexError, ValueError) as err:
        raise ConfigError(f"{key}: {prefix_format!r} is not a format with one {{date}} slot ({err})") from None
    if rendered.count("\0") != 1:
        raise ConfigError(f"{key}: {prefix_format!r} must contain the slot {{date}} exactly once")
    return prefix_format


def lower_first(text: str, entity: Optional[str] = None) -> str:
    """``text`` with its first letter lowercased unless it starts with the entity's (proper) name."""
    if not text or (entity and text.startswith(entity)):
        return text
    return text[0].lower() + text[1:]


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def dated(text: str, date: str, form: str, entity: Optional[str] = None, prefix_format: str = PREFIX_FORMAT) -> str:
    """``text`` carrying ``date`` in ``form`` (``none`` asks in the inline form: see the module docstring)."""
    if form == "prefix":
        return prefix_format.format(date=date) + text
    return INLINE_FORMAT.format(date=date) + lower_first(text, entity)


def dated_template(text: str, form: str, entity: Optional[str] = None, prefix_format: str = PREFIX_FORMAT) -> str:
    """:func:`dated` with a ``{timestamp}`` slot in place of the date (``extra.ts_template`` of a probe)."""
    if form == "prefix":
        return prefix_format.format(date="{timestamp}") + _escape(text)
    return INLINE_FORMAT.format(date="{timestamp}") + _escape(lower_first(text, entity))


def training_text(
    text: str, date: str, form: str, entity: Optional[str] = None, prefix_format: str = PREFIX_FORMAT
) -> str:
    """A training sentence or document of a snapshot dated ``date``: unchanged when ``form`` is ``none``."""
    return text if form == "none" else dated(text, date, form, entity, prefix_format)
