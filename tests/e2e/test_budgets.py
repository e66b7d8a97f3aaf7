"""Step and token budgets instead of epochs, a learning rate per method for the later steps, progress lines
without a terminal, and no step that loops without batches."""

import json

from accelerate import Accelerator

from evolve_train.run import train
from evolve_train.training.examples import collate
from evolve_train.training.loop import train_time_step
from evolve_train.training.plan import StepPlan
from helpers import deadline, tiny_cfg
from helpers.methods import PAD, method, one_thread, tiny_gpt2, token_rows, trainer_cfg


def plan(examples, strategies=None, **settings):
    trainer = {k: settings.pop(k) for k in list(settings) if k in ("progress_every_s", "log_every", "grad_accum")}
    return StepPlan(
        step=1,
        trainer=trainer_cfg(**trainer),
        examples=examples,
        epochs=settings.pop("epochs", 2),
        strategies=strategies or method("full"),
        collate=lambda rows: collate(rows, PAD),
        seed=5,
        **settings,
    )


def test_a_step_budget_sets_the_optimizer_steps_and_a_token_budget_the_tokens():
    examples = token_rows(64, 2, 20, seed=3)  # 64 rows, 4 batches of 16 an epoch
    real = sum(len(r) for r in examples["input_ids"])
    with one_thread(), deadline(120):
        by_steps = train_time_step(plan(examples, max_steps=7), tiny_gpt2(), Accelerator(cpu=True))
        by_tokens = train_time_step(plan(examples, max_tokens=real * 3 // 2), tiny_gpt2(), Accelerator(cpu=True))
        capped = train_time_step(plan(examples, max_tokens=real * 3, max_steps=5), tiny_gpt2(), Accelerator(cpu=True))
    assert by_steps.optimizer_steps == 7  # not the 2 epochs' 8: the budget decides
    assert by_tokens.optimizer_steps == 6  # 1.5 passes of 4 batches
    assert real * 3 // 2 <= by_tokens.tokens < real * 3 // 2 + real // 2  # within the last batch of the budget
    assert capped.optimizer_steps == 5


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_method_lr_changes_the_later_steps_and_shares_step_0_through_the_cache(tmp_path):
    cache = tmp_path / "cache"
    common = ("method=lora", "trainer.num_threads=1", f"method.step0_cache={cache}", "trainer.max_steps=4")
    train(tiny_cfg(tmp_path / "a", *common))
    train(tiny_cfg(tmp_path / "b", *common, "method.lr=5e-3"))
    a, b = read(tmp_path / "a" / "train_log.jsonl"), read(tmp_path / "b" / "train_log.jsonl")
    assert all(r.get("from_step0_cache") for r in b if r.get("time_step") == 0)  # step 0: loaded, not retrained
    assert [r["lr"] for r in a if r.get("time_step") == 0] == [r["lr"] for r in b if r.get("time_step") == 0]
    peak = {name: max(r["lr"] for r in rows if r.get("time_step") == 1) for name, rows in (("a", a), ("b", b))}
    assert peak["a"] <= 2e-3 < peak["b"] <= 5e-3  # trainer.lr (tests/helpers.py TINY) vs method.lr
    rows = read(tmp_path / "b" / "metrics.jsonl")
    later = [r for r in rows if r["checkpoint"] >= 1]
    assert later and all(r["train_optimizer_steps"] == 4 and r["train_budget"] == {"max_steps": 4} for r in later)
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["budget"] == {"max_steps": 4}
