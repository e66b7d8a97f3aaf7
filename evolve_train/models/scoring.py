"""Option log-likelihoods for multiple choice (docs/metrics.md#7-multiple-choice-and-confidence), batched, on token ids the text format
(``models/text_format.py``) encoded.

A request is ``(prompt, option)``; its score is the sum of the log-probabilities of the option's tokens
given the prompt. Decoder-only models read the prompt's ids followed by the option's (the option encoded
on its own with its leading space, exactly as a masked-entity training target), many requests per forward
pass; prompts are sorted by length so a batch wastes little on padding. Encoder-decoder models encode the
prompt and score the option as the decoder target.

The prompt prefix is shared: each distinct prompt runs once (left padded, KV cache kept) and its options
are scored on copies of its cache rows, so a question with four options costs one prompt pass plus four
short option passes instead of four full sequences (``share_prefix=False`` scores full sequences; the
tests check that both give the same numbers).

:func:`batch_token_nll` is the training loss per row (a held-out slice's NLL, the held-out text's perplexity):
the summed negative log-likelihood of each row's loss tokens and their count, from the batches the training
loop reads.

A call's batches are what :func:`causal_option_batches` (and ``models/batching.py: spans``, in request order, for
encoder-decoder models) return, computed by the same code the scoring runs: a multi-process evaluation
gives each process whole batches of that plan (``evaluation/context.py``), so every forward pass is the one
a single process runs.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from evolve_train.models.batching import AutoBatchSize, as_auto, spans
from evolve_train.models.generation import cache_of, padded_batch
from evolve_train.models.head import IGNORE, chunk_capable, chunked_token_nll, head_inputs, last_position_logprobs


def prompt_groups(requests: Sequence[tuple[str, str]]) -> list[list[int]]:
    """Request indices per distinct prompt, prompts in scoring order (by length, then text: no set order)."""
    by_prompt: dict[str, list[int]] = {}
    for index, (prompt, _) in enumerate(requests):
        by_prompt.setdefault(prompt, []).append(index)
    return [by_prompt[p] for p in sorted(by_prompt, key=lambda p: (len(p), p))]


def filled_spans(groups: list[list[int]]) -> Callable[[int, int], int]:
    """``span_end`` of causal scoring: from ``start``, prompts until their options fill a batch of ``size``."""

    def span_end(start: int, size: int) -> int:
        stop, options = start, 0
        while stop < len(groups) and options < size:
            options += len(groups[stop])
            stop += 1
        return stop

    return span_end


def causal_option_batches(requests: Sequence[tuple[str, str]], size: int) -> list[list[int]]:
    """Request indices of each forward batch :func:`causal_option_scores` forms at batch size ``size``
    (whole prompts; a batch is closed once their options reach ``size``, so any selection of whole batches,
    scored on its own, forms the same batches again)."""
    groups = prompt_groups(requests)
    return [
        [i for group in groups[start:stop] for i in group]
        for start, stop in spans(len(groups), size, filled_spans(groups))
    ]


def causal_option_scores(
    model,
    requests: Sequence[tuple[str, str]],
    contexts: dict[str, list[int]],
    targets: list[list[int]],
    *,
    pad: int,
    batch_size: int | AutoBatchSize = 64,
    share_prefix: bool = True,
) -> list[float]:
    """Sum of option-token log-probabilities for each request, in request order: ``contexts`` maps each
    prompt to its ids, ``targets[i]`` holds request i's option ids. Batches: :func:`causal_option_batches`."""
    device = next(model.parameters()).device
    groups = prompt_groups(requests)
    scores = [0.0] * len(requests)
    score = _shared_prefix_batch if share_prefix else _full_sequence_batch

    def score_span(start: int, stop: int) -> None:
        members = [(contexts[requests[group[0]][0]], [(i, targets[i]) for i in group]) for group in groups[start:stop]]
        for index, value in score(model, members, pad, device):
            scores[index] = value

    as_auto(batch_size).run(len(groups), score_span, filled_spans(groups))
    return scores


def _full_sequence_batch(model, members, pad: int, device):
    """One forward over every ``context + option`` sequence of the chunk (right padded); the option tokens'
    log-probabilities are :func:`batch_token_nll`'s, negated (chunked head for large vocabularies)."""
    rows = [(context + target, len(target), index) for context, options in members for index, target in options]
    ids, mask = padded_batch([tokens for tokens, _, _ in rows], pad)
    labels = torch.full_like(ids, IGNORE)
    for row, (tokens, n_target, _) in enumerate(rows):
        labels[row, len(tokens) - n_target : len(tokens)] = ids[row, len(tokens) - n_target : len(tokens)]
    sums, _ = batch_token_nll(model, {"input_ids": ids, "attention_mask": mask, "labels": labels}, shift=True)
    for (_, _, index), value in zip(rows, sums):
        yield index, -value


