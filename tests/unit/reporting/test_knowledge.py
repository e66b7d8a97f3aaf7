"""The knowledge-year lines and report table (reporting/knowledge.py) from a summary and year_resolved rows."""

import json
from pathlib import Path

from evolve_train.evaluation.rows import Run
from evolve_train.reporting.knowledge import NO_CUTOFF, format_knowledge, knowledge_rows, knowledge_table, run_knowledge

STEPS = ["2018", "2019", "2020"]
CUTOFF = [
    {
        "checkpoint": 0,
        "cutoff_slice": 0,
        "lo": 0,
        "hi": 1,
        "jump": 0.4,
        "method": "loss_jump_vs_reference",
        "reason": "",
    },
    {"checkpoint": 1, "cutoff_slice": 1, "lo": None, "hi": None, "jump": 0.3, "method": "x", "reason": ""},
    {"checkpoint": 2, "cutoff_slice": None, "lo": None, "hi": None, "jump": 0.0, "method": "x", "reason": "flat"},
]
RESOLVED = {"0": {"year": 2018, "ci": [2018, 2019], "n": 12}, "1": {"year": None, "ci": None, "n": 0}}


def summary(cutoff=CUTOFF) -> dict:
    return {"steps": STEPS, "knowledge": RESOLVED, "timesliced": {"nll": {"P": {}, "cutoff": cutoff}}}


def test_one_line_per_checkpoint_with_an_interval_or_no_cutoff():
    lines = format_knowledge(summary()).splitlines()
    assert lines == [
        "knowledge year @ checkpoint 0: year_resolved 2018 [2018, 2019] (12 facts); "
        "cutoff slice 2018 [2018, 2019] (slice NLL against checkpoint 2)",
        f"knowledge year @ checkpoint 1: year_resolved {NO_CUTOFF} (no fact with two values); "
        "cutoff slice 2019 (no interval) (slice NLL against checkpoint 2)",
        f"knowledge year @ checkpoint 2: cutoff slice {NO_CUTOFF} (flat; slice NLL against checkpoint 2)",
    ]
    assert format_knowledge({"steps": STEPS}) == ""


def test_the_slice_rows_are_recomputed_from_P_for_an_older_summary():
    P = {str(i): {str(j): (2.0 if j <= i else 3.0) for j in range(3)} for i in range(3)}
    old = {"steps": STEPS, "timesliced": {"nll": {"P": P}}}
    assert [cut.split(" (")[0] for _, _, cut in knowledge_rows(old)] == ["2018", "2019", NO_CUTOFF]


def test_the_report_table_reads_the_rows_of_a_run():
    rows = [
        {
            "group": "year_resolved",
            "set_name": "all",
            "checkpoint": 2,
            "knowledge_year": 2020,
            "knowledge_year_ci": [2019, 2020],
            "n": 5,
        },
        {"group": "year_resolved", "set_name": "2019", "checkpoint": 2, "n": 5},
    ]
    run = Run(path=Path("r"), rows=rows, summary={"steps": STEPS}, label="full")
    header, table = knowledge_table([run])
    assert len(header) == 4 and table == [["full", "2", "2020 [2019, 2020] (5 facts)", "-"]]
    assert knowledge_table([Run(path=Path("r"), rows=[], summary={}, label="x")]) is None


def test_run_knowledge_reads_a_run_dir(tmp_path):
    assert run_knowledge(tmp_path) == ""  # nothing evaluated there
    (tmp_path / "summary.json").write_text(json.dumps(summary()))
    row = {"group": "year_resolved", "set": "year_resolved", "set_name": "all", "checkpoint": 0, "step_name": "2018"}
    row.update(knowledge_year=2019, knowledge_year_ci=[2018, 2019], n=4)
    (tmp_path / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    lines = run_knowledge(tmp_path).splitlines()
    assert lines[0].startswith("knowledge year @ checkpoint 0: year_resolved 2019 [2018, 2019] (4 facts); ")
    assert len(lines) == 3
