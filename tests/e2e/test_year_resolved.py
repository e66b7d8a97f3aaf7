"""Year-resolved answers (docs/metrics.md "Year-resolved answers"): which year's value a checkpoint picks.

A hand-built timeline holds one fact with three values over three years (and one with two), answered by a
scripted model whose picks per checkpoint are fixed; the rows must equal the hand computation. A tiny run on the
embedded world then gets the rows at every checkpoint, and the report draws the checkpoint x year heatmap and a
knowledge-year line per checkpoint (a year with its interval, or no cutoff found).
"""

from __future__ import annotations

import json
import re

from evolve_train.run import train
from helpers import tiny_cfg

KNOWN = re.compile(r"\d{4} \[\d{4}, \d{4}\]|no cutoff found")
"""A knowledge year with its interval, or no cutoff found."""


def test_run_rows_and_the_report_heatmap(tmp_path):
    from evolve_train.reporting.report import build_report

    run_dir = tmp_path / "run"
    train(tiny_cfg(run_dir, "eval.evaluators=[splits,year_resolved]"))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    years = [r for r in rows if r.get("group") == "year_resolved" and r["set_name"] != "all"]
    summary = [r for r in rows if r.get("group") == "year_resolved" and r["set_name"] == "all"]
    assert sorted(r["checkpoint"] for r in summary) == [0, 1, 2]
    assert len({r["n"] for r in summary}) == 1 and summary[0]["n"] > 0  # the same facts at every checkpoint
    assert all(0.0 <= r["share_undated"] <= 1.0 and 0.0 <= r["dated_acc"] <= 1.0 for r in years)
    drawn = build_report([run_dir], tmp_path / "report", ci=False)
    (key,) = [k for k in drawn["series"] if k.startswith("year_resolved/")]
    heat = drawn["series"][key]
    assert heat["checkpoints"] == [0, 1, 2]
    cells = {(r["checkpoint"], r["year"]): r["share_undated"] for r in years}
    assert {
        (k, y): heat["share"][i][j] for i, k in enumerate(heat["checkpoints"]) for j, y in enumerate(heat["years"])
    } == cells
    assert any(p.name.startswith("years_") for p in drawn["figures"])
    report = (tmp_path / "report" / "report.md").read_text()
    section = report.split("## Knowledge year", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| run |")]
    assert [line.split(" | ")[1] for line in lines] == ["0", "1", "2"]  # a line per checkpoint
    assert all(KNOWN.search(line.split(" | ")[2]) for line in lines), lines