def _shared_prefix_batch(model, members, pad: int, device):
    """Each prompt once (left padded, KV cache kept), then every option on the cache rows of its prompt."""
    ids, mask = padded_batch([context for context, _ in members], pad, left=True)
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    # the last position's log-probabilities predict each option's first token (the head on that position only)
    out, first = last_position_logprobs(
        model, input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True
    )
    owners = [(row, index, target) for row, (_, options) in enumerate(members) for index, target in options]
    rows = torch.tensor([row for row, _, _ in owners], device=device)
    cache = cache_of(out)
    cache.batch_select_indices(rows)
    option_ids, option_mask = padded_batch([target for _, _, target in owners], pad)
    span = option_ids.shape[1]
    option_ids, option_mask = option_ids.to(device), option_mask.to(device)
    positions = mask.sum(-1)[rows].unsqueeze(-1) + torch.arange(span, device=device)
    logits = model(
        input_ids=option_ids,
        attention_mask=torch.cat([mask[rows], option_mask], dim=-1),
        position_ids=positions,
        cache=cache,
        use_cache=True,
    ).logits.float()
    rest = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, option_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    for k, (row, index, target) in enumerate(owners):
        yield index, first[row, target[0]].item() + rest[k, : len(target) - 1].sum().item()


def seq2seq_option_scores(
    model, sources: list[list[int]], targets: list[list[int]], *, pad: int, batch_size: int | AutoBatchSize = 64
) -> list[float]:
    """Sum of decoder-target log-probabilities of ``targets[i]`` given the encoder input ``sources[i]``,
    ``batch_size`` requests at a time in request order (the batches of ``spans(len(sources), size)``)."""
    device = next(model.parameters()).device
    scores = [0.0] * len(sources)

    def score_span(start: int, stop: int) -> None:
        ids, mask = padded_batch(sources[start:stop], pad)
        chunk = targets[start:stop]
        labels = torch.full((len(chunk), max(len(t) for t in chunk)), -100, dtype=torch.long)
        for row, target in enumerate(chunk):
            labels[row, : len(target)] = torch.tensor(target)
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device)).logits
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        safe = labels.clamp(min=0).to(device)
        picked = logprobs.gather(-1, safe.unsqueeze(-1)).squeeze(-1) * (labels != -100).to(device)
        scores[start:stop] = picked.sum(-1).tolist()

    as_auto(batch_size).run(len(sources), score_span)
    return scores


@torch.no_grad()
def batch_token_nll(model, batch: dict[str, torch.Tensor], *, shift: bool) -> tuple[list[float], list[int]]:
    """``(summed NLL in nats, loss tokens)`` of each row of a training ``batch`` (``input_ids``, ``labels`` with
    -100 on skipped positions, and ``attention_mask`` or ``position_ids``: ``training/examples.py: collate``).
    The model's own loss is the same cross-entropy averaged over the batch's loss tokens: causal models
    (``shift=True``) predict ``labels[t + 1]`` from position t; encoder-decoder models read the labels as their
    decoder target."""
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in batch.items()}
    if shift and chunk_capable(model):  # hidden states, then the head a chunk of positions at a time
        inputs = head_inputs(model, model, batch)
        target = batch["labels"][:, 1:]
        counted = target != IGNORE
        nll = torch.zeros(target.shape, dtype=torch.float32, device=device)
        with inputs.precision():
            nll[counted] = chunked_token_nll(inputs.hidden[:, :-1][counted], inputs.head, target[counted])
        return nll.sum(-1).tolist(), counted.sum(-1).tolist()
    labels = batch.pop("labels")
    if shift:
        logits = model(**batch, use_cache=False).logits[:, :-1]
        target = labels[:, 1:]
    else:
        logits = model(**batch, labels=labels, use_cache=False).logits
        target = labels
    nll = torch.nn.functional.cross_entropy(
        logits.float().transpose(1, 2), target, ignore_index=IGNORE, reduction="none"
    )
    counted = target != IGNORE
    return (nll * counted).sum(-1).tolist(), counted.sum(-1).tolist()
