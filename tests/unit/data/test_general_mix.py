"""General documents mixed into every step after step 0 (``data.mix_files``, ``data.mix_ratio``;
``methods/mixing.py``, ``hooks/mixing.py``): the token share equals its hand computation."""

from __future__ import annotations

import json
import random

import pytest
from datasets import Dataset
from helpers import tiny_cfg
from omegaconf import OmegaConf

from evolve_train.config import DataConfig
from evolve_train.data.mix import mix_corpus
from evolve_train.errors import ConfigError, DataError
from evolve_train.hooks import build_hooks
from evolve_train.methods.mixing import append_rows, mix_target, row_tokens, take_tokens


def pool_of(lengths: list[int], position_ids: bool = True) -> Dataset:
    rows = {"input_ids": [[n] * n for n in lengths], "labels": [[n] * n for n in lengths]}
    if position_ids:
        rows["position_ids"] = [list(range(n)) for n in lengths]
    return Dataset.from_dict(rows)


def test_mix_target_is_the_token_share_of_the_mixed_step():
    # r of the mixed step's tokens: M / (S + M) = r  <=>  M = r / (1 - r) * S
    assert mix_target(300, 0.25) == 100
    assert mix_target(300, 0.5) == 300
    assert mix_target(30, 0.3) == 13  # 12.857... rounded
    assert mix_target(300, 0.0) == 0


def test_take_tokens_whole_rows_in_a_seeded_order_the_last_cut():
    lengths = [5, 6, 7, 8, 9]
    pool = pool_of(lengths)
    order = list(range(5))
    random.Random("s").shuffle(order)
    # 13 tokens: whole rows in the seeded order while short of 13, the last cut to what is left
    rows, cycled = take_tokens(pool, 13, "s")
    taken, total = [], 0
    for index in order:
        if total >= 13:
            break
        taken.append(index)
        total += lengths[index]
    assert not cycled and len(rows) == len(taken) and row_tokens(rows) == 13
    assert [r[0] for r in rows["input_ids"]] == [lengths[i] for i in taken]  # each row's ids are its length
    assert len(rows[-1]["input_ids"]) == lengths[taken[-1]] - (total - 13)
    assert len(rows[-1]["labels"]) == len(rows[-1]["position_ids"]) == len(rows[-1]["input_ids"])
    # the same seed, the same rows; more than the pool: cycled through again
    assert take_tokens(pool, 13, "s")[0]["input_ids"] == rows["input_ids"]
    more, cycled = take_tokens(pool, 50, "s")
    assert cycled and row_tokens(more) == 50
    assert take_tokens(pool, 0, "s")[0].num_rows == 0


def test_append_rows_keeps_the_step_columns():
    step = pool_of([3, 4], position_ids=False)  # a masked-entity step: no position ids
    mixed = append_rows(step, pool_of([5]))
    assert mixed.column_names == ["input_ids", "labels"] and len(mixed) == 3 and row_tokens(mixed) == 12
    with pytest.raises(ValueError, match="columns"):
        append_rows(pool_of([2]), pool_of([2], position_ids=False))


def test_mix_files_and_ratio_go_together():
    with pytest.raises(ConfigError, match="data.mix_files and data.mix_ratio"):
        DataConfig(mix_files=["a.jsonl"])
    with pytest.raises(ConfigError, match="data.mix_files and data.mix_ratio"):
        DataConfig(mix_ratio=0.1)
    with pytest.raises(ConfigError, match="mix_ratio"):
        DataConfig(mix_files=["a.jsonl"], mix_ratio=1.0)


def test_mix_corpus_reads_files_folders_and_globs_and_refuses_pairs(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("First general text.\n")
    (tmp_path / "docs" / "b.jsonl").write_text(json.dumps({"text": "Second."}) + "\n" + json.dumps({"text": "Third."}))
    corpus = mix_corpus(DataConfig(root=str(tmp_path), mix_files=["docs"], mix_ratio=0.1))
    assert sorted(d["text"] for d in corpus.texts) == ["First general text.", "Second.", "Third."]
    assert corpus.index == -1 and mix_corpus(DataConfig()) is None
    glob = mix_corpus(DataConfig(root=str(tmp_path), mix_files=["docs/*.txt"], mix_ratio=0.1))
    assert [d["text"] for d in glob.texts] == ["First general text."]
    (tmp_path / "pairs.jsonl").write_text(json.dumps({"input": "X is <mask>.", "output": "Y"}) + "\n")
    with pytest.raises(DataError, match="masked-entity pairs"):
        mix_corpus(DataConfig(root=str(tmp_path), mix_files=["pairs.jsonl"], mix_ratio=0.1))
    with pytest.raises(DataError, match="data.mix_files"):
        mix_corpus(DataConfig(root=str(tmp_path), mix_files=["nothing/*.txt"], mix_ratio=0.1))


def test_off_by_default_and_refused_where_it_cannot_train(tmp_path):
    assert "mixing" not in [h.name for h in build_hooks(OmegaConf.to_object(tiny_cfg(tmp_path)))]
    (tmp_path / "g.jsonl").write_text(json.dumps({"text": "general"}) + "\n")
    mix = [f"+data.mix_files=[{tmp_path / 'g.jsonl'}]", "data.mix_ratio=0.1"]
    assert "mixing" in [h.name for h in build_hooks(OmegaConf.to_object(tiny_cfg(tmp_path, *mix)))]
    with pytest.raises(ConfigError, match="decay"):
        build_hooks(OmegaConf.to_object(tiny_cfg(tmp_path, *mix, "method=replay", "method.replay.decay=0.5")))
