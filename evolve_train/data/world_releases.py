"""The embedded world's one corpus extension: dated toolkit releases (versioned, time-scoped facts).

A share of the organisations alive at step 0 (``RELEASE_SHARE``, at least 2, at most ``MAX_PRODUCTS``)
publish a numbered toolkit. At step 0 every toolkit states its current version (1-4); at each later step
about half of them (``RELEASE_PROB``) release the next version. A release is stated with its year and
never stops being true ("In 2019, X released version 3 of its toolkit."), so what it tests is whether a
time-scoped fact survives later training, not whether it was updated.

Each release adds four masked-entity pairs (two phrasings masking the version with the year to its left,
two masking the year with the version to its left) and one text document. With the default world (200
organisations, 3 steps) that is 30 toolkits: +120 pairs at step 0 (+6.7%) and ~60 at each later step.
The held-out phrasings never occur in a corpus. The sentences are generated from their own seeded
stream, so the world's facts and corpora are exactly what ``world.py`` generates without them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from evolve_train.data.world import MASK, World

RELEASE_SHARE = 0.15
MAX_PRODUCTS = 40
RELEASE_PROB = 0.5
RELEASE_VERSION = (
    "In {y}, {e} released version {v} of its toolkit.",
    "The {y} release of the {e} toolkit is version {v}.",
)
"""Training phrasings with the year left of the version (the version is masked)."""
RELEASE_YEAR = ("Version {v} of the {e} toolkit came out in {y}.", "{e} released toolkit version {v} in {y}.")
"""Training phrasings with the version left of the year (the year is masked)."""
RELEASE_HELDOUT_VERSION = (
    "In {y}, the {e} toolkit reached version {v}.",
    "For {e}, the toolkit release of {y} was version {v}.",
)
RELEASE_HELDOUT_YEAR = (
    "The {e} toolkit reached version {v} in {y}.",
    "{e} published version {v} of its toolkit in the year {y}.",
)


@dataclass
class Releases:
    products: list[str]
    """Organisations that publish a toolkit."""
    versions: list[dict[str, int]]
    """Per step: organisation -> version current after the step."""
    released: list[list[str]]
    """Per step: organisations that released (stated) a version at that step (all at step 0)."""

    def sample_released(self, step: int, n: int, rng: random.Random) -> list[str]:
        chosen = self.released[step]
        return sorted(rng.sample(chosen, min(n, len(chosen))))


def generate_releases(world: World) -> Releases:
    """The toolkits and their versions per step, from a seeded stream of their own."""
    rng = random.Random(f"{world.config.seed}-releases")
    initial = sorted(org for org, first in world.founded_at.items() if first == 0)
    count = min(MAX_PRODUCTS, len(initial), max(2, round(RELEASE_SHARE * len(initial))))
    products = sorted(rng.sample(initial, count))
    versions = [{org: rng.randint(1, 4) for org in products}]
    released = [list(products)]
    for _ in range(1, len(world.states)):
        current = dict(versions[-1])
        now = [org for org in products if rng.random() < RELEASE_PROB]
        for org in now:
            current[org] += 1
        versions.append(current)
        released.append(now)
    return Releases(products=products, versions=versions, released=released)


def release_corpus(world: World, releases: Releases, step: int) -> tuple[list[dict], list[dict]]:
    """Masked-entity pairs and text documents of the releases stated at ``step``."""
    year = str(world.years[step])
    pairs, texts = [], []
    for org in releases.released[step]:
        version = str(releases.versions[step][org])
        sentences = []
        for templates, masked in ((RELEASE_VERSION, "v"), (RELEASE_YEAR, "y")):
            for template in templates:
                values = {"e": org, "v": version, "y": year}
                sentence = template.format(**values)
                masked_template = template.replace("{" + masked + "}", MASK)
                pairs.append(
                    {
                        "input": masked_template.format(**values),
                        "output": values[masked],
                        "entity": org,
                        "relation": f"release_{'version' if masked == 'v' else 'year'}",
                    }
                )
                sentences.append(sentence)
        texts.append({"doc_id": f"{org}#toolkit-{year}", "text": " ".join(sentences)})
    return pairs, texts
