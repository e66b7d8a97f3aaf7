"""``lwf``: distillation toward the previous step's model on the current batch (methods/lwf.py)."""

from __future__ import annotations

import json

import torch
from helpers.methods import make_history, method, one_thread, run_step, snapshot, tiny_gpt2, token_rows


def test_lwf_keeps_the_model_closer_to_the_previous_step_and_combines_with_lora():
    old, new = token_rows(48, 2, 30, seed=1), token_rows(48, 34, 64, seed=2)
    with one_thread():
        start = tiny_gpt2()
        before = snapshot(start)
        drifts = {}
        for name, strategies, sections in (
            ("full", ("full",), {}),
            ("lwf", ("full", "lwf"), {"lwf": {"weight": 20.0}}),
        ):
            model = tiny_gpt2()
            trained, _ = run_step(model, new, method(*strategies, **sections), make_history([old]), step=1)
            with torch.no_grad():
                drifts[name] = float(sum(((trained.get_parameter(n) - before[n]) ** 2).sum() for n in before) ** 0.5)
        lora = method("lora", "lwf")
        model, _ = run_step(tiny_gpt2(), new, lora, make_history([old]), step=1)
    assert drifts["lwf"] < drifts["full"], drifts
    assert lora.strategies[1].teacher is None  # freed after the step
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in start.parameters())  # merged back


def test_a_run_with_lwf_trains_and_logs_the_teacher(tmp_path, caplog):
    import logging

    from helpers import tiny_cfg

    from evolve_train.run import train

    threads = torch.get_num_threads()
    caplog.set_level(logging.INFO)
    train(tiny_cfg(tmp_path, "method=lwf", "eval.evaluators=[splits]", "data.world.n_steps=2"))
    torch.set_num_threads(threads)
    assert "lwf (step 1): teacher" in caplog.text
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert {r["checkpoint"] for r in rows} == {0, 1} and {r["method"] for r in rows} == {"lwf"}
