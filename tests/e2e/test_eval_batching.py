"""Evaluation batch size auto-tuned to memory: halve on out-of-memory, same results, other errors untouched."""

import pytest
from helpers.models import PROMPTS, tiny_model

from evolve_train.models.text_format import CausalLMFormat
from evolve_train.models.batching import AutoBatchSize
from helpers.models import failing_above


def test_option_scores_halve_the_batch_on_oom_and_give_the_same_scores(tokenizer):  # noqa: F811
    requests = [(p, o) for p in PROMPTS for o in ("City1", "Person2", "Company3")]
    text_format = CausalLMFormat(tokenizer)
    expected = text_format.score_options(tiny_model("gpt2", tokenizer), requests, batch_size=64)
    model, seen = failing_above(tiny_model("gpt2", tokenizer), rows=6)
    size = AutoBatchSize(64)
    assert text_format.score_options(model, requests, batch_size=size) == pytest.approx(expected, abs=1e-4)
    assert size.size <= 6 and max(seen) <= 6
