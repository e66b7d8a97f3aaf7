"""`evolve-eval --series`: models trained elsewhere scored as the checkpoints of one run dir, resumably.

A tiny run's own ``steps/0..2`` as a series give the run's own rows (every evaluator that needs no training
state); an interrupted series goes on at the next entry; a changed entry or config is refused; hub entries
(``id@revision``) reach ``from_pretrained`` as ``revision=``; one model is in memory at a time; a series prints
a knowledge year per checkpoint; the report draws the run's plots and a knowledge-year line per checkpoint.
"""

from __future__ import annotations

import gc
import hashlib
import json
import re
import weakref
from pathlib import Path

import pytest

from evolve_train import saved_eval
from evolve_train.cli.evaluate import main as evolve_eval
from evolve_train.cli.report import main as evolve_report
from evolve_train.config import ModelConfig
from evolve_train.errors import ConfigError
from evolve_train.run import train
from evolve_train.saved_eval import SeriesEntry, parse_entry, read_series_file
from helpers import TINY, tiny_cfg, wall_clock

EVALUATORS = "eval.evaluators=[splits,matrix,paired,slices,year_resolved]"
SETTINGS = [*TINY, EVALUATORS]
TRAINING_KEYS = {
    "train_seconds",
    "eval_seconds",
    "train_tokens",
    "train_tokens_per_s",
    "train_optimizer_steps",
    "optimizer_steps",
    "loss_tokens",
    "train_flops",
    "skipped_batches",
    "train_budget",
}
"""Metadata of the training that made a checkpoint (a series has none) and the evaluation's duration."""
TRAINING_PLOTS = {"training_loss.png", "retention_vs_flops.png"}
"""Plots of the training log and of the training FLOPs: a series holds neither."""
KNOWN = re.compile(r"\d{4} \[\d{4}, \d{4}\]|no cutoff found")
"""A knowledge year (or cutoff slice) with its interval, or no cutoff found."""


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def scored(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in TRAINING_KEYS and not wall_clock(k)}


def tree_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("series") / "run"
    train(tiny_cfg(run_dir, EVALUATORS))
    return run_dir


def entries(run_dir: Path, n: int = 3) -> list[str]:
    return [str(run_dir / "steps" / str(k)) for k in range(n)]


def series(run_dir: Path, out: Path, n: int = 3, *extra: str) -> int:
    return evolve_eval(["--series", *entries(run_dir, n), "--out", str(out), *SETTINGS, *extra])


