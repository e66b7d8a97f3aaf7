"""Token-level decoding helpers of the text format (``models/text_format.py``): padding, stop ids, and for
decoder-only models a greedy decoding loop that drops each prompt's row from the batch as soon as its answer ends.

Short QA answers end after a few tokens, but ``transformers``' ``generate`` keeps every row of a batch
until the longest answer is done; ``greedy_decode`` stops computing a row at its stop token (on the demo's
final checkpoint, 2,387 decode row-steps instead of 6,961), with the same answers token for token
(``tests/unit/models/test_generation.py``). ``eval.greedy_decoder=generate`` switches back to ``generate``, which
encoder-decoder models always use.
"""

from __future__ import annotations

import inspect
from typing import Sequence

import torch

GREEDY_DECODERS = ("pruned", "generate")


def stop_token_ids(tokenizer, stop_strings: Sequence[str]) -> list[int]:
    """Token ids that end an answer on their own (EOS, and single-token stop strings)."""
    ids = {tokenizer.eos_token_id}
    for stop in stop_strings:
        encoded = tokenizer(stop, add_special_tokens=False)["input_ids"]
        if len(encoded) == 1:
            ids.add(encoded[0])
    return sorted(i for i in ids if i is not None)


def blank_token_ids(tokenizer, stop_ids: Sequence[int]) -> list[int]:
    """Tokens that are whitespace only (``\\n``, a space, ``\\n\\n``; never a special token), when a stop id is
    one of them (else ``[]``: nothing to skip). Greedy decoding does not end an answer at such a stop token
    before the answer's first other token: a pretrained model often opens its answer with a newline, which
    the ``\\n`` stop would otherwise turn into an empty answer."""
    special = set(tokenizer.all_special_ids)

    def blank(ids: Sequence[int]) -> list[int]:
        texts = tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=False)
        return [i for i, text in zip(ids, texts) if i not in special and not text.strip()]

    if not blank([i for i in stop_ids if i not in special]):
        return []
    return blank(sorted(set(tokenizer.get_vocab().values())))


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
def greedy_decode(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    stop_ids: Sequence[int],
    pad_id: int,
    blank_ids: Sequence[int] = (),
) -> torch.Tensor:
    """Greedy continuation of left-padded prompts: ``(batch, max_new_tokens)`` new token ids, ``pad_id``
    after each row's first stop token (which is kept, as ``generate`` keeps its EOS). A stop token among
    ``blank_ids`` (whitespace-only tokens, :func:`blank_token_ids`) ends a row only after the row's first
    non-blank token (with none given: ``generate``'s answers, token for token).

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
    blank = torch.tensor(list(blank_ids), dtype=torch.long, device=device)
    started = torch.zeros(rows, dtype=torch.bool, device=device)  # a non-blank token produced yet
    for step in range(max_new_tokens):
        next_token = out.logits[:, -1].argmax(-1)
        generated[alive, step] = next_token
        if step == max_new_tokens - 1:
            break
        is_blank = torch.isin(next_token, blank)
        running = ~torch.isin(next_token, stop) | (is_blank & ~started)
        started = started | ~is_blank
        cache = cache_of(out)
        if not bool(running.all()):  # one host sync per step, as generate's stopping check
            keep = running.nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            alive, next_token, position, attention_mask, started = (
                alive[keep],
                next_token[keep],
                position[keep],
                attention_mask[keep],
                started[keep],
            )
            cache.batch_select_indices(keep)
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones(len(alive), 1)], dim=1)
        position = position + 1
        out = model(
            input_ids=next_token[:, None],
            attention_mask=attention_mask,
            position_ids=position[:, None],
            cache=cache,
            use_cache=True,
        )
    return generated
