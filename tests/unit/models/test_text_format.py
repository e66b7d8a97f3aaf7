"""The text format decides special tokens once: a BOS only at position 0 and never in the labels, exactly one
EOS after a target, training context ids equal to evaluation prompt ids; and the demo's local BPE tokenizer
gets the very ids it got before the adapter existed."""

from __future__ import annotations

import ast

import pytest
import torch
from omegaconf import OmegaConf
from tokenizers import Tokenizer, pre_tokenizers
from tokenizers.models import WordLevel
from tokenizers.processors import TemplateProcessing
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from evolve_train.data.timeline import TimeStep, build_timeline
from evolve_train.models.text_format import (
    IGNORE,
    CausalLMFormat,
    Seq2SeqFormat,
    text_format_for_model,
    make_text_format,
    seq2seq_source,
    special_affixes,
    split_masked,
)
from evolve_train.models.build import train_tokenizer
from evolve_train.training.examples import collate
from helpers import tiny_cfg
from helpers.processes import ROOT

PROMPT = "Question: Who leads Acme?\nAnswer:"
PAIRS = [
    {"input": "The director of Acme is <mask>.", "output": "Ann Lee"},
    {"input": "Acme is based in <mask> since 2019.", "output": " Oslo "},
    {"input": "<mask> founded Acme.", "output": "Bob"},  # nothing left of the mask: dropped (causal)
    {"input": PROMPT, "output": "Ann Lee"},
]  # a QA-adaptation pair: the input is the eval prompt
TEXTS = ["The director of Acme is Ann Lee. Acme is based in Oslo since 2019.", "Bob founded Acme."]
WORDS = ("The director of Acme is Ann Lee . based in Oslo since 2019 Bob founded Question : Who leads ? Answer").split()


def word_tokenizer(template: str) -> PreTrainedTokenizerFast:
    """A word-level tokenizer whose post-processor adds special tokens as ``template`` says (``<s> $A``: a
    Llama-family BOS; ``$A </s>``: a T5 EOS)."""
    specials = ["<pad>", "<s>", "</s>", "<unk>", "<extra_id_0>"]
    vocab = {token: i for i, token in enumerate(specials + sorted(set(WORDS)))}
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = TemplateProcessing(single=template, special_tokens=[("<s>", 1), ("</s>", 2)])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=["<extra_id_0>"],
    )


@pytest.fixture(scope="module")
def llama_tokenizer():
    return word_tokenizer("<s> $A")


@pytest.fixture(scope="module")
def t5_tokenizer():
    return word_tokenizer("$A </s>")


def step(pairs=PAIRS, texts=()) -> TimeStep:
    return TimeStep(index=0, name="0", pairs=list(pairs), texts=[{"text": t} for t in texts])


# ---------------------------------------------------------------- a BOS-adding (Llama-style) tokenizer


def test_special_affixes_read_what_the_tokenizer_adds(llama_tokenizer, t5_tokenizer):
    assert special_affixes(llama_tokenizer) == ([1], [])
    assert special_affixes(t5_tokenizer) == ([], [2])
    assert special_affixes(word_tokenizer("<s> $A </s>")) == ([1], [2])
    assert special_affixes(train_tokenizer(TEXTS, 300)) == ([], [])


@pytest.mark.parametrize("template", ["<s> $A", "<s> $A </s>"])
def test_causal_rows_have_one_bos_at_index_0_none_in_labels_and_one_eos(template):
    tokenizer = word_tokenizer(template)
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    rows = CausalLMFormat(tokenizer).encode_step(step(), "masked_entity", 64)
    assert len(rows) == 3  # the pair with nothing left of its mask is dropped
    for row in rows:
        ids, labels = row["input_ids"], row["labels"]
        assert ids[0] == bos and ids.count(bos) == 1 and bos not in labels
        assert ids[-1] == eos and ids.count(eos) == 1 and labels[-1] == eos and labels.count(eos) == 1
        assert len(labels) == len(ids) and labels[0] == IGNORE


