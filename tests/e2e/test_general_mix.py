"""General documents mixed into every step after step 0 (``data.mix_files``, ``data.mix_ratio``;
``methods/mixing.py``, ``hooks/mixing.py``): the token share equals its hand computation."""

from __future__ import annotations

import json

import pytest
from helpers import tiny_cfg

from evolve_train.methods.mixing import row_tokens


def test_a_run_mixes_the_share_into_every_later_step(tmp_path):
    from evolve_train.models.build import load_tokenizer
    from evolve_train.models.text_format import make_text_format
    from evolve_train.run import ContinualRun
    from evolve_train.training.token_cache import step_tokenizer

    general = tmp_path / "general.jsonl"
    general.write_text(
        "".join(json.dumps({"text": f"General text {i}: the sky is blue and water is wet."}) + "\n" for i in range(40))
    )
    run_dir = tmp_path / "run"
    cfg = tiny_cfg(run_dir, "eval.evaluators=[splits]", f"+data.mix_files=[{general}]", "data.mix_ratio=0.2")
    run = ContinualRun(cfg)
    run.run()
    rows = [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    mixed = [r for r in rows if r.get("group") == "mix"]
    assert [r["time_step"] for r in mixed] == [1, 2]  # every later step, never step 0
    text_format = make_text_format(load_tokenizer(str(run_dir / "steps" / "0"), run.cfg.model))
    tokenize = step_tokenizer(run.cfg, text_format)
    for row in mixed:
        own = row_tokens(tokenize(run.timeline.steps[row["time_step"]]))  # the step's own rows, by hand
        assert row["step_tokens"] == own
        assert row["mix_tokens"] == round(0.2 / 0.8 * own)
        assert row["mix_share"] == pytest.approx(row["mix_tokens"] / (own + row["mix_tokens"]), abs=1e-6)
        assert abs(row["mix_share"] - 0.2) < 1 / own
        assert row["mix_trained_tokens"] == round(row["trained_tokens"] * row["mix_share"])
        assert row["source"] == "files" and row["mix_train_flops"] > 0
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert not any("mix" in str(r.get("set_name", "")) for r in metrics)  # never evaluated as a step
    for row in mixed:  # the checkpoint's metric rows carry the step's mix counts
        at = [r for r in metrics if r.get("checkpoint") == row["time_step"] and "train_tokens" in r]
        assert at and all(r["mix_source"] == "files" and r["mix_tokens"] == row["mix_tokens"] for r in at)
        assert all(r["mix_share"] == row["mix_share"] and r["mix_train_flops"] == row["mix_train_flops"] for r in at)
    assert not any("mix_tokens" in r for r in metrics if r.get("checkpoint") == 0)
    from evolve_train.reporting.runs import load_runs
    from evolve_train.reporting.timesliced import compute_table

    header, table = compute_table(load_runs([run_dir]))  # the report's compute table shows the mix per step
    column = header.index("mix tokens")
    assert [line[column] for line in table] == ["-"] + [str(row["mix_tokens"]) for row in mixed]
