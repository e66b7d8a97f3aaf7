"""Batched greedy generation: left padding, KV cache, prompts sorted by length, early stop."""

from __future__ import annotations

from typing import Sequence

import torch

from evolve_train.evaluation.metrics.answer import cut_at_stop
from evolve_train.training.examples import seq2seq_source


def stop_token_ids(tokenizer, stop_strings: Sequence[str]) -> list[int]:
    """Token ids that end an answer on their own (EOS, and single-token stop strings)."""
    ids = {tokenizer.eos_token_id}
    for stop in stop_strings:
        encoded = tokenizer(stop, add_special_tokens=False)["input_ids"]
        if len(encoded) == 1:
            ids.add(encoded[0])
    return sorted(i for i in ids if i is not None)


@torch.no_grad()
def generate_answers(model, tokenizer, prompts: Sequence[str], *, batch_size: int = 64,
                     max_new_tokens: int = 12, stop_strings: Sequence[str] = ("\n",),
                     seq2seq: bool = False, progress=None) -> list[str]:
    """Greedy answers to ``prompts`` (raw generations, EOS removed, not yet cut at stop strings).

    Seq2seq prompts go through ``seq2seq_source`` (mask -> ``<extra_id_0>``, else the sentinel appended),
    the format the model was trained on."""
    if not prompts:
        return []
    model.eval()
    device = next(model.parameters()).device
    tokenizer.padding_side = "right" if seq2seq else "left"
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    outputs: list[str] = [""] * len(prompts)
    eos_ids = stop_token_ids(tokenizer, stop_strings)
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        texts = [seq2seq_source(prompts[i]) if seq2seq else prompts[i] for i in chunk]
        encoded = tokenizer(texts, return_tensors="pt", padding=True,
                            add_special_tokens=seq2seq).to(device)  # T5 encoders end in </s>, as in training
        generated = model.generate(**encoded, max_new_tokens=max_new_tokens, do_sample=False,
                                   num_beams=1, use_cache=True, eos_token_id=eos_ids,
                                   pad_token_id=tokenizer.pad_token_id)
        new_tokens = generated if seq2seq else generated[:, encoded["input_ids"].shape[1]:]
        texts = tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
        for index, text in zip(chunk, texts):
            outputs[index] = text
        if progress is not None:
            progress.update(len(chunk))
    return outputs


def prediction_of(raw: str, stop_strings: Sequence[str]) -> str:
    """The answer read off a raw generation: cut at the first stop string, stripped."""
    return cut_at_stop(raw, list(stop_strings)).strip()
