"""``data.order=shuffled``: every step's corpus dealt at random into the same steps with the same per-step sizes
(``data/transforms.py``), eval sets unchanged."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from datasets import Dataset
from helpers import tiny_cfg
from omegaconf import OmegaConf

from evolve_train.config import Config, DataConfig
from evolve_train.data.corpus import ArrowRecords
from evolve_train.data.schema import EvalSet, TimeStep, Timeline
from evolve_train.data.timeline import build_timeline
from evolve_train.data.transforms import dealt_indices, deal_records, with_shuffled_order
from evolve_train.errors import ConfigError


def _timeline() -> Timeline:
    sizes = [(3, 0), (5, 2), (2, 1)]  # (pairs, texts) per step
    steps = []
    for k, (n_pairs, n_texts) in enumerate(sizes):
        pairs = [{"input": f"s{k} p{i} is [MASK].", "output": f"v{k}{i}"} for i in range(n_pairs)]
        texts = [{"text": f"step {k} doc {i}", "doc_id": f"d{k}{i}"} for i in range(n_texts)]
        steps.append(TimeStep(index=k, name=str(2020 + k), pairs=pairs, texts=texts))
    sets = [EvalSet("unchanged", "unchanged", None, [{"id": "q", "question": "q?", "answers": ["a"]}])]
    return Timeline(steps=steps, eval_sets=sets)


def test_shuffled_sizes_and_records_equal_a_hand_computation():
    timeline = _timeline()
    shuffled = with_shuffled_order(timeline, seed=7)
    for name in ("pairs", "texts"):
        before = [getattr(s, name) for s in timeline.steps]
        after = [getattr(s, name) for s in shuffled.steps]
        # same number of steps and the same per-step sizes
        assert [len(p) for p in after] == [len(p) for p in before]
        # the hand computation: one permutation of the union (numpy, seed [7, field index]) cut at the sizes
        union = [r for part in before for r in part]
        order = np.random.default_rng([7, ("pairs", "texts").index(name)]).permutation(len(union))
        bounds = np.cumsum([0] + [len(p) for p in before])
        expected = [[union[i] for i in order[bounds[k] : bounds[k + 1]]] for k in range(len(before))]
        assert [list(p) for p in after] == expected
        # nothing lost, nothing repeated
        key = "input" if name == "pairs" else "text"
        assert Counter(r[key] for part in after for r in part) == Counter(r[key] for r in union)
    assert shuffled.eval_sets == timeline.eval_sets
    assert [s.name for s in shuffled.steps] == [s.name for s in timeline.steps]


def test_shuffled_is_seeded_and_removes_the_order():
    timeline = _timeline()
    first, again = with_shuffled_order(timeline, 3), with_shuffled_order(timeline, 3)
    assert [s.pairs for s in first.steps] == [s.pairs for s in again.steps]
    other = with_shuffled_order(timeline, 4)
    assert [s.pairs for s in other.steps] != [s.pairs for s in first.steps]
    # time order removed: some step now trains another step's pairs
    assert any(not all(p["input"].startswith(f"s{k} ") for p in s.pairs) for k, s in enumerate(first.steps))


def test_dealt_indices_are_a_partition():
    pieces = dealt_indices([4, 0, 6], seed=1, field="pairs")
    assert [len(p) for p in pieces] == [4, 0, 6]
    assert sorted(np.concatenate(pieces).tolist()) == list(range(10))


def test_arrow_corpora_stay_arrow_with_their_own_fingerprint():
    parts = [
        ArrowRecords(Dataset.from_list([{"text": f"a{i}", "doc_id": None} for i in range(3)]), "fa"),
        ArrowRecords(Dataset.from_list([{"text": f"b{i}", "doc_id": None} for i in range(4)]), "fb"),
    ]
    dealt = deal_records(parts, seed=0, field="texts")
    assert all(isinstance(p, ArrowRecords) for p in dealt)
    assert [len(p) for p in dealt] == [3, 4]
    assert {p.fingerprint for p in dealt}.isdisjoint({"fa", "fb"})
    assert sorted(r["text"] for p in dealt for r in p) == sorted(f"a{i}" for i in range(3)) + sorted(
        f"b{i}" for i in range(4)
    )


def test_world_shuffled_keeps_sizes_and_eval_sets(tmp_path):
    def built(*overrides):
        cfg: Config = OmegaConf.to_object(tiny_cfg(tmp_path, *overrides))
        return build_timeline(cfg.data)

    ordered, shuffled = built(), built("data.order=shuffled")
    for name in ("pairs", "texts", "heldout"):
        assert [len(getattr(s, name)) for s in shuffled.steps] == [len(getattr(s, name)) for s in ordered.steps]
    assert [s.heldout for s in shuffled.steps] == [s.heldout for s in ordered.steps]  # slices stay their step's
    assert [s.pairs for s in shuffled.steps] != [s.pairs for s in ordered.steps]
    assert [(s.name, s.items) for s in shuffled.eval_sets] == [(s.name, s.items) for s in ordered.eval_sets]


def test_order_is_a_closed_choice():
    with pytest.raises(ConfigError, match="data.order"):
        DataConfig(order="reversed")
