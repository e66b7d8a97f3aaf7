"""The demo's self-check (evolve_train/reporting/demo_check.py): it reads a run's summary.json, says for each
figure whether it lies inside the documented band, and docs/results/demo.md quotes the ranges the check knows."""

from __future__ import annotations

import json
import re

from evolve_train.reporting import demo_check
from evolve_train.reporting.demo_check import BANDS, MEASURED, check_lines, figures
from helpers.processes import ROOT


def summary(unchanged0=0.99, new=(1.0, 1.0), updated=(1.0, 0.97), outdated=(0.0, 0.02)) -> dict:
    em = {"0": {"unchanged": unchanged0, "new_1": 0.0, "updated_1": 0.0, "outdated_1": 0.1}}
    for k in (1, 2):
        em[str(k)] = {
            "unchanged": 0.3,
            f"new_{k}": new[k - 1],
            f"updated_{k}": updated[k - 1],
            f"outdated_{k}": outdated[k - 1],
        }
    groups = {
        "paired": {"2": {"update_adoption": 0.01}},
        "ablation": {"2": {"timestamp_reliance": 0.08}},
        "paraphrase_gap": {"2": {"all": {"paraphrase_gap": 0.4}, "unchanged": {"paraphrase_gap": 0.3}}},
    }
    return {"em": em, "groups": groups}


def test_figures_take_the_worst_step_of_each_kind():
    got = figures(summary())
    assert got["Unchanged@0"] == 0.99 and got["Updated_k@k"] == 0.97 and got["Outdated_k@k"] == 0.02
    assert got["New_k@k"] == 1.0 and got["Unchanged@last"] == 0.3
    assert got["update_adoption@last"] == 0.01 and got["timestamp_reliance@last"] == 0.08
    assert got["paraphrase_gap@last"] == 0.4


def test_inside_the_bands_passes_and_outside_names_the_figure_and_the_readme():
    lines, ok = check_lines(summary())
    assert ok and all("OUTSIDE" not in line for line in lines)
    lines, ok = check_lines(summary(unchanged0=0.926, outdated=(0.0, 0.08)))
    assert not ok
    bad = [line for line in lines if "OUTSIDE" in line]
    assert len(bad) == 2 and bad[0].startswith("Unchanged@0 0.926 - OUTSIDE the documented 0.95-1.00")
    assert all("docs/results/demo.md, 'What varies'" in line for line in bad) and bad[1].startswith(
        "Outdated_k@k 0.080"
    )


def test_a_missing_banded_figure_fails_the_check():
    partial = summary()
    del partial["em"]["2"]["updated_2"], partial["em"]["1"]["updated_1"]
    lines, ok = check_lines(partial)
    assert not ok and "Updated_k@k: not in this run" in lines


def test_main_reads_a_run_dir(tmp_path, capsys):
    (tmp_path / "summary.json").write_text(json.dumps(summary(unchanged0=0.5)))
    assert demo_check.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Unchanged@0 0.500 - OUTSIDE" in out and "some figures are outside" in out
    assert demo_check.main([str(tmp_path / "nope")]) == 2


def test_the_demo_page_quotes_the_measured_ranges_and_bands():
    page = (ROOT / "docs" / "results" / "demo.md").read_text()
    section = page[page.index("## What varies") :]
    for name, (low, high) in MEASURED.items():
        assert re.search(rf"{re.escape(name)}\W[^\n]*{low:.3f}[–-]{high:.3f}", section), name
    for name, band in BANDS.items():
        assert re.search(rf"{re.escape(name)}\W[^\n]*{band.low:.2f}[–-]{band.high:.2f}", section), name
