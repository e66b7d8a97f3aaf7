"""Hand-made packed documents and the logits of a model on them."""

import torch
from evolve_train.training.examples import collate
from evolve_train.training.packing import (
    pack_documents,
)
from helpers.methods import PAD


EOS = 1


DOCS = [[5, 6, 7, 8, 9], [10, 11, 12, 13, 14, 15, 16], [17, 18, 19]]


def packed_logits(model, docs, reset: bool = True):
    rows = pack_documents(docs, seq_len=64, eos_id=EOS)
    short = pack_documents(docs[:1], seq_len=64, eos_id=EOS)  # a shorter second row: padding in the batch
    batch = collate([{k: v[0] for k, v in rows.items()}, {k: v[0] for k, v in short.items()}], PAD, reset)
    assert ("attention_mask" in batch) != reset
    with torch.no_grad():
        return model(**batch, use_cache=False).logits[0], rows


def spans(docs):
    start = 0
    for doc in docs:
        yield slice(start, start + len(doc) + 1)
        start += len(doc) + 1
