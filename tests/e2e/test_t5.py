"""Seq2seq (T5): the masked-entity pairs in sentinel format, generation in the same format, end to end."""

from __future__ import annotations

import json


from evolve_train.run import train
from helpers import tiny_cfg


def test_t5_small_runs_end_to_end_on_the_tiny_config(tmp_path):
    run_dir = tmp_path / "run"
    train(
        tiny_cfg(
            run_dir,
            "model=t5_small",
            "model.n_layer=1",
            "model.n_embd=32",
            "model.n_head=2",
            "model.vocab_size=300",
            "trainer.epochs_step0=1",
            "trainer.num_threads=1",
            "trainer.epochs=1",
            "eval.max_new_tokens=4",
            "eval.evaluators=[splits]",
            "eval.forward_transfer=false",
        )
    )
    config = json.loads((run_dir / "steps" / "2" / "config.json").read_text())
    assert config["model_type"] == "t5"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    sets = {(r["checkpoint"], r["set_name"]) for r in rows if r.get("group") == "splits"}
    assert {
        (2, name) for name in ("unchanged", "new_1", "updated_1", "outdated_1", "new_2", "updated_2", "outdated_2")
    } <= sets
    record = json.loads((run_dir / "predictions" / "step_0" / "unchanged.jsonl").read_text().splitlines()[0])
    assert "<extra_id_0>" not in record["generation"]  # sentinels are special tokens, skipped in decoding
