"""The pruned greedy decoder answers exactly as transformers' ``generate`` does, while dropping rows; generation
through the text format equals ``generate`` on the same ids."""

import pytest
import torch

from evolve_train.models.text_format import CausalLMFormat
from evolve_train.models.generation import greedy_decode
from helpers.models import PROMPTS, tiny_model


def reference(model, encoded, stop_ids, pad_id, width):
    """transformers' greedy ``generate``, new tokens padded to ``width``."""
    out = model.generate(
        **encoded, max_new_tokens=width, do_sample=False, num_beams=1, eos_token_id=stop_ids, pad_token_id=pad_id
    )[:, encoded["input_ids"].shape[1] :]
    return torch.nn.functional.pad(out, (0, width - out.shape[1]), value=pad_id)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_pruned_decoder_matches_generate_and_drops_finished_rows(tokenizer, kind):
    model = tiny_model(kind, tokenizer)
    tokenizer.padding_side = "left"
    encoded = tokenizer(PROMPTS, return_tensors="pt", padding=True, add_special_tokens=False)
    pad, width = tokenizer.pad_token_id, 8
    free = greedy_decode(
        model, encoded["input_ids"], encoded["attention_mask"], max_new_tokens=width, stop_ids=[], pad_id=pad
    )
    # Stop tokens chosen so that rows end at different steps: some early, some never.
    never = set(free[-1].tolist())
    stop_ids = sorted({next(t for t in free[row, :-1].tolist() if t not in never) for row in (0, 2)})
    batch_sizes = []
    hook = model.register_forward_pre_hook(
        lambda m, a, kw: batch_sizes.append(kw["input_ids"].shape[0]), with_kwargs=True
    )
    ours = greedy_decode(
        model, encoded["input_ids"], encoded["attention_mask"], max_new_tokens=width, stop_ids=stop_ids, pad_id=pad
    )
    hook.remove()
    assert torch.equal(ours, reference(model, encoded, stop_ids, pad, width))
    assert (ours[0] == pad).any() and not (ours[-1] == pad).any()  # one row stopped early, one ran to the end
    assert batch_sizes[0] == len(PROMPTS) and min(batch_sizes) < len(PROMPTS)
    assert batch_sizes == sorted(batch_sizes, reverse=True) and len(batch_sizes) == width


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_text_format_generation_is_the_same_with_either_decoder(tokenizer, kind):
    model = tiny_model(kind, tokenizer)
    options = dict(batch_size=4, max_new_tokens=6, stop_strings=["\n", "."])
    text_format = CausalLMFormat(tokenizer)
    assert text_format.generate(model, PROMPTS, decoder="pruned", **options) == text_format.generate(
        model, PROMPTS, decoder="generate", **options
    )


@pytest.mark.parametrize("decoder", ["pruned", "generate"])
def test_text_format_generation_equals_transformers_generate_one_prompt_at_a_time(tokenizer, decoder):
    """Batched (sorted, left padded, rows pruned) answers = ``model.generate`` on each prompt's own ids."""
    model = tiny_model("llama", tokenizer)
    text_format = CausalLMFormat(tokenizer)
    stops = ["."]
    ours = text_format.generate(model, PROMPTS, batch_size=3, max_new_tokens=6, stop_strings=stops, decoder=decoder)
    stop_ids = text_format.stop_ids(stops)
    for prompt, answer in zip(PROMPTS, ours):
        ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=6,
            do_sample=False,
            eos_token_id=stop_ids,
            pad_token_id=tokenizer.pad_token_id,
        )
        assert answer == tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


def test_unknown_decoder_is_refused(tokenizer):
    with pytest.raises(ValueError, match="greedy decoder 'beam'"):
        CausalLMFormat(tokenizer).generate(tiny_model("gpt2", tokenizer), PROMPTS, decoder="beam")