def test_causal_training_context_ids_equal_the_eval_prompt_ids(llama_tokenizer):
    text_format = CausalLMFormat(llama_tokenizer)
    rows = text_format.encode_step(step(), "masked_entity", 64)
    prompts = ["The director of Acme is", "Acme is based in", PROMPT]  # the cloze of each pair, the QA prompt
    for row, prompt, answer in zip(rows, prompts, ["Ann Lee", "Oslo", "Ann Lee"]):
        context = [t for t, label in zip(row["input_ids"], row["labels"]) if label == IGNORE]
        assert context == text_format.prompt_ids([prompt])[0]
        assert row["labels"][len(context) :] == text_format.encode([" " + answer])[0] + [llama_tokenizer.eos_token_id]
    example = text_format.encode_example(PROMPT, "Ann Lee")  # the gradient analysis reads the same row
    assert example == {"input_ids": rows[2]["input_ids"], "labels": rows[2]["labels"]}


def test_causal_rows_cut_to_seq_len_keep_the_bos_and_the_eos(llama_tokenizer):
    text_format = CausalLMFormat(llama_tokenizer)
    for row in text_format.encode_step(step(), "masked_entity", 6):
        assert len(row["input_ids"]) <= 6 and row["input_ids"][0] == 1 and row["input_ids"][-1] == 2
        assert row["input_ids"].count(1) == 1 and 1 not in row["labels"]


def test_clm_packs_documents_each_opening_with_the_bos_which_is_never_a_label(llama_tokenizer):
    rows = CausalLMFormat(llama_tokenizer).encode_step(step(texts=TEXTS), "clm", 5)[:]
    assert len(rows["input_ids"]) > len(TEXTS)  # cut into rows
    assert all(len(row) == 5 for row in rows["input_ids"][:-1]) and 0 < len(rows["input_ids"][-1]) <= 5
    stream = [t for row in rows["input_ids"] for t in row]
    labels = [t for row in rows["labels"] for t in row]
    positions = [p for row in rows["position_ids"] for p in row]
    assert stream.count(1) == stream.count(llama_tokenizer.eos_token_id) == len(TEXTS)  # BOS ... EOS per document
    assert [labels[i] for i, t in enumerate(stream) if t == 1] == [IGNORE] * len(TEXTS)
    assert all(label in (IGNORE, token) for label, token in zip(labels, stream)) and 1 not in labels
    assert [positions[i] for i, t in enumerate(stream) if t == 1] == [0] * len(TEXTS)  # each document restarts


def test_causal_option_scores_and_generation_read_the_prompt_after_the_bos(llama_tokenizer):
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            vocab_size=len(llama_tokenizer),
            max_position_embeddings=64,
            pad_token_id=0,
        )
    ).eval()
    text_format = text_format_for_model(model, llama_tokenizer)
    assert isinstance(text_format, CausalLMFormat)
    requests = [(PROMPT, "Ann Lee"), (PROMPT, "Bob"), ("The director of Acme is", "Ann Lee")]
    scores = text_format.score_options(model, requests, batch_size=2)
    for (prompt, option), score in zip(requests, scores):
        row = text_format.encode_example(prompt, option)
        target = row["input_ids"][-len(text_format.encode([" " + option])[0]) - 1 : -1]  # the option, not its EOS
        start = len(row["input_ids"]) - 1 - len(target)
        with torch.no_grad():
            logprobs = torch.log_softmax(model(torch.tensor([row["input_ids"]])).logits[0], dim=-1)
        assert score == pytest.approx(sum(logprobs[start - 1 + k, t].item() for k, t in enumerate(target)), abs=1e-4)
    answer = text_format.generate(model, [PROMPT], max_new_tokens=3, decoder="generate")[0]
    ids = torch.tensor([[1] + llama_tokenizer(PROMPT, add_special_tokens=False)["input_ids"]])
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=3,
        do_sample=False,
        eos_token_id=text_format.stop_ids(["\n"]),
        pad_token_id=0,
    )
    assert answer == llama_tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


