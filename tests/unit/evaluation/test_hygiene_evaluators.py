"""``paraphrase_gap`` and ``flip_rate`` (docs/metrics.md#8-statistics-and-hygiene) on hand-computed cases, and on a real tiny run."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from evolve_train.config import EvalConfig
from evolve_train.data.timeline import EvalSet, TimeStep, Timeline
from evolve_train.errors import ConfigError
from evolve_train.evaluation.evaluator import EVALUATORS, EvalContext
from evolve_train.evaluation.evaluators.hygiene import (
    check_config,
    check_rewrites,
    paraphrase_gap_evaluator,
    flip_rate_evaluator,
    gap_stats,
    perturbations,
)


def test_the_evaluators_are_registered_by_name():
    assert {"paraphrase_gap", "flip_rate", "hygiene"} <= set(EVALUATORS)


def test_gap_with_equal_variants_is_acc_original_minus_mean_variant_accuracy():
    stats = gap_stats([1, 1, 0, 1], [[1, 0, 0], [1, 1, 1], [0, 0, 0], [0, 0, 1]])
    assert stats["acc_original"] == 0.75
    assert stats["acc_variants"] == [0.5, 0.25, 0.5]
    assert stats["acc_perturbed"] == pytest.approx(5 / 12)
    assert stats["paraphrase_gap"] == pytest.approx(0.75 - 5 / 12)  # = 1/3
    assert (stats["k"], stats["n"]) == (3, 4)


def test_gap_with_unequal_variants_averages_each_question_first_and_empty_is_null():
    stats = gap_stats([1, 0], [[0, 1], [1]])  # per question: 0.5 and 1.0
    assert stats["paraphrase_gap"] == pytest.approx(0.5 - 0.75)
    assert stats["acc_variants"] is None and stats["k"] == 1
    assert gap_stats([], [])["paraphrase_gap"] is None


def test_heldout_variants_come_first_and_rewrites_apply_to_items_without_them():
    world = {
        "id": "a",
        "question": "The director of X is",
        "answers": ["Y"],
        "extra": {"variants": ["Heading X is", "The director of X is", "X answers to its director,", "V3"]},
    }
    assert perturbations(world, [], 3) == [
        ("variant0", "Heading X is"),
        ("variant2", "X answers to its director,"),
        ("variant3", "V3"),
    ]  # a copy of the original is no variant
    rewrites = check_rewrites(
        [
            {"pattern": r"^Who is (.*)\?$", "replacement": r"Tell me who \1 is."},
            {"name": "brief", "template": "{question} Answer briefly."},
        ]
    )
    loaded = {"id": "b", "question": "Who is the CEO of X?", "answers": ["Z"]}
    assert perturbations(loaded, rewrites, 3) == [
        ("rewrite0", "Tell me who the CEO of X is."),
        ("brief", "Who is the CEO of X? Answer briefly."),
    ]
    other = {"id": "c", "question": "When was X founded?", "answers": ["1990"]}
    assert perturbations(other, rewrites, 3) == [("brief", "When was X founded? Answer briefly.")]  # no match
    assert perturbations(other, rewrites, 0) == []


@pytest.mark.parametrize(
    "rewrites, message",
    [
        ([{"pattern": "("}], "needs a 'replacement'"),
        ([{"pattern": "(", "replacement": "x"}], "invalid regular expression"),
        ([{"template": "Answer briefly."}], "must contain {question}"),
        ([{"pattern": "a", "replacement": "b", "template": "{question}"}], "either 'pattern'"),
        ([{"regex": "a"}], "unknown key"),
    ],
)
def test_bad_rewrites_fail_naming_the_entry(rewrites, message):
    with pytest.raises(ConfigError, match=r"eval.paraphrase_gap.rewrites\[0\].*" + message.replace("{", r"\{")):
        check_rewrites(rewrites)


def test_config_checks():
    cfg = EvalConfig()
    check_config(cfg)
    cfg.flip_rate.templates = 1
    with pytest.raises(ConfigError, match="eval.flip_rate.templates"):
        check_config(cfg)


@dataclass
class ScriptedContext(EvalContext):
    script: dict = None

    def answers(self, prompts):
        return [self.script.get(p, "??") for p in prompts]


def _item(item_id, question, gold, variants, kind="unchanged", split="private"):
    return {
        "id": item_id,
        "question": question,
        "answers": [gold],
        "set": kind,
        "split": split,
        "extra": {"variants": variants},
    }


def scripted(tmp_path, cfg=None):
    unchanged = [
        _item("u1", "U1 is", "a", ["U1 v0", "U1 v1"]),
        _item("u2", "U2 is", "b", ["U2 v0", "U2 v1"]),
        _item("u3", "U3 is", "c", []),
    ]
    updated = [_item("p1", "P1 is", "new", ["P1 v0", "P1 v1"], kind="updated")]
    outdated = [_item("o1", "P1 is", "old", ["P1 v0", "P1 v1"], kind="outdated")]
    sets = [
        EvalSet("unchanged", "unchanged", None, unchanged),
        EvalSet("updated_1", "updated", 1, updated),
        EvalSet("outdated_1", "outdated", 1, outdated),
        EvalSet("updated_2", "updated", 2, updated),
    ]
    script = {
        "Q: U1 is": "a",
        "Q: U1 v0": "a",
        "Q: U1 v1": "zz",  # u1: right, variants 1/2
        "Q: U2 is": "b",
        "Q: U2 v0": "x",
        "Q: U2 v1": "y",  # u2: right, variants 0/2
        "Q: P1 is": "new",
        "Q: P1 v0": "new",
        "Q: P1 v1": "New.",
    }  # p1: right, variants 2/2 (normalized)
    tl = Timeline(steps=[TimeStep(0, "0"), TimeStep(1, "1")], eval_sets=sets, prompt_template="Q: {question}")
    return ScriptedContext(timeline=tl, checkpoint=1, cfg=cfg or EvalConfig(), run_dir=tmp_path, script=script)


def test_paraphrase_gap_per_split_and_pooled_by_hand(tmp_path):
    rows = {r["set_name"]: r for r in paraphrase_gap_evaluator(scripted(tmp_path))}
    assert "updated_2" not in rows  # a later step's set is not evaluated at checkpoint 1
    u = rows["unchanged"]
    assert (u["n"], u["n_skipped"], u["k"]) == (2, 1, 2)  # u3 has no variant
    assert u["acc_original"] == 1.0 and u["acc_variants"] == [0.5, 0.0]
    assert u["paraphrase_gap"] == pytest.approx(0.75) and u["flagged"] is True and u["threshold"] == 0.03
    assert rows["updated_1"]["paraphrase_gap"] == 0.0 and rows["updated_1"]["flagged"] is False
    o = rows["outdated_1"]  # same prompts, the stale gold: never right
    assert (o["acc_original"], o["paraphrase_gap"]) == (0.0, 0.0)
    pooled = rows["all"]  # unchanged + updated (3 questions; variant means 0.5, 0, 1): 1 - 1.5/3
    assert pooled["n"] == 3 and pooled["paraphrase_gap"] == pytest.approx(0.5)
    spot = [json.loads(line) for line in (tmp_path / "paraphrase_spotcheck.jsonl").read_text().splitlines()]
    assert len(spot) == 6 and {r["set"] for r in spot} == {"unchanged", "updated_1"}  # outdated not spot-checked
    first = next(r for r in spot if r["id"] == "u1" and r["variant"] == "variant1")
    assert (
        first["original"],
        first["perturbed"],
        first["gold"],
        first["prediction_perturbed"],
        first["label_preserved"],
    ) == ("U1 is", "U1 v1", ["a"], "zz", None)


def test_spotcheck_keeps_other_checkpoints_and_its_size(tmp_path):
    cfg = EvalConfig()
    cfg.paraphrase_gap.spotcheck = 2
    ctx = scripted(tmp_path, cfg)
    paraphrase_gap_evaluator(ctx)
    ctx.checkpoint = 2
    paraphrase_gap_evaluator(ctx)
    ctx.checkpoint = 1
    paraphrase_gap_evaluator(ctx)  # a re-evaluation replaces its own checkpoint's sample
    spot = [json.loads(line) for line in (tmp_path / "paraphrase_spotcheck.jsonl").read_text().splitlines()]
    assert [r["checkpoint"] for r in spot] == [1, 1, 2, 2]


def test_flip_rate_per_split_and_pooled_by_hand(tmp_path):
    rows = {r["set_name"]: r for r in flip_rate_evaluator(scripted(tmp_path))}
    # u1: a, a, zz -> flips; u2: b, x, y -> flips; p1: new, new, "New." -> normalized equal: no flip
    assert rows["unchanged"]["flip_rate"] == 1.0 and rows["unchanged"]["k"] == 3
    assert rows["updated_1"]["flip_rate"] == 0.0 and rows["updated_1"]["samples"] == 1
    assert rows["all"]["flip_rate"] == pytest.approx(2 / 3) and rows["all"]["n"] == 3
    assert rows["all"]["flagged"] is True


def test_flip_rate_uses_k_templates(tmp_path):
    cfg = EvalConfig()
    cfg.flip_rate.templates = 2  # original + variant 0 only: u1 a/a, u2 b/x, p1 new/new
    rows = {r["set_name"]: r for r in flip_rate_evaluator(scripted(tmp_path, cfg))}
    assert rows["unchanged"]["flip_rate"] == 0.5 and rows["all"]["flip_rate"] == pytest.approx(1 / 3)


def test_sampled_flip_rate_takes_the_majority_of_n_repeats(tmp_path):
    cfg = EvalConfig()
    cfg.flip_rate.samples, cfg.flip_rate.templates = 3, 2
    samples = {
        "Q: U1 is": ["a", "b", "a"],
        "Q: U1 v0": ["b", "a", "a"],  # majorities a, a: no flip
        "Q: U2 is": ["b", "b", "x"],
        "Q: U2 v0": ["x", "x", "b"],  # b vs x: flip
        "Q: P1 is": ["new"] * 3,
        "Q: P1 v0": ["new", "old", "new"],
    }

    class SamplingFormat:  # EvalContext.samples asks the model's text format for n samples per prompt
        def sample(self, model, prompts, *, n, **kwargs):
            assert n == 3
            return [samples[p] for p in prompts]

    ctx = scripted(tmp_path, cfg)
    ctx.text_format = SamplingFormat()
    rows = {r["set_name"]: r for r in flip_rate_evaluator(ctx)}
    assert rows["unchanged"]["flip_rate"] == 0.5 and rows["unchanged"]["samples"] == 3
    assert rows["all"]["flip_rate"] == pytest.approx(1 / 3)


def test_text_format_sampling_returns_n_generations_per_prompt():
    from evolve_train.config import ModelConfig
    from evolve_train.models.text_format import CausalLMFormat
    from evolve_train.models.build import build_model, train_tokenizer

    texts = ["The director of Acme is Jane Roe.", "Heading Acme is Jane Roe.", "Acme is based in Oslo."] * 20
    tokenizer = train_tokenizer(texts, 120, "gpt2")
    model = build_model(ModelConfig(n_layer=1, n_embd=16, n_head=2, vocab_size=120), tokenizer)
    text_format = CausalLMFormat(tokenizer)
    out = text_format.sample(
        model, ["The director of Acme is", "Acme is based in"], n=3, temperature=1.0, seed=0, max_new_tokens=3
    )
    assert len(out) == 2 and all(len(group) == 3 for group in out)
    again = text_format.sample(
        model, ["The director of Acme is", "Acme is based in"], n=3, temperature=1.0, seed=0, max_new_tokens=3
    )
    assert out == again  # seeded
