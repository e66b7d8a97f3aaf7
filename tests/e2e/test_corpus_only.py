"""A timeline of corpora without questions: three yearly folders of ``.txt`` documents (``data=temporal_qa``,
no ``data.eval_files``) train, and every checkpoint is evaluated by what needs no QA items — the time slices
(``slices``: P[i][j] of every step's held-out slice) and the held-out text (``heldout``, with its interval). The
report shows them and no QA section; ``evolve-data validate`` says which evaluators run and why the others
cannot, and an evaluator the command lists that needs QA items is refused before training, naming it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from evolve_train.cli.data import main as evolve_data
from evolve_train.reporting.report import build_report
from evolve_train.run import train
from evolve_train.tracking.wandb_logger import eval_payload
from helpers import read_jsonl, tiny_cfg

YEARS = ("2018", "2019", "2020")
QA_EVALUATORS = ("splits", "matrix", "paired", "ablation", "dimensions", "calibration", "paraphrase_gap", "flip_rate")


def write_corpora(root: Path) -> list[str]:
    """One folder of six short documents per year; the ``data.train_files`` overrides naming them."""
    for k, year in enumerate(YEARS):
        folder = root / year
        folder.mkdir(parents=True)
        for j in range(6):
            text = f"In {year} the workshop number {j} moved to harbour {k * 7 + j}. Its owner stayed."
            (folder / f"doc{j}.txt").write_text(text + "\n", encoding="utf-8")
    return [f"data.root={root}", "data=temporal_qa"] + [f"+data.train_files.{year}=[{year}]" for year in YEARS]


@pytest.fixture(scope="module")
def corpus_run(tmp_path_factory) -> tuple[Path, list[str]]:
    tmp = tmp_path_factory.mktemp("corpus_only")
    data = write_corpora(tmp / "data")
    run_dir = tmp / "run"
    cfg = tiny_cfg(run_dir, *data, "eval.heldout_text=[general]", "trainer.epochs_step0=2", "trainer.epochs=1")
    train(cfg)
    return run_dir, data


def test_every_checkpoint_has_slice_and_heldout_rows(corpus_run):
    run_dir, _ = corpus_run
    rows = read_jsonl(run_dir / "metrics.jsonl")
    groups = {row["group"] for row in rows}
    assert groups == {"slices", "heldout", "timing"}, groups
    for checkpoint in range(len(YEARS)):
        slices = [r for r in rows if r["group"] == "slices" and r["checkpoint"] == checkpoint]
        assert sorted(r["set_step"] for r in slices) == [0, 1, 2]  # backward, own and forward slices
        assert all(math.isfinite(r["nll"]) and r["tokens"] > 0 for r in slices)
        (heldout,) = [r for r in rows if r["group"] == "heldout" and r["checkpoint"] == checkpoint]
        low, high = heldout["perplexity_ci"]
        assert low <= heldout["perplexity"] <= high
        timing = next(r for r in rows if r["group"] == "timing" and r["checkpoint"] == checkpoint)
        assert set(timing["seconds"]) == {"heldout", "slices"}
    payload = eval_payload(0, [r for r in rows if r["checkpoint"] == 0])  # what W&B gets: no em/*
    assert "time/train_seconds" in payload and "slices/slice_1/nll" in payload
    assert not [key for key in payload if key.startswith(("em/", "f1/"))]


def test_the_report_shows_them_without_qa_sections(corpus_run, tmp_path):
    run_dir, _ = corpus_run
    built = build_report([run_dir], tmp_path / "report")
    text = built["markdown"].read_text(encoding="utf-8")
    assert "## Time-sliced aggregates" in text and "## Metrics: slices" in text
    assert "held-out perplexity (heldout)" in text
    for qa_section in ("## Final checkpoint", "## Per-step EM", "## Continual-learning metrics", "EM matrix"):
        assert qa_section not in text
    names = {path.name for path in built["figures"]}
    assert "forgetting_curves.png" not in names and any(name.startswith("slices_") for name in names)


def test_validate_says_which_evaluators_run(corpus_run, capsys):
    _, data = corpus_run
    assert evolve_data(["validate", *data]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("evaluators:"))
    assert line.startswith("evaluators: heldout, slices (not run: ")
    assert "no QA items (data.eval_files)" in line and all(name in line for name in QA_EVALUATORS)
    assert "0 eval sets" in out


def test_a_listed_evaluator_needing_questions_is_refused(corpus_run, capsys):
    _, data = corpus_run
    assert evolve_data(["validate", *data, "eval.evaluators=[slices,splits]"]) == 2
    err = capsys.readouterr().err
    assert "eval.evaluators lists 'splits', which cannot run: no QA items (data.eval_files)" in err
