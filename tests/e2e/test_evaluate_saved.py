"""`evolve-eval`: evaluate saved checkpoints without training, idempotently, beside the training rows."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import pytest

from evolve_train.cli.evaluate import main as evolve_eval
from helpers import TINY, forked
from helpers.data import FIELDS, world_release


def tree_hashes(root: Path, skip: str | None = None) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not (skip and skip in p.relative_to(root).parts)
    }


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("saved") / "run"
    done = forked.python([sys.executable, "train.py", f"hydra.run.dir={run_dir}", *TINY, "eval.evaluators=[splits]"])
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


def test_adds_rows_for_the_asked_checkpoints_leaves_the_training_rows_and_is_idempotent(trained):
    before = tree_hashes(trained)
    assert evolve_eval([str(trained), "--steps", "0,2", "eval=full", "eval.flip_rate.templates=2"]) == 0
    out = trained / "evaluations" / "full"
    assert tree_hashes(trained, skip="evaluations") == before  # the run's own files, byte for byte
    added = rows(out / "metrics.jsonl")
    assert {r["checkpoint"] for r in added} == {0, 2}
    groups = {r["group"] for r in added}
    assert {"splits", "grad_norms", "paraphrase_gap", "flip_rate", "paired"} <= groups  # eval=full's evaluators
    # the same checkpoint scored again gives the training run's own EM (same model, same greedy decoding)
    trained_em = {
        (r["checkpoint"], r["set_name"]): r["em"] for r in rows(trained / "metrics.jsonl") if r["group"] == "splits"
    }
    for row in added:
        if row["group"] == "splits":
            assert row["em"] == trained_em[(row["checkpoint"], row["set_name"])]
    assert json.loads((out / "evaluation.json").read_text())["command"].startswith("evolve-eval ")
    snapshot = tree_hashes(trained)
    assert evolve_eval([str(trained), "--steps", "0,2", "eval=full", "eval.flip_rate.templates=2"]) == 0
    assert tree_hashes(trained) == snapshot  # a second run changes nothing


def test_a_run_dir_whose_name_holds_overrides_is_the_run_dir(trained, tmp_path):
    """A sweep's run dir names its overrides (``.../method.lora.r=4_<hash>/seed0``): given as the run dir it is
    read as one, not as a Hydra override."""
    import shutil

    tagged = tmp_path / "multirun" / "full" / "eval.evaluators=splits_0ab37dbb" / "seed0"
    shutil.copytree(trained, tagged)
    assert evolve_eval([str(tagged), "--steps", "2", "--name", "again", "eval.evaluators=[splits]"]) == 0
    added = rows(tagged / "evaluations" / "again" / "metrics.jsonl")
    assert {r["checkpoint"] for r in added} == {2}


def test_replace_rewrites_only_the_asked_checkpoints_rows(trained, tmp_path):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    original = rows(copy / "metrics.jsonl")
    assert evolve_eval([str(copy), "--steps", "1", "--replace", "eval.evaluators=[splits]"]) == 0
    replaced = rows(copy / "metrics.jsonl")
    keep = lambda rs, k: [r for r in rs if r["checkpoint"] != k]  # noqa: E731
    assert keep(replaced, 1) == keep(original, 1)
    strip = lambda r: {  # noqa: E731  (training metadata: not re-scored)
        k: v
        for k, v in r.items()
        if k
        not in (
            "eval_seconds",
            "train_seconds",
            "train_tokens",
            "train_tokens_per_s",
            "train_optimizer_steps",
            "optimizer_steps",
            "loss_tokens",
            "train_flops",
        )
    }
    assert [strip(r) for r in replaced if r["checkpoint"] == 1 and r["group"] == "splits"] == [
        strip(r) for r in original if r["checkpoint"] == 1 and r["group"] == "splits"
    ]


def test_scores_a_model_that_no_run_produced_on_another_timeline(trained, tmp_path):
    import shutil

    model_dir = tmp_path / "some_model"
    shutil.copytree(trained / "steps" / "1", model_dir)  # a plain HF model dir, outside any run
    data = tmp_path / "data"
    data.mkdir()
    counts = world_release(data)
    out = tmp_path / "scored"
    assert (
        evolve_eval(
            [
                f"model.name_or_path={model_dir}",
                "data=temporal_qa",
                f"data.root={data}",
                "+data.train_files.2018=[train_2018.jsonl]",
                "+data.train_files.2019=[train_2019.jsonl]",
                "data.eval_files=[qa.jsonl]",
                *[f"data.fields.{k}={v}" for k, v in FIELDS.items()],
                "eval.evaluators=[splits]",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    splits = {r["set_name"]: r for r in rows(out / "metrics.jsonl") if r["group"] == "splits"}
    assert splits["unchanged"]["n"] == counts["unchanged"] and splits["updated_1"]["n"] == counts["updated"]
    assert all(r["checkpoint"] == 1 for r in splits.values())  # the last step of that timeline
    assert (out / "summary.json").is_file() and (out / "predictions" / "step_1" / "unchanged.jsonl").is_file()


def test_a_model_dir_prints_its_knowledge_year(trained, tmp_path, capsys):
    model_dir = trained / "steps" / "1"  # a plain HF model dir, scored as the last step of the same timeline
    args = [f"model.name_or_path={model_dir}", *TINY, "eval.evaluators=[year_resolved,slices]"]
    assert evolve_eval([*args, "--out", str(tmp_path / "scored")]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("knowledge year @")]
    assert len(printed) == 1 and printed[0].startswith("knowledge year @ checkpoint 2: year_resolved "), printed
    assert re.search(r"year_resolved \d{4} \[\d{4}, \d{4}\] \(\d+ facts\)", printed[0]), printed
    assert "cutoff slice no cutoff found (the reference itself" in printed[0]  # one checkpoint: nothing to compare


def test_bad_requests_fail_clearly_before_writing(trained, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        evolve_eval([str(trained), "--steps", "7"])
    assert exit_info.value.code == 2 and "checkpoint 7" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        evolve_eval([str(tmp_path), "--steps", "0"])
    assert "overrides.yaml is missing" in capsys.readouterr().err
    assert not (trained / "evaluations" / "eval").exists()
