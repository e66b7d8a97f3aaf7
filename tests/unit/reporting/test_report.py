"""`evolve-report` / `write_report`: plots, Markdown/HTML, paired-bootstrap CIs and the errors.

Two kinds of runs: real tiny runs (end to end; their EM is mostly 0) and synthetic run dirs written in the
same layout with non-trivial EM, so plotted points and CIs are checked on numbers that can differ.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolve_train.cli.report import main
from evolve_train.tracking.disk import read_jsonl
from helpers.runs import make_run


@pytest.fixture
def synth(tmp_path) -> list[Path]:
    sweep = tmp_path / "synth" / "multirun"
    return [make_run(sweep / "full" / "seed0", 0, "full", 0.7), make_run(sweep / "lora" / "seed0", 0, "lora", 0.4)]


def test_incomplete_run_dirs_exit_2_naming_the_file(synth, tmp_path, capsys):
    (synth[1] / "summary.json").unlink()
    assert main([str(synth[0]), str(synth[1]), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert str(synth[1]) in err and "summary.json" in err
    (synth[1] / "metrics.jsonl").unlink()
    assert main([str(synth[1]), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert str(synth[1]) in err and "metrics.jsonl" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([str(empty), "--out", str(tmp_path / "o")]) == 2
    assert "empty" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # nothing written on error


def test_a_sweep_dir_leaves_out_the_evaluations_inside_its_runs(synth):
    """``evolve-eval --name X`` writes rows (here retrieval only, no splits) into ``<run>/evaluations/X/``: the
    sweep dir expands to its runs, not to those evaluations (which a report of the sweep would refuse)."""
    from evolve_train.reporting.runs import expand_run_dirs

    extra = synth[0] / "evaluations" / "stale_all"
    extra.mkdir(parents=True)
    (extra / "metrics.jsonl").write_text(json.dumps({"group": "retrieval", "checkpoint": 2}) + "\n")
    sweep = synth[0].parents[1]
    assert expand_run_dirs([sweep]) == sorted(p.resolve() for p in synth)
    assert expand_run_dirs([extra]) == [extra.resolve()]  # named itself, it is taken as given


def test_runs_on_different_questions_are_not_comparable(synth, tmp_path, capsys):
    path = synth[1] / "predictions" / "step_2" / "updated_1.jsonl"
    rows = read_jsonl(path)
    rows[3]["id"] = "updated_1/another-question"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main([str(synth[0]), str(synth[1]), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "not comparable" in err and "'updated_1'" in err and "updated_1/another-question" in err
