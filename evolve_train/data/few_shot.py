"""Few-shot prompts from dev items (``eval.few_shot=k``), for question-style eval sets.

Demonstrations are ``dev`` items only (``data/hygiene.py``: the only items that may serve as few-shot
examples; a private item is never shown), drawn once per timeline with a fixed seed so every checkpoint and
every set gets the same ones: k + a few spare candidates, so that an item that is itself a candidate (or
asks the same question, as a pair's two members do) is never its own demonstration. Outdated twins (a stale
gold) are not candidates, nor is a dev item whose demonstration would show a private item's question (the
private-leak rule of ``data/hygiene.py``). Each demonstration is the prompt template filled with the dev item, then its first
gold answer and a blank line (``Timeline.demonstration``), before the asked prompt.
"""

from __future__ import annotations

import random

from evolve_train.data.hygiene import check_prompt_text, dev_items
from evolve_train.data.schema import Timeline
from evolve_train.errors import ConfigError, DataError

SPARE = 4
"""Candidates beyond k: an item skips the candidates that are itself or ask its question."""


def with_few_shot(timeline: Timeline, k: int, seed: int = 0) -> Timeline:
    """``timeline`` with k demonstrations before every prompt (k = 0: unchanged)."""
    if k <= 0:
        return timeline
    candidates = [item for item in dev_items(timeline) if item.get("set") != "outdated" and item.get("answers")]
    if len(candidates) < k + 1:
        raise ConfigError(
            f"eval.few_shot={k}: the timeline has {len(candidates)} dev items usable as "
            f"demonstrations (split: dev, not outdated); it needs at least {k + 1}. Mark more "
            "items split: dev, or lower eval.few_shot"
        )
    order = random.Random(seed).sample(candidates, len(candidates))
    chosen = []
    for demo in order:  # a dev item whose text shows a private item's question (a pair's other member) is skipped
        if len(chosen) == k + SPARE:
            break
        try:
            check_prompt_text(timeline.demonstration(demo), timeline)
        except DataError:
            continue
        chosen.append(demo)
    if len(chosen) < k + 1:
        raise ConfigError(
            f"eval.few_shot={k}: only {len(chosen)} dev items can be shown without showing a "
            f"private item's question; it needs at least {k + 1}"
        )
    timeline.demonstrations, timeline.few_shot = chosen, k
    return timeline