# ---------------------------------------------------------------- an EOS-appending (T5-style) tokenizer


def test_seq2seq_source_ends_with_one_eos_and_the_target_with_exactly_one(t5_tokenizer):
    eos = t5_tokenizer.eos_token_id
    sentinel = t5_tokenizer.convert_tokens_to_ids("<extra_id_0>")
    text_format = Seq2SeqFormat(t5_tokenizer)
    rows = text_format.encode_step(step(), "masked_entity", 64)
    assert len(rows) == len(PAIRS)  # every pair: the encoder reads both sides of the mask
    for row, pair in zip(rows, PAIRS):
        assert row["input_ids"][-1] == eos and row["input_ids"].count(eos) == 1
        assert row["input_ids"].count(sentinel) == 1
        assert row["labels"] == text_format.encode([pair["output"].strip()])[0] + [eos]  # no doubled EOS
        assert row["labels"].count(eos) == 1
    assert rows[3]["input_ids"] == text_format.prompt_ids([PROMPT])[0]  # training source == eval prompt ids
    assert text_format.encode_example(PROMPT, "Ann Lee") == {
        "input_ids": rows[3]["input_ids"],
        "labels": rows[3]["labels"],
    }
    for row in text_format.encode_step(step(), "masked_entity", 4):  # cut to fit, the EOS kept
        assert len(row["input_ids"]) <= 4 and row["input_ids"][-1] == eos and row["input_ids"].count(eos) == 1
        assert len(row["labels"]) <= 4 and row["labels"][-1] == eos and row["labels"].count(eos) == 1


def test_seq2seq_target_of_a_tokenizer_with_a_bos_holds_no_bos():
    tokenizer = word_tokenizer("<s> $A </s>")  # BART-like: the encoder keeps both, the labels get neither BOS
    rows = Seq2SeqFormat(tokenizer).encode_step(step(), "masked_entity", 64)
    for row in rows:
        assert row["input_ids"][0] == 1 and row["input_ids"][-1] == 2
        assert 1 not in row["labels"] and row["labels"][-1] == 2 and row["labels"].count(2) == 1


