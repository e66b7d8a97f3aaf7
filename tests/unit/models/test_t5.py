"""Seq2seq (T5): the masked-entity pairs in sentinel format, generation in the same format, end to end."""

from __future__ import annotations


import pytest

from evolve_train.config import ModelConfig
from evolve_train.data.timeline import TimeStep
from evolve_train.models.text_format import Seq2SeqFormat, seq2seq_source
from evolve_train.models.build import build_text_format, build_model, is_seq2seq, train_tokenizer


PAIRS = [
    {"input": "The director of Acme is <mask>.", "output": "Ann Lee"},
    {"input": "<extra_id_0> was founded in 1990.", "output": "Zeta"},
]


@pytest.fixture(scope="module")
def tokenizer():
    texts = [p["input"] + " " + p["output"] for p in PAIRS] * 20
    return train_tokenizer(texts, 300, "t5")


def test_seq2seq_source_uses_the_sentinel():
    assert seq2seq_source("The director of Acme is <mask>.") == "The director of Acme is <extra_id_0>."
    assert seq2seq_source("Question: Who leads Acme?\nAnswer:") == "Question: Who leads Acme?\nAnswer: <extra_id_0>"
    assert seq2seq_source("X is <extra_id_0>.") == "X is <extra_id_0>."


def test_tokenized_pairs_have_a_sentinel_input_and_an_eos_target(tokenizer):
    examples = Seq2SeqFormat(tokenizer).encode_step(TimeStep(0, "0", pairs=PAIRS), "masked_entity", 64)
    sentinel = tokenizer.convert_tokens_to_ids("<extra_id_0>")
    for row, pair in zip(examples, PAIRS):
        assert row["input_ids"].count(sentinel) == 1
        assert row["labels"][-1] == tokenizer.eos_token_id and row["labels"].count(tokenizer.eos_token_id) == 1
        assert tokenizer.decode(row["labels"], skip_special_tokens=True).strip() == pair["output"]


def test_text_only_step_is_refused_for_seq2seq(tokenizer):
    with pytest.raises(ValueError, match="masked-entity pairs"):
        Seq2SeqFormat(tokenizer).encode_step(TimeStep(0, "0", texts=[{"text": "Plain text."}]), "clm", 64)


def test_tiny_t5_learns_one_fact_and_stops(tokenizer):
    import torch

    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: on a shared 2-core machine, two spin 10-30x slower
    cfg = ModelConfig(arch="t5", n_layer=1, n_embd=64, n_head=2)
    model = build_model(cfg, tokenizer)
    assert is_seq2seq(cfg) and model.config.decoder_start_token_id == tokenizer.pad_token_id
    text_format = build_text_format(cfg, tokenizer)
    assert isinstance(text_format, Seq2SeqFormat)
    examples = text_format.encode_step(TimeStep(0, "0", pairs=PAIRS[:1]), "masked_entity", 64)
    batch = {"input_ids": torch.tensor([examples[0]["input_ids"]]), "labels": torch.tensor([examples[0]["labels"]])}
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    try:
        for _ in range(60):
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    finally:
        torch.set_num_threads(threads)
    # the eval prompt is the cloze without the mask: generation appends the sentinel, as in training
    answer = text_format.generate(model, ["The director of Acme is"], max_new_tokens=8)
    assert answer[0].strip() == "Ann Lee"
