"""Extending the run from outside the package, by registration only (CONTRIBUTING.md "To add ..."): a hook, a
method's strategy, an LR schedule and an evaluator, defined here, run end to end through ``train`` without any
change to ``evolve_train``."""

import json

import pytest

from evolve_train.config import REGISTERED_SCHEDULES
from evolve_train.evaluation.registry import EVALUATORS, register_evaluator
from evolve_train.methods.base import STRATEGIES, Strategy, register_strategy
from evolve_train.run import train
from evolve_train.training.hooks import HOOKS, Hook, register_hook
from evolve_train.training.schedule import SHAPES, register_schedule
from helpers import tiny_cfg


CALLS: list[tuple] = []


class Recorder(Hook):
    """Records the run-level calls it gets, with their step or checkpoint."""

    def on_run_start(self, run):
        CALLS.append(("on_run_start", run.start))

    def on_train_start(self, trainer):
        CALLS.append(("on_train_start", trainer.step))

    def on_optimizer_step(self, trainer):
        CALLS.append(("on_optimizer_step", trainer.step))

    def on_step_trained(self, run, plan, result):
        CALLS.append(("on_step_trained", plan.step, result.optimizer_steps))

    def before_save(self, run, step):
        CALLS.append(("before_save", step))

    def after_evaluate(self, run, checkpoint, model):
        CALLS.append(("after_evaluate", checkpoint))


class HalfLR(Strategy):
    """Plans every later step at half the trainer's learning rate."""

    def plan_step(self, plan):
        if plan.step > 0:
            plan.lr = plan.trainer.lr / 2
        return plan


def quarter(cfg, time_step, t, total, warmup):
    return 0.25


def size_evaluator(ctx):
    return [{"checkpoint": ctx.checkpoint, "group": "corpus_size", "steps_seen": ctx.checkpoint + 1}]


@pytest.fixture
def registered():
    register_hook("recorder")(lambda cfg: Recorder())
    register_strategy("half_lr")(HalfLR)
    register_schedule("quarter")(quarter)
    register_evaluator("corpus_size")(size_evaluator)
    CALLS.clear()
    yield
    for registry, name in (
        (HOOKS, "recorder"),
        (STRATEGIES, "half_lr"),
        (SHAPES, "quarter"),
        (EVALUATORS, "corpus_size"),
    ):
        registry.pop(name)
    REGISTERED_SCHEDULES.discard("quarter")


def test_a_hook_a_method_a_schedule_and_an_evaluator_added_from_outside_run_end_to_end(tmp_path, registered):
    run_dir = tmp_path / "run"
    overrides = (
        "method.strategies=[full,half_lr]",
        "trainer.schedule=quarter",
        "trainer.step0_schedule=linear",
        "eval.evaluators=[splits,corpus_size]",
        "trainer.num_threads=1",
    )
    train(tiny_cfg(run_dir, *overrides))
    steps = range(3)
    # the hook: every step trained, saved and evaluated, in that order, once per checkpoint
    assert CALLS[0] == ("on_run_start", 0)
    for k in steps:
        trained = [c for c in CALLS if c[0] == "on_step_trained" and c[1] == k]
        assert len(trained) == 1 and trained[0][2] > 0
        updates = [c for c in CALLS if c == ("on_optimizer_step", k)]
        assert len(updates) == trained[0][2]  # called after every update
        order = [CALLS.index(c) for c in (("on_train_start", k), trained[0], ("before_save", k), ("after_evaluate", k))]
        assert order == sorted(order)
    # the strategy's plan and the schedule: later steps run at trainer.lr / 2 x 0.25 after their warmup
    log = [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    later = [r for r in log if r.get("time_step", 0) > 0 and "lr" in r and r["optimizer_step"] > 2]
    assert later and all(r["lr"] == pytest.approx(2e-3 / 2 * 0.25) for r in later)
    step0 = [r["lr"] for r in log if r.get("time_step") == 0 and "lr" in r]
    assert max(step0) > 2e-3 / 2  # step 0 keeps its own plan (full LR, linear)
    # the evaluator: its rows in metrics.jsonl for every checkpoint
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    mine = {r["checkpoint"]: r["steps_seen"] for r in rows if r.get("group") == "corpus_size"}
    assert mine == {k: k + 1 for k in steps}