def test_collate_pads_labels_to_their_own_width():
    causal = collate([{"input_ids": [5, 6, 7], "labels": [IGNORE, 6, 7]}, {"input_ids": [5], "labels": [5]}], 0)
    assert causal["labels"].tolist() == [[IGNORE, 6, 7], [5, IGNORE, IGNORE]]
    seq2seq = collate([{"input_ids": [5, 6, 7], "labels": [8]}, {"input_ids": [5], "labels": [8, 9]}], 0)
    assert seq2seq["input_ids"].tolist() == [[5, 6, 7], [5, 0, 0]]
    assert seq2seq["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert seq2seq["labels"].tolist() == [[8, IGNORE], [8, 9]]


# ---------------------------------------------------------------- the demo's tokenizer: the ids of before


def old_tokenize_step(step: TimeStep, objective: str, tokenizer, seq_len: int, seq2seq: bool) -> dict:
    """``training/examples.py: tokenize_step`` as it was before the adapter (the demo's ids must not change)."""
    eos = tokenizer.eos_token_id
    if seq2seq:
        sources = tokenizer([seq2seq_source(p["input"]) for p in step.pairs], truncation=True, max_length=seq_len)[
            "input_ids"
        ]
        targets = tokenizer([p["output"].strip() for p in step.pairs], truncation=True, max_length=seq_len)["input_ids"]
        labels = [t[:seq_len] if t and t[-1] == eos else t[: seq_len - 1] + [eos] for t in targets]
        return {"input_ids": sources, "labels": labels}
    if objective == "masked_entity":
        ids, labels = [], []
        for pair in step.pairs:
            parts = split_masked(pair["input"])
            left = (parts[0] if parts else pair["input"]).rstrip()
            if not left:
                continue
            context = tokenizer(left)["input_ids"]
            target = tokenizer(" " + pair["output"].strip())["input_ids"] + [eos]
            context = context[-(seq_len - len(target)) :]
            ids.append(context + target)
            labels.append([IGNORE] * len(context) + target)
        return {"input_ids": ids, "labels": labels}
    ids = []
    for row in tokenizer([t["text"] for t in step.texts])["input_ids"]:
        row = row + [eos]
        ids.extend(row[i : i + seq_len] for i in range(0, len(row), seq_len))
    return {"input_ids": ids, "labels": ids}


@pytest.fixture(scope="module")
def demo_timeline(tmp_path_factory):
    return build_timeline(OmegaConf.to_object(tiny_cfg(tmp_path_factory.mktemp("run"))).data)


@pytest.mark.parametrize("arch,objective", [("gpt2", "masked_entity"), ("gpt2", "clm"), ("t5", "masked_entity")])
@pytest.mark.parametrize("width", ["demo", "tight"])
def test_the_demo_tokenizer_gets_the_ids_it_got_before(demo_timeline, arch, objective, width):
    first = demo_timeline.steps[0]
    texts = [t["text"] for t in first.texts] + [p["input"] + " " + p["output"] for p in first.pairs]
    tokenizer = train_tokenizer(texts, 300, arch)
    text_format = make_text_format(tokenizer, seq2seq=arch == "t5")
    seq_len = 128  # the demo's trainer.seq_len
    if width == "tight":  # contexts (sources, documents) cut; a causal target must still fit, as before
        answers = [" " + p["output"].strip() for s in demo_timeline.steps for p in s.pairs]
        seq_len = 8 if objective == "clm" or arch == "t5" else 2 + max(len(t) for t in text_format.encode(answers))
    for time_step in demo_timeline.steps:
        got = text_format.encode_step(time_step, objective, seq_len)[:]
        old = old_tokenize_step(time_step, objective, tokenizer, seq_len, arch == "t5")
        if objective == "clm":  # now packed: the same ids, laid end to end into full rows
            got, old = ({"stream": [t for row in rows["input_ids"] for t in row]} for rows in (got, old))
        assert got == old
        assert len(got[next(iter(got))]) > 0
    prompts = [demo_timeline.prompt(item) for s in demo_timeline.eval_sets[:2] for item in s.items[:5]]
    texts = [seq2seq_source(p) for p in prompts] if arch == "t5" else prompts
    assert text_format.prompt_ids(prompts) == tokenizer(texts, add_special_tokens=arch == "t5")["input_ids"]


# ---------------------------------------------------------------- seq2seq stays in the adapter


def test_no_function_outside_the_text_format_and_model_building_takes_seq2seq():
    package = ROOT / "evolve_train"
    allowed = {package / "models" / "text_format.py", package / "models" / "build.py"}
    offenders = []
    for path in package.rglob("*.py"):
        if path in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                args = node.args
                names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
                if any("seq2seq" in name for name in names):
                    offenders.append(f"{path.relative_to(package)}:{node.lineno}")
    assert not offenders


@pytest.mark.parametrize("kind", ["bpe", "word"])
def test_documents_encode_as_the_tokenizer_encodes_them(kind, llama_tokenizer):
    """The backend's direct call (``encode_documents``) gives the ids of the tokenizer's own call, special-token
    text included; with a backend left truncating by someone else, the tokenizer's own call (which resets it)."""
    texts = ["The bridge opened in 2019.", "", "Acme hired Ann Lee.", "  spaced  words  "]
    tokenizer = train_tokenizer(texts * 20, vocab_size=120) if kind == "bpe" else llama_tokenizer
    texts.append(f"Acme {tokenizer.eos_token} hired Ann Lee.")
    text_format = CausalLMFormat(tokenizer)
    assert text_format.encode_documents(texts) == text_format.encode(texts)
    tokenizer.backend_tokenizer.enable_truncation(3)
    try:
        assert text_format.encode_documents(texts) == text_format.encode(texts)
    finally:
        tokenizer.backend_tokenizer.no_truncation()
