"""The open-book evaluator in a tiny real run (three steps, the model before training too): rows, prompts that fit
the model, summary.json, W&B keys, the report's plot and table, and a bad passage file failing before training."""

import json

import pytest

from evolve_train.errors import DataError
from evolve_train.evaluation.evaluators.common import ALL
from evolve_train.evaluation.rows import load_run
from evolve_train.reporting import retrieval as report_retrieval
from evolve_train.reporting.report import build_report
from evolve_train.run import train
from evolve_train.tracking.wandb_logger import eval_payload
from helpers import tiny_cfg

EVALUATORS = "eval.evaluators=[splits,paired,retrieval]"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("retrieval_run")
    cfg = tiny_cfg(run_dir, EVALUATORS, "eval.eval_initial=true", "eval.max_new_tokens=4", "model.n_positions=64")
    summary = train(cfg)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return run_dir, summary, rows


def open_rows(rows):
    return [r for r in rows if r["group"] == "retrieval"]


def test_rows_at_every_checkpoint_and_the_initial_model_at_every_store(run):
    _, _, rows = run
    got = open_rows(rows)
    assert sorted({(r["checkpoint"], r["store"]) for r in got}) == [(-1, 0), (-1, 1), (-1, 2), (0, 0), (1, 1), (2, 2)]
    closed = {(r["checkpoint"], r["set_name"]): r["em"] for r in rows if r["group"] == "splits"}
    for r in got:
        if r["set"] not in ("paired", ALL):
            assert r["em"] == closed[(r["checkpoint"], r["set_name"])]  # the closed-book EM, the same scoring
            assert 0 <= r["em_open"] <= 1 and 0 <= r["recall@k"] <= 1 and r["k"] == 3 and r["scope"] == "all"
            assert r["em_open_ci"][0] <= r["em_open"] <= r["em_open_ci"][1]
            assert r["gap"] == pytest.approx(r["em_open"] - r["em"])
    assert any(r["set"] == "paired" and r["set_name"] == "paired_all" for r in got)
    # the stores are built when the initial model is evaluated, and reused by every checkpoint after it
    alls = {(r["checkpoint"], r["store"]): r for r in got if r["set_name"] == ALL}
    assert all(alls[(-1, k)]["index_seconds"] > 0 for k in range(3))
    assert all(alls[(k, k)]["index_seconds"] == 0.0 for k in range(3))


def test_prompts_fit_the_model_and_no_later_passage_is_retrieved(run):
    from evolve_train.models.build import load_tokenizer
    from evolve_train.config import ModelConfig

    run_dir, _, _ = run
    tokenizer = load_tokenizer(str(run_dir / "steps" / "2"), ModelConfig())
    files = sorted((run_dir / "predictions").rglob("open_book*/*.jsonl"))
    assert files
    cut = 0
    for path in files:
        store = (
            int(path.parent.name.removeprefix("open_book_store"))
            if "store" in path.parent.name
            else int(path.parent.parent.name.removeprefix("step_"))
        )
        for record in map(json.loads, path.read_text().splitlines()):
            assert len(tokenizer(record["prompt"], add_special_tokens=False)["input_ids"]) + 4 <= 64
            assert all(p["step"] <= store for p in record["retrieved"])
            cut += record["cut"]
    assert cut > 0  # three passages of the world do not fit in 64 positions: the cut was exercised


def test_summary_console_and_wandb_keys(run, capsys):
    run_dir, summary, rows = run
    part = summary["retrieval"]
    assert sorted(part["checkpoints"]) == ["0", "1", "2"] and sorted(part["initial"]) == ["0", "1", "2"]
    assert part["checkpoints"]["2"][ALL]["em_open"] == next(
        r["em_open"] for r in rows if r["group"] == "retrieval" and r["checkpoint"] == 2 and r["set_name"] == ALL
    )
    assert json.loads((run_dir / "summary.json").read_text())["retrieval"] == part
    payload = eval_payload(2, [r for r in rows if r["checkpoint"] == 2])
    assert "retrieval/all/em_open" in payload and "retrieval/updated_2/recall@k" in payload
    assert "retrieval/paired_all/update_adoption" in payload and "retrieval/all/em_open_ci_low" in payload
    initial = eval_payload(-1, [r for r in rows if r["checkpoint"] == -1])
    assert "retrieval/store_1/updated_1/em_open" in initial and "retrieval/store_1/all/em_open" in initial


def test_report_plots_closed_vs_open_per_split_and_tabulates(run, tmp_path):
    run_dir, _, rows = run
    report = build_report([run_dir], tmp_path / "report", ci=False)
    drawn = report["series"]["open_book"]
    assert set(drawn) == {"unchanged", "new", "updated", "outdated", ALL}
    label = "open"
    xs, ys = drawn["updated"][label]
    assert xs == [1.0, 2.0]  # Updated sets exist from step 1 on
    at2 = [r for r in open_rows(rows) if r["checkpoint"] == 2 and r["set"] == "updated"]
    expected = sum(r["em_open"] * r["n"] for r in at2) / sum(r["n"] for r in at2)  # pooled by questions
    assert ys[1] == pytest.approx(expected)
    assert drawn[ALL]["initial + retrieval"][0] == [0.0, 1.0, 2.0]
    assert drawn[ALL]["closed"][1] == pytest.approx(
        [next(r["em"] for r in open_rows(rows) if r["checkpoint"] == k and r["set_name"] == ALL) for k in range(3)]
    )
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "## Retrieval (open-book)" in markdown and "open_book.png" in markdown
    assert "initial + retrieval EM" in markdown and (tmp_path / "report" / "open_book.png").stat().st_size > 0
    header, table = report_retrieval.open_book_table([load_run(run_dir)])
    assert len(table) == len([r for r in open_rows(rows) if r["checkpoint"] >= 0 and r["set"] != "paired"])


def test_a_bad_passage_file_fails_before_training(tmp_path):
    bad = tmp_path / "passages.jsonl"
    bad.write_text('{"text": "fine", "step": 0}\n{"step": 1}\n')
    cfg = tiny_cfg(
        tmp_path / "run", EVALUATORS, "eval.retrieval.passages=files", f"eval.retrieval.passage_files=[{bad}]"
    )
    with pytest.raises(DataError, match="line 2, field 'text'"):
        train(cfg)
    assert not (tmp_path / "run" / "steps").exists() and not (tmp_path / "run" / "metrics.jsonl").exists()