@pytest.fixture(scope="module")
def scored_series(trained, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("series_out") / "series"
    assert series(trained, out) == 0
    return out


@pytest.fixture
def loads(monkeypatch) -> list[tuple[str, object]]:
    """Every model the series loads, as (path, revision); each one is gone before the next is loaded."""
    seen: list[tuple[str, object]] = []
    alive: list[weakref.ref] = []
    real = saved_eval.load_model

    def counted(path, cfg, revision=None, device=None):
        gc.collect()
        assert all(ref() is None for ref in alive), "the previous entry's model is still in memory"
        seen.append((Path(path).name if Path(path).is_absolute() else path, revision))
        model = real(path, cfg, revision=revision, device=device)
        alive.append(weakref.ref(model))
        return model

    monkeypatch.setattr(saved_eval, "load_model", counted)
    return seen


def test_a_runs_own_steps_as_a_series_give_the_runs_own_rows(trained, scored_series):
    out = scored_series
    own = [scored(r) for r in rows(trained / "metrics.jsonl")]
    again = [scored(r) for r in rows(out / "metrics.jsonl")]
    groups = {r["group"] for r in own}
    assert {"splits", "matrix", "paired", "slices"} <= groups
    for group in groups:
        assert [r for r in again if r["group"] == group] == [r for r in own if r["group"] == group], group
    assert len(again) == len(own)
    assert json.loads((out / "state.json").read_text())["evaluated"] == [0, 1, 2]
    for name in ("summary.json", ".hydra/config.yaml", "predictions/step_2/unchanged.jsonl"):
        assert (out / name).is_file(), name
    assert (trained / "predictions/step_2/unchanged.jsonl").read_text() == (
        out / "predictions/step_2/unchanged.jsonl"
    ).read_text()
    meta = json.loads((out / "evaluation.json").read_text())
    assert meta["command"].startswith("evolve-eval --series ")
    summary, own_summary = (json.loads((d / "summary.json").read_text()) for d in (out, trained))
    assert [e["step_name"] for e in meta["series"]] == own_summary["steps"] == ["2018", "2019", "2020"]
    assert summary["em"] == own_summary["em"] and summary["steps"] == own_summary["steps"]
    assert [e["model"] for e in meta["series"]] == entries(trained)
    assert meta["fingerprint"] == json.loads((out / "state.json").read_text())["identity"]["fingerprint"]


def test_an_interrupted_series_goes_on_at_the_next_entry_and_a_second_call_changes_nothing(
    trained, scored_series, tmp_path, monkeypatch, loads
):
    out = tmp_path / "series"
    real = saved_eval.load_model

    def failing(path, cfg, revision=None, device=None):
        if Path(path).name == "2":
            raise RuntimeError("interrupted at entry 2")
        return real(path, cfg, revision=revision, device=device)

    monkeypatch.setattr(saved_eval, "load_model", failing)
    with pytest.raises(RuntimeError, match="entry 2"):
        series(trained, out)
    assert [name for name, _ in loads] == ["0", "1"]
    assert json.loads((out / "state.json").read_text())["evaluated"] == [0, 1]
    monkeypatch.setattr(saved_eval, "load_model", real)

    loads.clear()
    assert series(trained, out) == 0
    assert [name for name, _ in loads] == ["2"]  # entries 0 and 1 are not loaded again
    assert [scored(r) for r in rows(out / "metrics.jsonl")] == [
        scored(r) for r in rows(scored_series / "metrics.jsonl")
    ]
    before = tree_hashes(out)
    loads.clear()
    assert series(trained, out) == 0
    assert loads == [] and tree_hashes(out) == before


def test_a_series_given_the_first_steps_grows_by_the_next(trained, tmp_path, loads, capsys):
    out = tmp_path / "series"
    assert series(trained, out, 2) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("knowledge year @")]
    assert [line.split(":")[0] for line in printed] == [
        "knowledge year @ checkpoint 0",
        "knowledge year @ checkpoint 1",
    ]
    for line in printed:  # each estimate: a year with its interval, or no cutoff found
        assert len(KNOWN.findall(line)) == 2, line
    assert {r["checkpoint"] for r in rows(out / "metrics.jsonl")} == {0, 1}
    assert series(trained, out, 3) == 0
    assert [name for name, _ in loads] == ["0", "1", "2"]
    assert len(json.loads((out / "evaluation.json").read_text())["series"]) == 3
    loads.clear()
    assert series(trained, out, 2) == 0  # a prefix of what is there: nothing to do
    assert loads == []


