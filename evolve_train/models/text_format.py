"""The text format: the one object that owns a model's text format, for decoder-only (causal) and
encoder-decoder (seq2seq, T5) models. Training and evaluation both go through it:

* training rows (``encode_batches``, streamed batch by batch; ``encode_step``, the same rows as a
  ``datasets.Dataset``): a time step's masked-entity pairs, or its plain-text documents packed into ``seq_len``
  rows (``clm``, with per-document ``position_ids``): ``input_ids``/``labels`` (and ``position_ids``);
* prompts (``prompt_ids``) for greedy answers (``generate``), option log-likelihoods (``score_options``) and
  sampled answers (``sample``); and a gold answer as one training example (``encode_example``, for the
  gradient analysis).

Special tokens are decided here, once, from what the tokenizer adds around a text (``special_affixes``):

* decoder-only: the tokenizer's leading special tokens (a Llama-family BOS; none for GPT-2 or the demo's
  local BPE) open every training row and every prompt, at position 0 only; texts are otherwise encoded
  without special tokens. A target is the answer's tokens and exactly one EOS, never a BOS, and the BOS is
  never a label. So a training context and the evaluation prompt of the same text have the same ids.
* encoder-decoder: the encoder input is the text with its mask turned into the T5 sentinel
  (``seq2seq_source``), with the tokenizer's own special tokens around it (a T5 tokenizer appends EOS); the
  decoder target is the answer's tokens and exactly one EOS.

Causal format of a masked-entity pair: the text left of the mask, then `` <output><eos>``, with the
loss on the output and the EOS only (salient-span loss; a causal model predicts the span from its
left context — use ``model=t5_small`` to condition on both sides). Pairs with no text left of the
mask have nothing to condition on and are dropped (counted). The ``clm`` objective trains on every
token of the plain-text documents but each document's first, packed with EOS separators
(``training/packing.py``).

The token-level work lives next door: ``models/generation.py`` (padding, the pruned greedy decoder),
``models/scoring.py`` (option log-likelihoods), ``models/batching.py`` (the batch size that halves on
out-of-memory errors). Build one with ``models.build.build_text_format`` (from the model config) or
``make_text_format``.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Optional, Sequence

import torch
from datasets import Dataset
from tqdm.auto import tqdm

from evolve_train.data.corpus import record_batches, rows_in_memory
from evolve_train.data.masking import MASK_TOKENS
from evolve_train.models.batching import AutoBatchSize, as_auto, spans
from evolve_train.models.generation import GREEDY_DECODERS, blank_token_ids, greedy_decode, padded_batch, stop_token_ids
from evolve_train.models.scoring import (
    batch_token_nll,
    causal_option_batches,
    causal_option_scores,
    seq2seq_option_scores,
)
from evolve_train.models.packing import ArrayPacker

if TYPE_CHECKING:
    from evolve_train.data.timeline import TimeStep

log = logging.getLogger(__name__)
T5_SENTINEL = "<extra_id_0>"
IGNORE = -100
"""Label of a position the loss skips."""
ENCODE_BATCH = 256
"""Records tokenized at a time by ``encode_batches``: bounds the Python token lists alive at once (256
documents of a few thousand words are a few hundred MB of them)."""


def split_masked(text: str) -> Optional[tuple[str, str]]:
    """(left, right) of the first mask token in ``text``, or None without one."""
    for mask in MASK_TOKENS:
        if mask in text:
            left, right = text.split(mask, 1)
            return left, right
    return None


def causal_context(text: str) -> Optional[str]:
    """What a causal model reads of a masked-entity input: the text left of the mask (all of it without a
    mask), right-stripped; None when nothing is left."""
    parts = split_masked(text)
    left = (parts[0] if parts else text).rstrip()
    return left or None


def seq2seq_source(text: str) -> str:
    """Encoder input of a seq2seq (T5) model: the mask token becomes the sentinel ``<extra_id_0>``; a text
    without one (a QA prompt, a cloze) gets the sentinel appended, so training pairs and eval prompts
    share one format."""
    for mask in MASK_TOKENS:
        if mask in text:
            return text.replace(mask, T5_SENTINEL, 1)
    return f"{text.rstrip()} {T5_SENTINEL}"


def special_affixes(tokenizer) -> tuple[list[int], list[int]]:
    """(prefix, suffix): the ids the tokenizer adds before and after a text (Llama: ``[BOS]``, ``[]``; T5:
    ``[]``, ``[EOS]``; GPT-2 and the demo's local BPE: ``[]``, ``[]``)."""
    for probe in ("a", "The", "0"):
        plain = tokenizer(probe, add_special_tokens=False)["input_ids"]
        if not plain:
            continue
        full = tokenizer(probe)["input_ids"]
        for start in range(len(full) - len(plain) + 1):
            if full[start : start + len(plain)] == plain:
                return list(full[:start]), list(full[start + len(plain) :])
    raise ValueError(f"cannot tell which special tokens {type(tokenizer).__name__} adds around a text")


class TextFormat:
    """What both formats share: the tokenizer, its special tokens, and batched generation and sampling.

    Subclasses define the format: ``prompt_ids``, ``encode_step``, ``encode_example``, ``answer_text``,
    ``score_options`` (with its batches, ``option_batches``) and ``_continuation``."""

    left_padded = True
    """Generation pads prompts on the left (decoder-only) or on the right (encoder-decoder)."""

    def __init__(self, tokenizer):
        if tokenizer.eos_token_id is None:
            raise ValueError(f"{type(tokenizer).__name__} has no EOS token; every training target ends with one")
        self.tokenizer = tokenizer
        self.prefix, self.suffix = special_affixes(tokenizer)
        self.eos_id: int = tokenizer.eos_token_id
        self.pad_id: int = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id

    # ------------------------------------------------------------ text <-> ids

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's token ids, without special tokens."""
        return self.tokenizer(list(texts), add_special_tokens=False)["input_ids"] if len(texts) else []

    def encode_documents(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`encode` of many documents: the ``tokenizers`` backend called directly (``encode_batch_fast``:
        the ids of the ``encode_batch`` :meth:`encode` ends in, without character offsets, nor per-text dicts)
        where the backend is set as that call sets it (no truncation, no padding, special tokens as the
        tokenizer splits them)."""
        backend = getattr(self.tokenizer, "_tokenizer", None) if getattr(self.tokenizer, "is_fast", False) else None
        direct = (
            backend is not None
            and backend.truncation is None
            and backend.padding is None
            and backend.encode_special_tokens == bool(getattr(self.tokenizer, "split_special_tokens", False))
        )
        if not direct or not len(texts):
            return self.encode(texts)
        encode = getattr(backend, "encode_batch_fast", backend.encode_batch)
        return [encoding.ids for encoding in encode(list(texts), add_special_tokens=False)]

    def decode(self, tokens: torch.Tensor) -> list[str]:
        return self.tokenizer.batch_decode(tokens, skip_special_tokens=True)

    def stop_ids(self, stop_strings: Sequence[str]) -> list[int]:
        return stop_token_ids(self.tokenizer, stop_strings)

    def blank_ids(self, stop_ids: Sequence[int]) -> list[int]:
        """Whitespace-only token ids that do not end an answer before its first word (``blank_token_ids``),
        computed once per set of stop ids."""
        key = tuple(stop_ids)
        cache = self.__dict__.setdefault("_blank_ids", {})
        if key not in cache:
            cache[key] = blank_token_ids(self.tokenizer, stop_ids)
        return cache[key]

    def answer_text(self, answer: str) -> str:
        """An answer (a masked entity, an option) as the text that follows the prompt."""
        raise NotImplementedError

    def target_ids(self, answers: Sequence[str], limit: Optional[int] = None) -> list[list[int]]:
        """Each answer's training target: its tokens, cut to fit ``limit`` ids, and exactly one EOS."""
        keep = None if limit is None else max(0, limit - 1)
        return [ids[:keep] + [self.eos_id] for ids in self.encode([self.answer_text(a) for a in answers])]

    def prompt_ids(self, prompts: Sequence[str]) -> list[list[int]]:
        """Each evaluation prompt's ids, as the model reads them (the ids a training context gets)."""
        raise NotImplementedError

    def encode_step(self, step: "TimeStep", objective: str, seq_len: int) -> Dataset:
        """A time step's training rows (``input_ids``/``labels``), at most ``seq_len`` ids each, in memory."""
        return rows_in_memory(self.encode_batches(step, objective, seq_len))

    def encode_batches(self, step: "TimeStep", objective: str, seq_len: int) -> Iterator[dict[str, list]]:
        """The rows of :meth:`encode_step` in batches (``{column: [ids, ...]}``), reading the step's corpus
        a batch at a time (``data/corpus.py: record_batches``): what the tokenized cache writes to disk."""
        raise NotImplementedError

    def encode_example(self, prompt: str, answer: str) -> dict[str, list[int]]:
        """``prompt`` answered by ``answer`` as one training row (no length cut)."""
        raise NotImplementedError

    # ------------------------------------------------------------ model calls

    def score_options(
        self,
        model,
        requests: Sequence[tuple[str, str]],
        *,
        batch_size: int | AutoBatchSize = 64,
        share_prefix: bool = True,
    ) -> list[float]:
        """Sum of option-token log-probabilities for each ``(prompt, option)`` request, in request order."""
        raise NotImplementedError

    shifted_labels = True
    """Whether position t's logits predict ``labels[t + 1]`` (decoder-only) or ``labels[t]`` (encoder-decoder)."""

    def token_nll(self, model, batch: dict) -> tuple[list[float], list[int]]:
        """Per row of a collated training batch: the summed NLL (nats) of its loss tokens and their count,
        i.e. the training loss of the row (``models/scoring.py: batch_token_nll``)."""
        return batch_token_nll(model, batch, shift=self.shifted_labels)

    def option_batches(self, requests: Sequence[tuple[str, str]], size: int) -> list[list[tuple[str, str]]]:
        """The batches of requests ``score_options`` forms at batch size ``size`` (no out-of-memory error), in
        order; any selection of whole batches, scored on its own, forms the same batches again."""
        raise NotImplementedError

    def _continuation(self, generated: torch.Tensor, prompt_width: int) -> torch.Tensor:
        """The new tokens of what ``generate`` returned for prompts ``prompt_width`` ids wide."""
        raise NotImplementedError

    def _greedy(
        self, model, input_ids, attention_mask, *, decoder: str, max_new_tokens: int, stop_ids: list[int]
    ) -> torch.Tensor:
        generated = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            num_beams=1,
            use_cache=True,
            eos_token_id=stop_ids,
            pad_token_id=self.pad_id,
        )
        return self._continuation(generated, input_ids.shape[1])

    def generation_batches(self, prompts: Sequence[str], size: int) -> list[list[str]]:
        """The batches of prompts ``generate`` forms at batch size ``size`` (no out-of-memory error), in
        order: sorted by token count, ``size`` at a time (so any selection of whole batches, generated on
        its own, forms the same batches again)."""
        order = self._generation_order(self.prompt_ids(prompts))
        return [[prompts[i] for i in order[start:stop]] for start, stop in spans(len(order), size)]

    @staticmethod
    def _generation_order(token_ids: list[list[int]]) -> list[int]:
        """Prompt indices by token count (stable), so a batch is padded only to its longest."""
        return sorted(range(len(token_ids)), key=lambda i: len(token_ids[i]))

    @torch.no_grad()
    def generate(
        self,
        model,
        prompts: Sequence[str],
        *,
        batch_size: int | AutoBatchSize = 64,
        max_new_tokens: int = 12,
        stop_strings: Sequence[str] = ("\n",),
        decoder: str = "pruned",
        progress=None,
    ) -> list[str]:
        """Greedy answers to ``prompts`` (raw generations, EOS removed, not yet cut at stop strings).

        ``decoder``: ``pruned`` (``greedy_decode``, decoder-only models) or ``generate`` (what encoder-decoder
        models always use). Batches: ``generation_batches`` (prompts sorted by token count); ``batch_size``
        halves on out-of-memory errors (``models/batching.py``)."""
        if decoder not in GREEDY_DECODERS:
            raise ValueError(f"unknown greedy decoder {decoder!r} (known: {', '.join(GREEDY_DECODERS)})")
        if not prompts:
            return []
        model.eval()
        device = next(model.parameters()).device
        token_ids = self.prompt_ids(prompts)
        order = self._generation_order(token_ids)
        outputs: list[str] = [""] * len(prompts)
        stop_ids = self.stop_ids(stop_strings)

        def answer(start: int, stop: int) -> None:
            chunk = order[start:stop]
            ids, mask = padded_batch([token_ids[i] for i in chunk], self.pad_id, left=self.left_padded)
            new_tokens = self._greedy(
                model,
                ids.to(device),
                mask.to(device),
                decoder=decoder,
                max_new_tokens=max_new_tokens,
                stop_ids=stop_ids,
            )
            for index, text in zip(chunk, self.decode(new_tokens)):
                outputs[index] = text
            if progress is not None:
                progress.update(len(chunk))

        as_auto(batch_size).run(len(order), answer)
        return outputs

    @torch.no_grad()
    def sample(
        self,
        model,
        prompts: Sequence[str],
        *,
        n: int,
        temperature: float,
        seed: int,
        batch_size: int | AutoBatchSize = 64,
        max_new_tokens: int = 12,
        stop_strings: Sequence[str] = ("\n",),
    ) -> list[list[str]]:
        """n sampled raw generations per prompt (seeded: pure ancestral sampling at ``temperature``).

        ``batch_size`` counts sequences (prompts x n) and halves on out-of-memory errors; after a retry the
        draw equals a run started at the smaller size, unless the error came mid-generation (random numbers
        already drawn): then it is another, equally valid sample."""
        if not prompts:
            return []
        model.eval()
        device = next(model.parameters()).device
        token_ids = self.prompt_ids(prompts)
        stop_ids = self.stop_ids(stop_strings)
        torch.manual_seed(seed)
        out: list[list[str]] = [[] for _ in prompts]

        def sample_span(start: int, stop: int) -> None:
            ids, mask = padded_batch(token_ids[start:stop], self.pad_id, left=self.left_padded)
            generated = model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=max_new_tokens,
                do_sample=True,
                top_k=0,
                top_p=1.0,
                temperature=temperature,
                num_return_sequences=n,
                use_cache=True,
                eos_token_id=stop_ids,
                pad_token_id=self.pad_id,
            )
            decoded = self.decode(self._continuation(generated, ids.shape[1]))
            out[start:stop] = [decoded[k * n : (k + 1) * n] for k in range(stop - start)]

        as_auto(batch_size).run(len(prompts), sample_span, lambda start, size: start + max(1, size // n))
        return out

    def _option_targets(self, requests: Sequence[tuple[str, str]]) -> list[list[int]]:
        targets = self.encode([self.answer_text(option) for _, option in requests])
        if any(not t for t in targets):
            raise ValueError("an empty option has no tokens to score")
        return targets


class CausalLMFormat(TextFormat):
    """Decoder-only models (GPT-2, Llama, Pythia): ``[BOS] context answer EOS``, the loss on ``answer EOS``."""

    def answer_text(self, answer: str) -> str:
        return " " + answer.strip()

    def prompt_ids(self, prompts: Sequence[str]) -> list[list[int]]:
        return [self.prefix + ids for ids in self.encode(prompts)]

    def encode_rows(self, contexts: Sequence[str], answers: Sequence[str], seq_len: int) -> dict[str, list]:
        """Rows of ``[BOS] context answer EOS``: the answer cut to fit, then the context cut from its left;
        labels only on the answer and its EOS."""
        ids, labels = [], []
        targets = self.target_ids(answers, seq_len - len(self.prefix))
        for context, target in zip(self.encode(contexts), targets):
            room = seq_len - len(self.prefix) - len(target)
            context = self.prefix + (context[-room:] if room > 0 else [])
            ids.append(context + target)
            labels.append([IGNORE] * len(context) + target)
        return {"input_ids": ids, "labels": labels}

    def encode_batches(self, step: "TimeStep", objective: str, seq_len: int) -> Iterator[dict[str, list]]:
        if objective != "masked_entity":
            yield from self._documents(step, seq_len)
            return
        dropped = 0
        for batch in _step_batches(step, step.pairs, ["input", "output"]):
            contexts = [causal_context(text) for text in batch["input"]]
            keep = [i for i, context in enumerate(contexts) if context is not None]
            dropped += len(contexts) - len(keep)
            yield self.encode_rows([contexts[i] for i in keep], [batch["output"][i] for i in keep], seq_len)
        if dropped:
            log.warning("step %d: dropped %d masked pairs with no text left of the mask", step.index, dropped)

    def _documents(self, step: "TimeStep", seq_len: int) -> Iterator[dict[str, list]]:
        """``clm``: the documents packed into rows of ``seq_len`` ids (``training/packing.py``: each document is
        ``[BOS] tokens EOS``, the rows carry per-document ``position_ids``, only the last row is short)."""
        packer = ArrayPacker(seq_len, self.eos_id, self.prefix)
        texts = (batch["text"] for batch in _step_batches(step, step.texts, ["text"]))
        for ids in ahead(self.encode_documents, texts):  # the next batch tokenizes while this one is packed
            yield packer.add(ids)  # a partial row is carried across batches
        yield packer.flush()

    def encode_example(self, prompt: str, answer: str) -> dict[str, list[int]]:
        context = self.prompt_ids([prompt])[0]
        target = self.target_ids([answer])[0]
        return {"input_ids": context + target, "labels": [IGNORE] * len(context) + target}

    @torch.no_grad()
    def score_options(
        self,
        model,
        requests: Sequence[tuple[str, str]],
        *,
        batch_size: int | AutoBatchSize = 64,
        share_prefix: bool = True,
    ) -> list[float]:
        """Sum of option-token log-probabilities for each request, in request order. A prompt is cut from its
        left to fit the model's positions with its own longest option, so a request's score does not depend
        on the other requests of the call."""
        if not requests:
            return []
        model.eval()
        config = model.config
        limit = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", 10**9)
        targets = self._option_targets(requests)
        longest: dict[str, int] = {}
        for (prompt, _), target in zip(requests, targets):
            longest[prompt] = max(longest.get(prompt, 0), len(target))
        prompts = list(longest)
        contexts = {
            p: self.prefix + ids[-max(1, limit - longest[p] - len(self.prefix)) :]
            for p, ids in zip(prompts, self.encode(prompts))
        }
        return causal_option_scores(
            model, requests, contexts, targets, pad=self.pad_id, batch_size=batch_size, share_prefix=share_prefix
        )

    def option_batches(self, requests: Sequence[tuple[str, str]], size: int) -> list[list[tuple[str, str]]]:
        return [[requests[i] for i in batch] for batch in causal_option_batches(requests, size)]

    def _greedy(
        self, model, input_ids, attention_mask, *, decoder: str, max_new_tokens: int, stop_ids: list[int]
    ) -> torch.Tensor:
        if decoder == "pruned":
            return greedy_decode(
                model,
                input_ids,
                attention_mask,
                max_new_tokens=max_new_tokens,
                stop_ids=stop_ids,
                pad_id=self.pad_id,
                blank_ids=self.blank_ids(stop_ids),
            )
        return super()._greedy(
            model, input_ids, attention_mask, decoder=decoder, max_new_tokens=max_new_tokens, stop_ids=stop_ids
        )

    def _continuation(self, generated: torch.Tensor, prompt_width: int) -> torch.Tensor:
        return generated[:, prompt_width:]


class Seq2SeqFormat(TextFormat):
    """Encoder-decoder models (T5): the encoder reads ``seq2seq_source(text)`` with the tokenizer's special
    tokens, the decoder target is ``answer EOS``."""

    left_padded = False
    shifted_labels = False

    def answer_text(self, answer: str) -> str:
        return answer.strip()

    def source_ids(self, texts: Sequence[str], limit: Optional[int] = None) -> list[list[int]]:
        """Encoder inputs: each text (already in ``seq2seq_source`` form), cut to fit ``limit`` with the
        tokenizer's special tokens around it."""
        keep = None if limit is None else max(0, limit - len(self.prefix) - len(self.suffix))
        return [self.prefix + ids[:keep] + self.suffix for ids in self.encode(texts)]

    def prompt_ids(self, prompts: Sequence[str]) -> list[list[int]]:
        return self.source_ids([seq2seq_source(p) for p in prompts])

    def encode_batches(self, step: "TimeStep", objective: str, seq_len: int) -> Iterator[dict[str, list]]:
        if not step.pairs and step.texts:
            raise ValueError(
                f"step {step.name}: a seq2seq model trains on masked-entity pairs and this step has "
                "only text documents (make pairs with `evolve-data mask --format t5`)"
            )
        for batch in _step_batches(step, step.pairs, ["input", "output"]):
            yield {
                "input_ids": self.source_ids([seq2seq_source(text) for text in batch["input"]], seq_len),
                "labels": self.target_ids(batch["output"], seq_len),
            }

    def encode_example(self, prompt: str, answer: str) -> dict[str, list[int]]:
        return {"input_ids": self.prompt_ids([prompt])[0], "labels": self.target_ids([answer])[0]}

    @torch.no_grad()
    def score_options(
        self,
        model,
        requests: Sequence[tuple[str, str]],
        *,
        batch_size: int | AutoBatchSize = 64,
        share_prefix: bool = True,
    ) -> list[float]:
        if not requests:
            return []
        model.eval()
        targets = self._option_targets(requests)
        sources = self.prompt_ids([prompt for prompt, _ in requests])
        return seq2seq_option_scores(model, sources, targets, pad=self.pad_id, batch_size=batch_size)

    def option_batches(self, requests: Sequence[tuple[str, str]], size: int) -> list[list[tuple[str, str]]]:
        return [list(requests[start:stop]) for start, stop in spans(len(requests), size)]

    def _continuation(self, generated: torch.Tensor, prompt_width: int) -> torch.Tensor:
        return generated  # the decoder's own sequence (its start token is special, dropped when decoded)


def _step_batches(step: "TimeStep", records: Sequence[dict], columns: list[str]) -> Iterator[dict[str, list]]:
    """``columns`` of a step's ``records``, :data:`ENCODE_BATCH` at a time (``record_batches``), with a
    progress bar counting the records (shown on a terminal)."""
    with tqdm(
        total=len(records), desc=f"tokenize step {step.name}", unit="rec", leave=False, dynamic_ncols=True, disable=None
    ) as bar:
        for batch in record_batches(records, columns, ENCODE_BATCH):
            yield batch
            bar.update(len(batch[columns[0]]))


def ahead(function: Callable, items: Iterable) -> Iterator:
    """``function(item)`` for each of ``items``, in order, the next one computed on a thread while the caller
    works on the current one (``tokenizers`` encodes without holding the GIL)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenize") as pool:
        pending = None
        try:
            for item in items:
                submitted = pool.submit(function, item)
                if pending is not None:
                    yield pending.result()
                pending = submitted
            if pending is not None:
                yield pending.result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def make_text_format(tokenizer, seq2seq: bool = False) -> TextFormat:
    """The text format of an encoder-decoder (``seq2seq``) or a decoder-only model using ``tokenizer``."""
    return Seq2SeqFormat(tokenizer) if seq2seq else CausalLMFormat(tokenizer)


def is_encoder_decoder(model) -> bool:
    """Whether a loaded model (plain or wrapped by peft) is an encoder-decoder, from its config."""
    return bool(getattr(model.config, "is_encoder_decoder", False))


def text_format_for_model(model, tokenizer) -> TextFormat:
    """The text format that fits a loaded ``model``."""
    return make_text_format(tokenizer, is_encoder_decoder(model))
