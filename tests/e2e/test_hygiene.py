"""Private vs dev (docs/metrics.md#8-statistics-and-hygiene): dev_items, the private-leak check and the record of private evaluations."""

from __future__ import annotations


from evolve_train.config import DataConfig, WorldConfig
from evolve_train.data.hygiene import (
    check_private_leaks,
)
from evolve_train.data.timeline import build_timeline


def test_the_embedded_world_passes_the_check():
    tl = build_timeline(DataConfig(world=WorldConfig(n_entities=200)))  # the demo world
    counts = check_private_leaks(tl)
    assert counts["private_items"] > 1000 and counts["training_examples"] > 4000
    assert counts["seconds"] < 10
