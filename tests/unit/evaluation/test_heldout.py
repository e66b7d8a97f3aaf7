"""``heldout``: perplexity on held-out text equals the model's own language-model loss on the same windows."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from evolve_train.config import EvalConfig
from evolve_train.evaluation.context import Shards
from evolve_train.errors import ConfigError
from evolve_train.evaluation.evaluators.heldout import (
    GENERAL_FILE,
    heldout_evaluator,
    heldout_files,
    text_loss,
    token_windows,
)
from evolve_train.models.text_format import make_text_format
from evolve_train.models.build import train_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer([GENERAL_FILE.read_text()] * 3, vocab_size=300)


def model(vocab: int) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_layer=1, n_embd=32, n_head=2, n_positions=64)).eval()


def test_the_loss_is_the_models_own_mean_token_loss(tokenizer):
    lm = model(len(tokenizer))
    windows = token_windows(
        make_text_format(tokenizer, False),
        "One short document.\n\nAnother document, a little longer than the first.",
        8,
    )
    assert all(1 < len(w) <= 8 for w in windows) and sum(len(w) for w in windows) > 8
    total, count = text_loss(lm, windows, batch_size=2)
    expected_total, expected_count = 0.0, 0
    for w in windows:  # one window at a time, through transformers' own shifted loss
        ids = torch.tensor([w])
        expected_total += float(lm(input_ids=ids, labels=ids).loss.detach()) * (len(w) - 1)
        expected_count += len(w) - 1
    assert count == expected_count and total == pytest.approx(expected_total, rel=1e-5)


def test_evaluator_rows_and_config_errors(tokenizer, tmp_path):
    from types import SimpleNamespace

    custom = tmp_path / "news.txt"
    custom.write_text("The bridge opened.\n\nThe river rose.\n")
    ctx = SimpleNamespace(
        model=model(len(tokenizer)),
        text_format=make_text_format(tokenizer, False),
        checkpoint=2,
        cfg=EvalConfig(heldout_text=["general", str(custom)], heldout_window=32),
        shards=Shards(),
    )
    rows = heldout_evaluator(ctx)
    assert [r["set_name"] for r in rows] == ["heldout_general", "news"]
    for row in rows:
        assert row["group"] == "heldout" and row["checkpoint"] == 2 and row["n"] > 0
        assert row["perplexity"] == pytest.approx(math.exp(row["loss"]))
    with pytest.raises(ConfigError, match="eval.heldout_text: 'missing.txt'"):
        heldout_files(["missing.txt"])
    with pytest.raises(ConfigError, match="eval.heldout_window"):
        EvalConfig(heldout_window=1)


def test_heldout_rows_reach_the_wandb_curves_and_the_summary():
    from evolve_train.evaluation.evaluators.report import groups_summary
    from evolve_train.tracking.wandb_logger import eval_payload

    row = {
        "group": "heldout",
        "checkpoint": 1,
        "set": "heldout",
        "set_name": "heldout_general",
        "set_step": None,
        "n": 10,
        "loss": 2.0,
        "perplexity": math.exp(2.0),
    }
    assert eval_payload(1, [row])["heldout/heldout_general/perplexity"] == pytest.approx(math.exp(2.0))
    assert groups_summary([row])["heldout"]["1"]["heldout_general"]["perplexity"] == pytest.approx(math.exp(2.0))
