"""Evaluation batch size auto-tuned to memory: halve on out-of-memory, same results, other errors untouched."""

import pytest
from helpers.models import PROMPTS, tiny_model

from evolve_train.models.text_format import CausalLMFormat
from evolve_train.models.batching import AutoBatchSize
from helpers.models import failing_above


@pytest.mark.parametrize("decoder", ["pruned", "generate"])
def test_generation_halves_the_batch_on_oom_and_gives_the_same_answers(tokenizer, decoder):  # noqa: F811
    text_format = CausalLMFormat(tokenizer)
    expected = text_format.generate(tiny_model("gpt2", tokenizer), PROMPTS, batch_size=2, decoder=decoder)
    model, seen = failing_above(tiny_model("gpt2", tokenizer), rows=2)
    size = AutoBatchSize(8)
    assert text_format.generate(model, PROMPTS, batch_size=size, decoder=decoder) == expected
    assert size.size == 2 and max(seen) == 2  # 8 -> 4 -> 2, kept for the rest


def test_other_errors_and_oom_at_batch_size_one_are_raised(tokenizer):  # noqa: F811
    model, _ = failing_above(tiny_model("gpt2", tokenizer), rows=2, error=ValueError("bad input"))
    text_format = CausalLMFormat(tokenizer)
    with pytest.raises(ValueError, match="bad input"):
        text_format.generate(model, PROMPTS, batch_size=8)
    model, _ = failing_above(tiny_model("gpt2", tokenizer), rows=0)
    with pytest.raises(RuntimeError, match="out of memory"):
        text_format.generate(model, PROMPTS, batch_size=AutoBatchSize(4))


def test_sampling_halves_the_batch_on_oom_and_still_draws_n_per_prompt(tokenizer):  # noqa: F811
    text_format = CausalLMFormat(tokenizer)
    options = dict(n=3, temperature=1.0, seed=0, max_new_tokens=4)
    model, seen = failing_above(tiny_model("gpt2", tokenizer), rows=6)  # generate() sees prompts x n rows
    size = AutoBatchSize(24)
    samples = text_format.sample(model, PROMPTS, batch_size=size, **options)
    assert [len(s) for s in samples] == [3] * len(PROMPTS) and size.size == 6 and max(seen) <= 6
    unconstrained = text_format.sample(tiny_model("gpt2", tokenizer), PROMPTS, batch_size=6, **options)
    assert samples == unconstrained  # the same spans as a run started at the size that fits: the same draw
