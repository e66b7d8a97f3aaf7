"""The row schema (evaluation/rows.py): one reader, one column order, unchanged bytes on disk, and one paired
comparison, so evolve-gate and evolve-report agree on the same two runs."""

from __future__ import annotations

import re


from evolve_train.cli.gate import gate
from evolve_train.cli.gate import main as gate_main
from evolve_train.cli.report import main as report_main
from evolve_train.reporting.report import build_report
from helpers.runs import make_run


def test_gate_and_report_give_the_same_difference_and_ci(tmp_path, capsys):
    run = make_run(tmp_path / "runs" / "lora", seed=0, method="lora", skill=0.7)
    base = make_run(tmp_path / "runs" / "full", seed=0, method="full", skill=0.5)
    flags = ["--bootstrap", "400", "--seed", "3"]
    gate_main([str(run), "--baseline", str(base), "--flip-rate-max", "none", "--paraphrase-gap-max", "none", *flags])
    gate_out = capsys.readouterr().out
    assert report_main([str(run), str(base), "--out", str(tmp_path / "report"), *flags]) == 0
    markdown = (tmp_path / "report" / "report.md").read_text()

    found = re.search(r"diff ([-+]\d\.\d{4}), 95% CI \[([-+]\d\.\d{4}), ([-+]\d\.\d{4})\]", gate_out)
    assert found, gate_out
    gate_numbers = [float(x) for x in found.groups()]
    row = re.search(
        r"^\| lora/seed0 \| full/seed0 \| all \| \d+ \| [\d.]+ \| [\d.]+ \| ([-+][\d.]+) \| "
        r"\[([-+][\d.]+), ([-+][\d.]+)\] \|",
        markdown,
        re.M,
    )
    assert row, markdown
    assert [float(x) for x in row.groups()] == [round(x, 3) for x in gate_numbers]
    assert any(abs(x) > 0.01 for x in gate_numbers)  # a difference that could disagree

    comparison = gate(run, base, seed=3, overrides={"bootstrap": 400})["comparison"]
    diffs = build_report([run, base], tmp_path / "again", B=400, seed=3)["diffs"]
    assert comparison == {d.column: d.stats() for d in diffs}  # every set and `all`: the same numbers
    assert list(comparison)[-1] == "all" and len(comparison) == 8
