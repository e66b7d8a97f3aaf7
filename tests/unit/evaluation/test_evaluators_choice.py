"""Option log-likelihoods, the ``dimensions`` (§6), ``calibration`` (§7) and ``grad_norms`` evaluators."""

import math

import pytest
import torch

from evolve_train.config import EvalConfig, ModelConfig
from evolve_train.data.timeline import EvalSet, Timeline, TimeStep
from evolve_train.evaluation.evaluator import EvalContext, evaluate_checkpoint
from evolve_train.evaluation.evaluators.calibration import lettered_prompt
from evolve_train.evaluation.evaluators.grad_norms import example_grad_norms
from evolve_train.evaluation.metrics.calibration import cyclic_rotations
from evolve_train.models.text_format import CausalLMFormat, Seq2SeqFormat, seq2seq_source
from evolve_train.models.build import build_model, train_tokenizer

TEXTS = [
    "The director of Acme Guild is Ann Lee.",
    "Bob Stone leads Brix Works in 2019.",
    "Version 3 of the Acme toolkit came out in 2018.",
    "Cal Dee was founded in 1957.",
] * 5


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    tokenizer = train_tokenizer(TEXTS, 200)
    model = build_model(ModelConfig(n_layer=1, n_embd=32, n_head=2, vocab_size=200), tokenizer)
    return model.eval(), tokenizer


def reference_score(model, tokenizer, prompt, option):
    """One unbatched, unpadded forward pass: the definition of the score."""
    context = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    target = tokenizer(" " + option, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([context + target])).logits[0], dim=-1)
    return sum(logprobs[len(context) - 1 + k, token].item() for k, token in enumerate(target))


REQUESTS = [("The director of Acme Guild is", option) for option in ("Ann Lee", "Bob Stone", "Cal")] + [
    ("Version 3 of the Acme toolkit came out in", "2018"),
    ("Version 3 of the Acme toolkit came out in", "1957"),
    ("Hi", "Bob Stone leads Brix Works"),
    ("Cal Dee was", "founded"),
]


@pytest.mark.parametrize("share_prefix", [True, False])
@pytest.mark.parametrize("batch_size", [2, 64])
def test_batched_option_scores_equal_the_unbatched_definition(tiny, share_prefix, batch_size):
    model, tokenizer = tiny
    scores = CausalLMFormat(tokenizer).score_options(model, REQUESTS, batch_size=batch_size, share_prefix=share_prefix)
    expected = [reference_score(model, tokenizer, p, o) for p, o in REQUESTS]
    assert scores == pytest.approx(expected, abs=1e-4)


# ---------------------------------------------------------------- hand-built contexts


def mc_item(key, dimension, prompt, options, gold):
    return {
        "id": key,
        "question": prompt,
        "answers": [options[gold]],
        "options": options,
        "gold_index": gold,
        "dimension": dimension,
        "set": "dimension",
        "step": 0,
        "timestamp": None,
    }


def context(items, answers=None, scores=None, **cfg):
    timeline = Timeline(steps=[TimeStep(0, "2018")], eval_sets=[EvalSet("dimension_0", "dimension", 0, items)])
    ctx = EvalContext(timeline=timeline, checkpoint=0, cfg=EvalConfig(**cfg), run_dir=None)
    ctx._answers.update(answers or {})
    ctx._scores.update(scores or {})
    return ctx


def test_dimensions_hand_computed():
    items = [
        mc_item("a", "version_awareness", "Qa", ["1", "2"], 1),
        mc_item("b", "version_awareness", "Qb", ["1", "2"], 0),
        mc_item("c", "event_ordering", "Qc", ["X", "Y"], 0),
    ]
    answers = {"Qa": " 2", "Qb": " 2", "Qc": " Y"}  # right, wrong, wrong
    scores = {
        ("Qa", "1"): -2.0,
        ("Qa", "2"): -1.0,
        ("Qb", "1"): -1.0,
        ("Qb", "2"): -1.0,  # tie -> first
        ("Qc", "X"): -3.0,
        ("Qc", "Y"): -1.0,
    }
    rows = evaluate_checkpoint(context(items, answers, scores, evaluators=["dimensions"]))
    row = next(r for r in rows if r["group"] == "dimensions" and r["set_name"] == "all")
    assert row["em"] == pytest.approx(1 / 3) and row["n"] == 3
    assert row["dimensions"]["version_awareness"] == {"em": 0.5, "n": 2, "error_share": 0.5, "mc_acc": 1.0, "mc_n": 2}
    assert row["dimensions"]["event_ordering"] == {"em": 0.0, "n": 1, "error_share": 0.5, "mc_acc": 0.0, "mc_n": 1}


