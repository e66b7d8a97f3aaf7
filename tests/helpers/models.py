"""A tiny tokenizer and tiny GPT-2 / Llama models built here, for generation and scoring tests."""

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
import functools


TEXTS = [f"The director of Company{i} is Person{i % 7} and it is based in City{i % 5}." for i in range(50)]


PROMPTS = [
    "Company3 is based in",
    "Who directs Company12?",
    "The director of Company40 in the year 2021 is",
    "City",
    "Person4 lives in City2 and works for",
    "Q: Where is Company7 based?\nA:",
]


def tiny_model(kind: str, tokenizer):
    torch.manual_seed(0)
    if kind == "gpt2":
        config = GPT2Config(
            n_layer=2,
            n_embd=32,
            n_head=2,
            n_positions=64,
            vocab_size=len(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            activation_function="gelu",
        )
        return GPT2LMHeadModel(config).eval()
    config = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=len(tokenizer),
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
    )
    return LlamaForCausalLM(config).eval()


OOM = "CUDA out of memory. Tried to allocate 2.00 GiB"


def failing_above(model, rows: int, error=RuntimeError(OOM)):
    """``model`` whose forward raises ``error`` for batches of more than ``rows`` rows; the sizes it ran."""
    original, seen = model.forward, []

    @functools.wraps(original)  # generate() reads forward's signature
    def forward(*args, **kwargs):
        if kwargs["input_ids"].shape[0] > rows:
            raise error
        seen.append(kwargs["input_ids"].shape[0])
        return original(*args, **kwargs)

    model.forward = forward
    return model, seen
