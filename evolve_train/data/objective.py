"""The training objective of each time step: ``data.objective`` resolved against the step's data, in one place.

``data.objective`` is ``masked_entity`` (the loss on the masked entity of each pair), ``clm`` (the loss on every
token of the documents but each one's first) or ``auto`` (the default): per step, ``masked_entity`` for a step
whose corpus is masked-entity pairs, ``clm`` for a step whose corpus is documents. A run may so train pairs at
one step and documents at the next.

One objective trains a step: the text format encodes a step's rows in one objective (``models/text_format.py:
encode_batches``), and the rows of the two differ in layout (packed ``clm`` rows carry per-document
``position_ids``, masked-entity rows do not), so they cannot share a step's examples. Under ``auto`` a step
holding both pairs and documents is refused (name the objective: ``masked_entity`` trains its pairs only,
``clm`` its documents only, as the embedded world does with its two corpora). For the same reason a method that
mixes earlier steps' rows into a step (``replay``, ``oracle``) needs every step in the same objective.

* :func:`step_objective` — the objective a step trains in (``ConfigError`` where it has none): what the
  tokenized rows use (``training/token_cache.py: step_tokenizer``).
* :func:`corpus_objective` — the same without refusing (``None`` where ``auto`` cannot decide): what the
  held-out slices are drawn from (``data/slices.py``) before any check ran.
* :func:`slice_objective` — the objective a step's held-out slice is encoded in (the ``slices`` evaluator).
* :func:`check_objectives` — before training: every step resolves, an explicit objective fits every step's
  data, a seq2seq model gets no documents-only step, replay and the oracle see one objective. The error names
  the step, its files and the fix.
"""

from __future__ import annotations

from typing import Optional, Sequence

from evolve_train.errors import ConfigError

AUTO = "auto"
MASKED_ENTITY = "masked_entity"
CLM = "clm"
OBJECTIVES = (MASKED_ENTITY, CLM, AUTO)
MIXING_STRATEGIES = ("replay", "oracle")
"""Strategies that put earlier steps' tokenized rows into a step's examples (``methods/``)."""


def corpus_kind(step) -> str:
    """``pairs``, ``texts``, ``mixed`` (both) or ``empty``: what the step's training corpus holds."""
    pairs, texts = len(step.pairs) > 0, len(step.texts) > 0
    return {(True, False): "pairs", (False, True): "texts", (True, True): "mixed"}.get((pairs, texts), "empty")


def _name(objective) -> str:
    name = str(getattr(objective, "value", objective))
    if name not in OBJECTIVES:
        raise ConfigError(f"data.objective: unknown objective '{name}' (known: {', '.join(OBJECTIVES)})")
    return name


def corpus_objective(objective, step) -> Optional[str]:
    """The objective ``step`` trains in: an explicit one as given; ``auto``: ``masked_entity`` for pairs,
    ``clm`` for documents, ``None`` for a step with both or with neither (:func:`step_objective` refuses those)."""
    name = _name(objective)
    if name != AUTO:
        return name
    return {"pairs": MASKED_ENTITY, "texts": CLM}.get(corpus_kind(step))


def _files(step) -> str:
    files = list(getattr(step, "files", None) or [])
    if not files:
        return ""
    shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    return f" (files: {shown})"


def _where(step) -> str:
    return f"time step {step.index} ({step.name}){_files(step)}"


def step_objective(objective, step) -> str:
    """The objective ``step`` trains in (see the module docstring); ``ConfigError`` naming the step, its files
    and the fix when ``auto`` cannot decide or an explicit objective has nothing to train on."""
    name, kind = _name(objective), corpus_kind(step)
    where = _where(step)
    if kind == "empty":
        raise ConfigError(
            f"{where} has no training data: no masked-entity pair and no document is left after reading its "
            "files (give the step files that hold records)"
        )
    if name == AUTO:
        if kind == "mixed":
            raise ConfigError(
                f"{where} holds both masked-entity pairs ({len(step.pairs)}) and documents ({len(step.texts)}), "
                "and one objective trains a step (their rows differ): set data.objective=masked_entity (trains "
                "the pairs) or data.objective=clm (trains the documents), or put the pairs and the documents in "
                "different steps"
            )
        return MASKED_ENTITY if kind == "pairs" else CLM
    if name == MASKED_ENTITY and not len(step.pairs):
        raise ConfigError(
            f"data.objective=masked_entity, but {where} has no masked-entity pairs, only {len(step.texts)} "
            "documents: set data.objective=auto (pairs train masked_entity, documents clm, per step) or "
            "data.objective=clm, or give the step pairs (CSV/JSONL with input, output)"
        )
    if name == CLM and not len(step.texts):
        raise ConfigError(
            f"data.objective=clm, but {where} has no documents, only {len(step.pairs)} masked-entity pairs: "
            "set data.objective=auto (pairs train masked_entity, documents clm, per step) or "
            "data.objective=masked_entity, or give the step documents (.txt, or JSONL/CSV with text)"
        )
    return name


def slice_objective(objective, step) -> str:
    """The objective ``step``'s held-out slice is encoded in: an explicit one as given; ``auto``: what the slice
    holds (documents: ``clm``, else ``masked_entity``), as :func:`corpus_objective` drew it."""
    name = _name(objective)
    if name != AUTO:
        return name
    first = next(iter(step.heldout), None)
    return CLM if first is not None and "text" in first and "input" not in first else MASKED_ENTITY


def check_objectives(cfg, timeline) -> list[str]:
    """Each step's objective (:func:`step_objective`), checked before training; ``cfg``: the run config (or
    its ``data`` section). Refuses (``ConfigError``): a step that resolves to none; a documents-only step for an
    encoder-decoder model (``model.arch=t5``), which trains on masked-entity pairs; steps of different
    objectives under a method that mixes earlier steps' rows (``replay``, ``oracle``)."""
    data = getattr(cfg, "data", cfg)
    if str(data.kind) == "temporal_qa" and not data.train_files:
        raise ConfigError(
            "data.train_files: no training files (give {step name: [files, folders or globs]} per time step, e.g. "
            "'+data.train_files.2019=[train_2019.jsonl]'); evaluating a model needs none: evolve-eval"
        )
    objectives = [step_objective(data.objective, step) for step in timeline.steps]
    if str(getattr(getattr(cfg, "model", None), "arch", "")) == "t5":  # models/build.py: the T5 text format
        for step, objective in zip(timeline.steps, objectives):
            if not len(step.pairs):
                raise ConfigError(
                    f"{_where(step)} has only documents, and a seq2seq model (model.arch=t5) trains on "
                    "masked-entity pairs: make pairs with `evolve-data mask --format t5`, or use a causal model"
                )
    strategies: Sequence[str] = list(getattr(getattr(cfg, "method", None), "strategies", None) or [])
    mixing = [name for name in strategies if name in MIXING_STRATEGIES]
    if mixing and len(set(objectives)) > 1:
        k = next(k for k, objective in enumerate(objectives) if objective != objectives[0])
        raise ConfigError(
            f"method.strategies has {mixing[0]}, which mixes earlier steps' rows into each step, but "
            f"{_where(timeline.steps[0])} trains {objectives[0]} and {_where(timeline.steps[k])} trains "
            f"{objectives[k]} "
            "(their rows differ): give every step the same kind of data, or name one data.objective that "
            "every step has data for, or use a method without replay/oracle"
        )
    return objectives
