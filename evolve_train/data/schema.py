"""The timeline's data types: time steps with their corpora, and eval sets of QA items.

The bottom of the data layer: loaders, the embedded world and the evaluators import these types from here
(or through :mod:`evolve_train.data.timeline`, which re-exports them), so no loader needs the module that
dispatches to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

SET_KINDS = ("unchanged", "new", "updated", "outdated")


@dataclass
class TimeStep:
    index: int
    name: str
    """Human name of the snapshot (a year, a month code such as ``0901``)."""
    pairs: list[dict] = field(default_factory=list)
    """Masked-entity training pairs: ``input`` (value replaced by a mask token) and ``output``."""
    texts: list[dict] = field(default_factory=list)
    """Plain-text documents: ``text`` (and ``doc_id``)."""
    heldout: list[dict] = field(default_factory=list)
    """The step's held-out slice (``data.heldout_share``, data/slices.py): examples of the training objective's
    corpus (pairs for ``masked_entity``, documents for ``clm``) taken out of ``pairs``/``texts``, never trained on."""
    files: list[str] = field(default_factory=list)
    """The training files the step's corpus was read from (for messages; empty for generated corpora)."""


@dataclass
class EvalSet:
    name: str
    """Unique name, e.g. ``unchanged`` or ``updated_2``."""
    kind: str
    """One of ``unchanged``, ``new``, ``updated``, ``outdated`` (or a loader-specific kind)."""
    step: Optional[int]
    """Step that introduced the set (``None`` for Unchanged, evaluated at every checkpoint)."""
    items: list[dict]
    """QA items following the item contract of ``data/qa_items.py`` (``id``, ``question``, ``answers``, ...)."""


@dataclass
class Timeline:
    steps: list[TimeStep]
    eval_sets: list[EvalSet]
    prompt_template: str = "{question}"
    """How a QA item becomes a prompt."""

    def sets_for_checkpoint(self, checkpoint: int, forward_transfer: bool = False) -> list[EvalSet]:
        """Sets evaluated on the checkpoint saved after ``checkpoint``: every set introduced so far."""
        horizon = checkpoint + 1 if forward_transfer else checkpoint
        return [s for s in self.eval_sets if s.step is None or s.step <= horizon]

    demonstrations: list[dict] = field(default_factory=list)
    """Few-shot candidates (dev items only, ``data/few_shot.py``); the first ``few_shot`` that are not the
    asked item (by id or question) precede every prompt."""
    few_shot: int = 0
    """Demonstrations per prompt (``eval.few_shot``; 0 = zero-shot)."""

    def prompt(self, item: dict) -> str:
        prompt = self.prompt_template.format(**item)
        if not self.few_shot:
            return prompt
        shots = [
            demo
            for demo in self.demonstrations
            if demo.get("id") != item.get("id") and demo.get("question") != item.get("question")
        ]
        return "".join(self.demonstration(demo) for demo in shots[: self.few_shot]) + prompt

    def demonstration(self, demo: dict) -> str:
        """A solved example: the prompt, its first gold answer, a blank line."""
        return f"{self.prompt_template.format(**demo)} {demo['answers'][0]}\n\n"