def test_calibration_hand_computed_with_position_consistency():
    items = [mc_item("a", None, "Qa", ["aa", "bb"], 1), mc_item("b", None, "Qb", ["cc", "dd"], 0)]
    scores = {
        ("Qa", "aa"): math.log(1),
        ("Qa", "bb"): math.log(3),  # p = .25/.75, right, confidence .75
        ("Qb", "cc"): math.log(1),
        ("Qb", "dd"): math.log(9),
    }  # p = .1/.9, wrong, confidence .9
    # lettered prompts: question a always picks "bb" wherever it stands; question b always picks letter A
    for item, favourite in ((items[0], "bb"), (items[1], None)):
        for rotated in cyclic_rotations(item["options"]):
            pick = rotated.index(favourite) if favourite else 0
            for k, letter in enumerate("AB"):
                scores[(lettered_prompt(item["question"], rotated), letter)] = 0.0 if k == pick else -5.0
    rows = evaluate_checkpoint(context(items, scores=scores, evaluators=["calibration"]))
    row = next(r for r in rows if r["group"] == "calibration" and r["set_name"] == "all")
    assert row["acc"] == 0.5 and row["acc_norm"] == 0.5 and row["n"] == 2
    assert row["ece"] == pytest.approx(0.5 * (1 - 0.75) + 0.5 * 0.9)  # bins 7 and 9
    assert row["brier"] == pytest.approx(((0.25**2 + 0.25**2) + (0.9**2 + 0.9**2)) / 2)
    assert row["overconfident_error_rate"] == 1.0  # the one error has confidence .9 >= .8
    assert row["position_consistency"] == 0.5 and row["position_n"] == 2


def test_lettered_prompt_format():
    assert lettered_prompt("Q", ["x", "y"]) == "Q\nA. x\nB. y\nAnswer:"


# ---------------------------------------------------------------- grad norms


def test_per_example_grad_norms_match_a_manual_backward(tiny):
    model, tokenizer = tiny
    timeline = Timeline(steps=[TimeStep(0, "2018")], eval_sets=[])
    ctx = EvalContext(
        model=model,
        text_format=CausalLMFormat(tokenizer),
        timeline=timeline,
        checkpoint=0,
        cfg=EvalConfig(),
        run_dir=None,
    )
    norms, losses = example_grad_norms(ctx, ["The director of Acme Guild is", "Cal Dee was"], ["Ann Lee", "founded"])
    assert all(p.grad is None for p in model.parameters())  # cleared afterwards
    context = tokenizer("Cal Dee was", add_special_tokens=False)["input_ids"]
    target = tokenizer(" founded", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    loss = model(input_ids=torch.tensor([context + target]), labels=torch.tensor([[-100] * len(context) + target])).loss
    loss.backward()
    manual = math.sqrt(sum(p.grad.pow(2).sum().item() for p in model.parameters() if p.grad is not None))
    model.zero_grad(set_to_none=True)
    assert norms[1] == pytest.approx(manual, rel=1e-4) and losses[1] == pytest.approx(loss.item(), rel=1e-5)
    assert norms[0] > 0 and norms[0] != pytest.approx(norms[1])


def test_grad_norms_of_a_frozen_model_use_every_parameter_and_restore_the_flags(tiny):
    model, tokenizer = tiny
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        ctx = EvalContext(
            model=model,
            text_format=CausalLMFormat(tokenizer),
            timeline=Timeline(steps=[], eval_sets=[]),
            checkpoint=0,
            cfg=EvalConfig(),
            run_dir=None,
        )
        norms, _ = example_grad_norms(ctx, ["Cal Dee was"], ["founded"])
        assert norms[0] > 0
        assert not any(p.requires_grad for p in model.parameters())
    finally:
        for p in model.parameters():
            p.requires_grad_(True)


def test_seq2seq_option_scores_are_the_decoder_log_likelihood():
    tokenizer = train_tokenizer(TEXTS, 200, "t5")
    model = build_model(ModelConfig(arch="t5", n_layer=1, n_embd=32, n_head=2, vocab_size=200), tokenizer).eval()
    requests = REQUESTS[:3] + REQUESTS[5:6]
    scores = Seq2SeqFormat(tokenizer).score_options(model, requests, batch_size=2)
    expected = []
    for prompt, option in requests:
        encoded = tokenizer([seq2seq_source(prompt)], return_tensors="pt", add_special_tokens=True)
        labels = torch.tensor([tokenizer(option, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            expected.append(-model(**encoded, labels=labels).loss.item() * labels.shape[1])  # mean -> sum
    assert scores == pytest.approx(expected, abs=1e-3)
