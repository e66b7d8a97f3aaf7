"""evolve-gate: each check printed with value and threshold; exit 0 only when every check passes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evolve_train.cli.gate import main
from helpers.runs import fake_run


def hygiene_rows(checkpoint: int, flip: float | None, gap: float | None) -> list[dict]:
    rows = []
    if flip is not None:
        rows.append(
            {
                "group": "flip_rate",
                "checkpoint": checkpoint,
                "set": "splits",
                "set_name": "all",
                "set_step": None,
                "flip_rate": flip,
                "n": 10,
            }
        )
        rows.append(
            {
                "group": "flip_rate",
                "checkpoint": checkpoint - 1,
                "set": "splits",
                "set_name": "all",
                "set_step": None,
                "flip_rate": 0.9,
                "n": 10,
            }
        )  # an earlier checkpoint: ignored
    if gap is not None:
        rows.append(
            {
                "group": "paraphrase_gap",
                "checkpoint": checkpoint,
                "set": "splits",
                "set_name": "all",
                "set_step": None,
                "paraphrase_gap": gap,
                "n": 10,
            }
        )
    return rows


def good_outcomes(n_right: int, n: int = 40) -> dict[str, dict[str, int]]:
    unchanged = {f"u{k}": int(k < n_right) for k in range(n)}
    return {
        "unchanged": unchanged,
        "new_1": {"n1": 1, "n2": 0},
        "new_2": {"n3": 1, "n4": 1, "n5": 1, "n6": 0},
        "outdated_1": {"o1": 0},
    }


def check_line(output: str, name: str) -> tuple[str, str, str, str]:
    """(PASS|FAIL, value, op, threshold) of one check line."""
    match = re.search(rf"^\s+(PASS|FAIL)\s+{re.escape(name)}\s+(\S+(?: measured)?)\s+(\S+)\s+(\S+)$", output, re.M)
    assert match, f"no line for {name} in:\n{output}"
    return match.groups()


@pytest.fixture
def runs(tmp_path):
    run = fake_run(tmp_path / "lora", good_outcomes(36), extra_rows=hygiene_rows(2, 0.08, 0.05))
    base = fake_run(tmp_path / "full", good_outcomes(10), extra_rows=hygiene_rows(2, 0.02, 0.0))
    return run, base


def test_default_thresholds_each_check_printed_and_exit_status(runs, capsys):
    run, base = runs
    assert main([str(run)]) == 1  # paraphrase_gap 0.05 > 0.03
    out = capsys.readouterr().out
    assert check_line(out, "flip_rate") == ("PASS", "0.0800", "<=", "0.1")
    assert check_line(out, "paraphrase_gap") == ("FAIL", "0.0500", "<=", "0.03")
    assert "SKIP  bootstrap_ci_low" in out and "FAILED: 1/2 checks pass" in out
    assert main([str(run), "--paraphrase-gap-max", "0.06"]) == 0
    assert "PASSED: 2/2 checks pass" in capsys.readouterr().out


def test_baseline_ci_low_must_exceed_the_threshold(runs, capsys):
    run, base = runs
    assert main([str(run), "--baseline", str(base), "--paraphrase-gap-max", "0.06", "--bootstrap", "300"]) == 0
    out = capsys.readouterr().out
    status, value, op, threshold = check_line(out, "bootstrap_ci_low")
    assert status == "PASS" and op == ">" and float(threshold) == 0.0 and float(value) > 0
    assert "diff +0.5652" in out  # all = unchanged + new: (36+1+3)/46 - (10+1+3)/46 = 26/46
    # the other way round the baseline is better: CI low < 0 fails
    assert main([str(base), "--baseline", str(run), "--paraphrase-gap-max", "none", "--bootstrap", "300"]) == 1
    out = capsys.readouterr().out
    assert check_line(out, "bootstrap_ci_low")[0] == "FAIL" and "paraphrase_gap" not in out  # 'none' = off


def test_slice_floors_by_set_kind_and_all(runs, capsys):
    run, _ = runs
    # new_1 = 0.5; new (item-weighted over new_1 + new_2) = (1 + 3)/6; all = (36 + 1 + 3)/46
    assert (
        main(
            [
                str(run),
                "--paraphrase-gap-max",
                "none",
                "--slice-floor",
                "new_1=0.5",
                "--slice-floor",
                "new=0.7",
                "--slice-floor",
                "all=0.87",
            ]
        )
        == 1
    )
    out = capsys.readouterr().out
    assert check_line(out, "slice:new_1") == ("PASS", "0.5000", ">=", "0.5")
    assert check_line(out, "slice:new") == ("FAIL", "0.6667", ">=", "0.7")
    assert check_line(out, "slice:all") == ("FAIL", "0.8696", ">=", "0.87")  # 40/46 < 0.87
    assert main([str(run), "--paraphrase-gap-max", "none", "--slice-floor", "unknown_9=0.1"]) == 1
    assert check_line(capsys.readouterr().out, "slice:unknown_9")[:2] == ("FAIL", "not measured")


def test_thresholds_come_from_the_runs_config_and_flags_override(runs, capsys):
    run, _ = runs
    hydra = Path(run) / ".hydra"
    hydra.mkdir()
    (hydra / "config.yaml").write_text(
        "eval:\n  gate:\n    flip_rate_max: 0.05\n    paraphrase_gap_max: 0.1\n"
        "    slice_floors:\n      unchanged: 0.95\n"
    )
    assert main([str(run)]) == 1
    out = capsys.readouterr().out
    assert check_line(out, "flip_rate") == ("FAIL", "0.0800", "<=", "0.05")
    assert check_line(out, "paraphrase_gap")[0] == "PASS"
    assert check_line(out, "slice:unchanged") == ("FAIL", "0.9000", ">=", "0.95")
    assert main([str(run), "--flip-rate-max", "0.1", "--slice-floor", "unchanged=0.9"]) == 0


def test_an_unmeasured_check_fails_and_bad_input_exits_2(tmp_path, capsys):
    run = fake_run(tmp_path / "plain", good_outcomes(20))  # no flip_rate / paraphrase_gap rows
    assert main([str(run)]) == 1
    out = capsys.readouterr().out
    assert check_line(out, "flip_rate")[:2] == ("FAIL", "not measured")
    assert main([str(tmp_path / "nope")]) == 2
    assert "evolve-gate: error:" in capsys.readouterr().err
    other = fake_run(tmp_path / "other", {"unchanged": {"x": 1}}, extra_rows=hygiene_rows(2, 0.0, 0.0))
    assert main([str(other), "--baseline", str(run)]) == 2
    assert "different question sets" in capsys.readouterr().err


def test_a_run_written_under_the_former_names_is_gated_as_under_the_current_ones(tmp_path, capsys):
    """Rows of group ``contamination`` with key ``contamination_gap``, ``contamination_gap_max`` in the saved config
    and the former flag: read as the paraphrase gap."""
    former = [
        {**row, "group": "contamination", "contamination_gap": row.pop("paraphrase_gap")}
        if row["group"] == "paraphrase_gap"
        else row
        for row in hygiene_rows(2, 0.08, 0.05)
    ]
    run = fake_run(tmp_path / "old", good_outcomes(36), extra_rows=former)
    (run / ".hydra").mkdir()
    (run / ".hydra" / "config.yaml").write_text("eval:\n  gate:\n    contamination_gap_max: 0.1\n")
    assert main([str(run), "--flip-rate-max", "none"]) == 0
    assert check_line(capsys.readouterr().out, "paraphrase_gap") == ("PASS", "0.0500", "<=", "0.1")
    assert main([str(run), "--flip-rate-max", "none", "--contamination-gap-max", "0.04"]) == 1
    assert check_line(capsys.readouterr().out, "paraphrase_gap") == ("FAIL", "0.0500", "<=", "0.04")
