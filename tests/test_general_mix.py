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


# ---------------------------------------------------------------- the share, by hand


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


# ---------------------------------------------------------------- config and files


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


# ---------------------------------------------------------------- a run


def test_a_run_mixes_the_share_into_every_later_step(tmp_path):
    from evolve_train.models.build import load_tokenizer
    from evolve_train.models.text_format import make_text_format
    from evolve_train.run import ContinualRun
    from evolve_train.training.token_cache import step_tokenizer

    general = tmp_path / "general.jsonl"
    general.write_text(
        "".join(json.dumps({"text": f"General text {i}: the sky is blue and water is wet."}) + "\n" for i in range(40))
    )
    run_dir = tmp_path / "run"
    cfg = tiny_cfg(run_dir, "eval.evaluators=[splits]", f"+data.mix_files=[{general}]", "data.mix_ratio=0.2")
    run = ContinualRun(cfg)
    run.run()
    rows = [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    mixed = [r for r in rows if r.get("group") == "mix"]
    assert [r["time_step"] for r in mixed] == [1, 2]  # every later step, never step 0
    text_format = make_text_format(load_tokenizer(str(run_dir / "steps" / "0"), run.cfg.model))
    tokenize = step_tokenizer(run.cfg, text_format)
    for row in mixed:
        own = row_tokens(tokenize(run.timeline.steps[row["time_step"]]))  # the step's own rows, by hand
        assert row["step_tokens"] == own
        assert row["mix_tokens"] == round(0.2 / 0.8 * own)
        assert row["mix_share"] == pytest.approx(row["mix_tokens"] / (own + row["mix_tokens"]), abs=1e-6)
        assert abs(row["mix_share"] - 0.2) < 1 / own
        assert row["mix_trained_tokens"] == round(row["trained_tokens"] * row["mix_share"])
        assert row["source"] == "files" and row["mix_train_flops"] > 0
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert not any("mix" in str(r.get("set_name", "")) for r in metrics)  # never evaluated as a step
    for row in mixed:  # the checkpoint's metric rows carry the step's mix counts
        at = [r for r in metrics if r.get("checkpoint") == row["time_step"] and "train_tokens" in r]
        assert at and all(r["mix_source"] == "files" and r["mix_tokens"] == row["mix_tokens"] for r in at)
        assert all(r["mix_share"] == row["mix_share"] and r["mix_train_flops"] == row["mix_train_flops"] for r in at)
    assert not any("mix_tokens" in r for r in metrics if r.get("checkpoint") == 0)
    from evolve_train.reporting.runs import load_runs
    from evolve_train.reporting.timesliced import compute_table

    header, table = compute_table(load_runs([run_dir]))  # the report's compute table shows the mix per step
    column = header.index("mix tokens")
    assert [line[column] for line in table] == ["-"] + [str(row["mix_tokens"]) for row in mixed]
