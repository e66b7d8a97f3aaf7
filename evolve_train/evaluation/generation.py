"""Batched greedy generation: left padding, prompts sorted by token count, a KV cache, and for decoder-only
models a decoding loop that drops each prompt's row from the batch as soon as its answer ends.

Short QA answers end after a few tokens, but ``transformers``' ``generate`` keeps every row of a batch
until the longest answer is done; ``greedy_decode`` stops computing a row at its stop token (on the demo's
final checkpoint, 2,387 decode row-steps instead of 6,961), with the same answers token for token
(``tests/test_generation.py``). ``eval.greedy_decoder=generate`` switches back to ``generate``, which
seq2seq models always use.
"""

from __future__ import annotations

import inspect
from typing import Sequence

import torch

from evolve_train.evaluation.batching import AutoBatchSize, as_auto
from evolve_train.evaluation.metrics.answer import cut_at_stop
from evolve_train.training.examples import seq2seq_source

GREEDY_DECODERS = ("pruned", "generate")


def stop_token_ids(tokenizer, stop_strings: Sequence[str]) -> list[int]:
    """Token ids that end an answer on their own (EOS, and single-token stop strings)."""
    ids = {tokenizer.eos_token_id}
    for stop in stop_strings:
        encoded = tokenizer(stop, add_special_tokens=False)["input_ids"]
        if len(encoded) == 1:
            ids.add(encoded[0])
    return sorted(i for i in ids if i is not None)


def padded_batch(sequences: list[list[int]], pad: int, left: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists as one ``(ids, attention_mask)`` pair, padded on the right (or the left)."""
    width = max(len(tokens) for tokens in sequences)
    ids = torch.full((len(sequences), width), pad, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, tokens in enumerate(sequences):
        span = slice(width - len(tokens), width) if left else slice(0, len(tokens))
        ids[row, span] = torch.tensor(tokens, dtype=torch.long)
        mask[row, span] = 1
    return ids, mask


def cache_of(output):
    """The KV cache a forward returned (``cache`` in transformers 5, ``past_key_values`` before)."""
    return output.cache if getattr(output, "cache", None) is not None else output.past_key_values


def _accepts(model, argument: str) -> bool:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return argument in inspect.signature(base.forward).parameters


@torch.inference_mode()
def greedy_decode(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, max_new_tokens: int,
                  stop_ids: Sequence[int], pad_id: int) -> torch.Tensor:
    """Greedy continuation of left-padded prompts: ``(batch, max_new_tokens)`` new token ids, ``pad_id``
    after each row's first stop token (which is kept, as ``generate`` keeps its EOS).

    A row leaves the batch (and its KV cache rows are dropped) once it has produced a stop token, so
    the decode steps cost what the still-unfinished answers need."""
    rows = input_ids.shape[0]
    device = input_ids.device
    generated = torch.full((rows, max_new_tokens), pad_id, dtype=torch.long, device=device)
    stop = torch.tensor(list(stop_ids), dtype=torch.long, device=device)
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    extra = {"logits_to_keep": 1} if _accepts(model, "logits_to_keep") else {}
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, use_cache=True, **extra)
    alive = torch.arange(rows, device=device)
    position = positions[:, -1]
    for step in range(max_new_tokens):
        next_token = out.logits[:, -1].argmax(-1)
        generated[alive, step] = next_token
        if step == max_new_tokens - 1:
            break
        running = ~torch.isin(next_token, stop)
        cache = cache_of(out)
        if not bool(running.all()):  # one host sync per step, as generate's stopping check
            keep = running.nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            alive, next_token, position, attention_mask = (
                alive[keep], next_token[keep], position[keep], attention_mask[keep])
            cache.batch_select_indices(keep)
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones(len(alive), 1)], dim=1)
        position = position + 1
        out = model(input_ids=next_token[:, None], attention_mask=attention_mask, position_ids=position[:, None],
                    cache=cache, use_cache=True)
    return generated


@torch.no_grad()
def generate_answers(model, tokenizer, prompts: Sequence[str], *, batch_size: int | AutoBatchSize = 64,
                     max_new_tokens: int = 12, stop_strings: Sequence[str] = ("\n",),
                     seq2seq: bool = False, decoder: str = "pruned", progress=None) -> list[str]:
    """Greedy answers to ``prompts`` (raw generations, EOS removed, not yet cut at stop strings).

    ``decoder``: ``pruned`` (``greedy_decode``, decoder-only models) or ``generate``. Seq2seq prompts
    go through ``seq2seq_source`` (mask -> ``<extra_id_0>``, else the sentinel appended), the format the
    model was trained on, and through ``generate``. ``batch_size`` halves on out-of-memory errors
    (``evaluation/batching.py``)."""
    if decoder not in GREEDY_DECODERS:
        raise ValueError(f"unknown greedy decoder {decoder!r} (known: {', '.join(GREEDY_DECODERS)})")
    if not prompts:
        return []
    model.eval()
    device = next(model.parameters()).device
    texts = [seq2seq_source(p) if seq2seq else p for p in prompts]
    # T5 encoders end in </s>, as in training; sorted by token count, a batch is padded only to its longest.
    token_ids = tokenizer(texts, add_special_tokens=seq2seq)["input_ids"]
    order = sorted(range(len(prompts)), key=lambda i: len(token_ids[i]))
    outputs: list[str] = [""] * len(prompts)
    eos_ids = stop_token_ids(tokenizer, stop_strings)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]

    def answer(start: int, stop: int) -> None:
        chunk = order[start:stop]
        input_ids, attention_mask = padded_batch([token_ids[i] for i in chunk], pad_id, left=not seq2seq)
        encoded = {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device)}
        if decoder == "pruned" and not seq2seq:
            new_tokens = greedy_decode(model, encoded["input_ids"], encoded["attention_mask"],
                                       max_new_tokens=max_new_tokens, stop_ids=eos_ids, pad_id=pad_id)
        else:
            generated = model.generate(**encoded, max_new_tokens=max_new_tokens, do_sample=False,
                                       num_beams=1, use_cache=True, eos_token_id=eos_ids, pad_token_id=pad_id)
            new_tokens = generated if seq2seq else generated[:, encoded["input_ids"].shape[1]:]
        for index, text in zip(chunk, tokenizer.batch_decode(new_tokens, skip_special_tokens=True)):
            outputs[index] = text
        if progress is not None:
            progress.update(len(chunk))

    as_auto(batch_size).run(len(order), answer)
    return outputs


def prediction_of(raw: str, stop_strings: Sequence[str]) -> str:
    """The answer read off a raw generation: cut at the first stop string, stripped."""
    return cut_at_stop(raw, list(stop_strings)).strip()