def test_changed_entries_config_or_length_are_refused_before_writing(trained, scored_series, capsys):
    out = scored_series
    before = tree_hashes(out)
    swapped = entries(trained)
    swapped[1] = swapped[0]
    for argv, said in [
        (["--series", *swapped, "--out", str(out), *SETTINGS], "entry 1:"),
        (["--series", *entries(trained), "--out", str(out), *SETTINGS, "eval.max_new_tokens=8"], "eval.max_new_tokens"),
        (["--series", *entries(trained), entries(trained)[0], "--out", str(out), *SETTINGS], "4 entries"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            evolve_eval(argv)
        assert exit_info.value.code == 2
        assert said in capsys.readouterr().err
    listed = out.parent / "named.yaml"  # a step name the timeline does not have at that position
    listed.write_text("".join(f"- {{model: {e}, name: {2019 + k}}}\n" for k, e in enumerate(entries(trained))))
    with pytest.raises(SystemExit):
        evolve_eval(["--series-file", str(listed), "--out", str(out), *SETTINGS])
    assert "named '2019', but time step 0 of the timeline is '2018'" in capsys.readouterr().err
    assert tree_hashes(out) == before
    # runtime settings may differ (threads, loggers): the same series, nothing to do
    assert series(trained, out, 3, "trainer.num_threads=2") == 0
    assert tree_hashes(out) == before


def test_usage_errors(trained, tmp_path, capsys):
    for argv in (
        ["--series", *entries(trained), *SETTINGS],  # no --out
        [str(trained), "--series", *entries(trained), "--out", str(tmp_path / "o")],
        ["--series", *entries(trained), "--steps", "1", "--out", str(tmp_path / "o")],
        ["--series", "no/such/dir/here", "--out", str(tmp_path / "o"), *SETTINGS],
    ):
        with pytest.raises(SystemExit) as exit_info:
            evolve_eval(argv)
        assert exit_info.value.code == 2, argv
    err = capsys.readouterr().err
    assert "--out" in err and "no run dir" in err and "--steps" in err and "--series entry 0" in err
    assert not (tmp_path / "o").exists()


def test_entries_local_dirs_hub_ids_and_revisions(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpt").mkdir()
    assert parse_entry("ckpt") == SeriesEntry(model=str(tmp_path / "ckpt"))
    assert parse_entry("EleutherAI/pythia-160m@step143000") == SeriesEntry("EleutherAI/pythia-160m", "step143000")
    assert parse_entry("EleutherAI/pythia-160m") == SeriesEntry("EleutherAI/pythia-160m")
    assert parse_entry("./missing@v1").model == str(tmp_path / "missing@v1")  # a path: the source check fails it
    for bad in ("org/name@", "not a model", "org/na me@v1"):
        with pytest.raises(ConfigError):
            parse_entry(bad)
    listed = tmp_path / "lists" / "series.yaml"
    listed.parent.mkdir()
    (listed.parent / "y2019").mkdir()
    listed.write_text(
        "- y2019\n- {model: org/yearly, revision: 2020, name: 2020, date: 2020-12-31}\n- org/yearly@y2021\n"
    )
    assert read_series_file(listed) == [
        SeriesEntry(str(listed.parent / "y2019")),  # relative to the file's dir
        SeriesEntry("org/yearly", "2020", "2020", "2020-12-31"),
        SeriesEntry("org/yearly", "y2021"),
    ]
    as_json = tmp_path / "series.json"
    as_json.write_text(json.dumps([{"model": "org/m", "revision": "main"}]))
    assert read_series_file(as_json) == [SeriesEntry("org/m", "main")]
    for text in ("{model: org/m}", "[{model: org/m, step: 3}]", "[{model: org/m@a, revision: b}]", "[]"):
        as_json.write_text(text)
        with pytest.raises(ConfigError):
            read_series_file(as_json)


def test_hub_entries_reach_from_pretrained_with_their_revision(trained, tmp_path, monkeypatch, loads):
    from evolve_train.models import build

    calls = []

    def recorder(real):
        class Recorder:  # a local dir loads; a hub name is recorded, and unreachable as it is here
            @staticmethod
            def from_pretrained(name, **kwargs):
                if Path(name).is_absolute():
                    return real.from_pretrained(name, **kwargs)
                calls.append((name, kwargs.get("revision", "-")))
                raise OSError(f"{name} is not reachable")

        return Recorder

    monkeypatch.setattr(build, "AutoModelForCausalLM", recorder(build.AutoModelForCausalLM))
    monkeypatch.setattr(build, "AutoTokenizer", recorder(build.AutoTokenizer))
    for call in (
        lambda: build.load_model("org/m", ModelConfig(), revision="step1000"),
        lambda: build.load_tokenizer("org/m", ModelConfig(), revision="step1000"),
        lambda: build.load_model("org/m", ModelConfig()),
    ):
        with pytest.raises(OSError):
            call()
    assert calls == [("org/m", "step1000"), ("org/m", "step1000"), ("org/m", "-")]  # no revision: none passed
    calls.clear()
    out = tmp_path / "series"
    with pytest.raises(SystemExit) as exit_info:  # the first entry loads; the hub one fails, naming it
        evolve_eval(["--series", entries(trained)[0], "org/m@step1000", "--out", str(out), *SETTINGS])
    assert exit_info.value.code == 2 and calls[0] == ("org/m", "step1000")
    assert loads == [("0", None), ("org/m", "step1000")]
    assert json.loads((out / "state.json").read_text())["evaluated"] == [0]


def test_report_on_a_series_draws_the_runs_plots(trained, scored_series, tmp_path):
    pngs = {}
    for name, run_dir in (("run", trained), ("series", scored_series)):
        assert evolve_report([str(run_dir), "--out", str(tmp_path / name), "--bootstrap", "50"]) == 0
        pngs[name] = {p.name for p in (tmp_path / name).glob("*.png")}
    assert pngs["series"] == pngs["run"] - TRAINING_PLOTS
    assert any(name.startswith("matrix_") for name in pngs["series"])
    assert any(name.startswith("slices_") for name in pngs["series"])
    section = (tmp_path / "series" / "report.md").read_text().split("## Knowledge year", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| run |")]
    assert [line.split(" | ")[1] for line in lines] == ["0", "1", "2"]  # a knowledge-year line per checkpoint
    assert all(len(KNOWN.findall(line)) == 2 for line in lines), lines
