"""``paraphrase_gap`` and ``flip_rate`` (docs/metrics.md#8-statistics-and-hygiene) on hand-computed cases, and on a real tiny run."""

from __future__ import annotations

import json


from evolve_train.run import train
from helpers import tiny_cfg


def test_a_run_reports_gap_and_flip_rate_per_split_per_checkpoint_and_records_private_evaluations(tmp_path):
    run_dir = tmp_path / "run"
    train(
        tiny_cfg(
            run_dir,
            "data.world.n_steps=2",
            "eval.evaluators=[splits,paraphrase_gap,flip_rate]",
            "trainer.num_threads=1",
            "eval.forward_transfer=false",
        )
    )
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for group, key in (("paraphrase_gap", "paraphrase_gap"), ("flip_rate", "flip_rate")):
        got = {(r["checkpoint"], r["set_name"]) for r in rows if r["group"] == group and r[key] is not None}
        assert got == {
            (0, "unchanged"),
            (0, "all"),
            (1, "unchanged"),
            (1, "new_1"),
            (1, "updated_1"),
            (1, "outdated_1"),
            (1, "all"),
        }
    k = {r["k"] for r in rows if r["group"] == "flip_rate" and r["n"]}
    assert k == {4}  # the original and the 3 held-out phrasings
    private = [json.loads(line) for line in (run_dir / "private_evaluations.jsonl").read_text().splitlines()]
    assert {(r["checkpoint"], r["set"]) for r in private} == {
        (0, "unchanged"),
        (1, "unchanged"),
        (1, "new_1"),
        (1, "updated_1"),
        (1, "outdated_1"),
    }
    splits = {(r["checkpoint"], r["set_name"]): r["n"] for r in rows if r["group"] == "splits"}
    for record in private:
        assert 0 < record["count"] <= splits[(record["checkpoint"], record["set"])] == record["n"]
    summary = json.loads((run_dir / "summary.json").read_text())
    for group, key in (("paraphrase_gap", "paraphrase_gap"), ("flip_rate", "flip_rate")):
        assert set(summary["groups"][group]["1"]) == {"unchanged", "new_1", "updated_1", "outdated_1", "all"}
        pooled = next(r for r in rows if r["group"] == group and r["checkpoint"] == 1 and r["set_name"] == "all")
        assert summary["groups"][group]["1"]["all"][key] == pooled[key]
    from evolve_train.reporting.summary import format_summary_table

    printed = format_summary_table(summary)
    assert "paraphrase_gap @ checkpoint 1: unchanged=" in printed and "flip_rate @ checkpoint 1: unchanged=" in printed
    spot = (run_dir / "paraphrase_spotcheck.jsonl").read_text().splitlines()
    assert {json.loads(line)["checkpoint"] for line in spot} == {0, 1}
