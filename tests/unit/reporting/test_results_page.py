"""``reporting/results_page.py``: results tables and the README's demo block generated between marker comments
from a hand-made run dir, ``--check`` against the run dir, and a region whose run dir is not here."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

from helpers import read_jsonl
from helpers.runs import make_run

from evolve_train.evaluation.evaluators.report import evaluation_summary
from evolve_train.reporting import results_page
from evolve_train.reporting.results_page import ABSENT, BEGIN, END, NUMBER, carry_figures, main
from evolve_train.reporting.summary import format_summary_table

PROVENANCE = {
    "created": "2026-12-01T10:20:30+00:00",
    "commit": "0123456789abcdef0123456789abcdef01234567",
    "dirty": False,
    "versions": {"evolve-train": "0.1.0", "torch": "2.13.0"},
    "python": "3.11.9",
    "cpu": "Test CPU 9000",
    "gpu": None,
    "gpu_count": 0,
    "num_processes": 1,
    "command": "train.py hydra.run.dir=runs/x seed=3",
}


def synthetic_run(path: Path) -> Path:
    """A finished run dir with the summary parts the tables read: matrix, paired, slices, compute, provenance."""
    make_run(path, seed=3)
    rows = read_jsonl(path / "metrics.jsonl")
    summary = json.loads((path / "summary.json").read_text())
    P = {str(i): {str(j): 0.5 + i - j / 4 for j in range(3)} for i in range(3)}
    summary.update(evaluation_summary(rows))
    paired = {"update_adoption": 0.25, "update_adoption_ci": [0.125, 0.375], "confusion_index": 0.5, "n_pairs": 10}
    summary["groups"]["paired"] = {"2": paired}
    summary.update(
        timesliced={
            "nll": {"P": P, "backward": 1.25, "in_dist": 0.5, "forward": 0.25, "ci": {"backward": [1.0, 1.5]}},
            "em": {"learned": {"backward": 0.4, "in_dist": 0.9, "forward": 0.1}},
        },
        compute={
            "steps": {
                str(i): {"train_tokens": 100, "loss_tokens": 20, "optimizer_steps": 4, "train_flops": 1.5e9}
                for i in range(3)
            },
            "eval": {str(i): {"eval_tokens": 50, "eval_seconds": 0.5} for i in range(3)},
        },
        provenance=PROVENANCE,
    )
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def test_a_region_is_written_with_its_provenance_and_tables_and_checks(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    synthetic_run(tmp_path / "runs" / "a")
    page = Path("page.md")
    page.write_text("# Results\n\nText a person wrote.\n")
    assert main(["runs/a/", "--page", "page.md"]) == 0
    text = page.read_text()
    command = "python -m evolve_train.reporting.results_page runs/a --page page.md"
    assert text.startswith("# Results\n\nText a person wrote.\n\n" + BEGIN.format(command=command) + "\n")
    assert text.rstrip("\n").endswith(END)
    line = next(x for x in text.splitlines() if x.startswith("Run `runs/a`"))
    for part in ("2026-12-01 10:20 UTC", "commit 0123456789", "CPU Test CPU 9000", "hydra.run.dir=runs/x seed=3"):
        assert part in line, part
    titles = (
        "EM by checkpoint",
        "Continual-learning matrix",
        "Paired temporal",
        "Held-out slice NLL",
        "Knowledge year",
    )
    for title in (*titles, "Compute"):
        assert f"**{title}" in text, title
    assert "| 2 | 2.500 | 2.250 | 2.000 |" in text.replace("\\ ", " ")  # P[2][j] of the slice table
    assert main(["runs/a", "--page", "page.md", "--check"]) == 0
    assert main(["--page", "page.md", "--check"]) == 0
    assert "up to date" in capsys.readouterr().out
    assert main(["runs/a", "--page", "page.md"]) == 0 and page.read_text() == text  # rewritten in place


def test_check_fails_naming_the_page_when_a_number_was_edited(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    synthetic_run(tmp_path / "runs" / "a")
    page = Path("docs") / "results.md"
    page.parent.mkdir()
    page.write_text("# Results\n")
    assert main(["runs/a", "--page", str(page)]) == 0
    text = page.read_text()
    edited = re.sub(r"\| 0\.\d{3} \|", "| 0.123 |", text, count=1)
    assert edited != text
    page.write_text(edited)
    capsys.readouterr()
    assert main(["runs/a", "--page", str(page), "--check"]) == 1
    err = capsys.readouterr().err
    assert "docs/results.md" in err and "differs" in err and "0.123" in err
    assert main(["--page", str(page), "--check"]) == 1


def test_a_region_whose_run_dir_is_absent_cannot_be_checked_here(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    synthetic_run(tmp_path / "runs" / "a")
    Path("page.md").write_text("# Results\n")
    assert main(["runs/a", "--page", "page.md", "--tables", "slices"]) == 0
    (tmp_path / "runs" / "a").rename(tmp_path / "elsewhere")
    capsys.readouterr()
    assert main(["--page", "page.md", "--check"]) == 0
    out = capsys.readouterr().out
    assert ABSENT in out and "--tables slices" in out
    assert main(["runs/a", "--page", "page.md", "--tables", "slices", "--check"]) == 0


def test_tables_picks_the_tables_of_a_region_and_regions_stay_apart(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    synthetic_run(tmp_path / "runs" / "a")
    page = Path("page.md")
    page.write_text("# Results\n")
    assert main(["runs/a", "--page", "page.md", "--tables", "slices"]) == 0
    assert main(["runs/a", "--page", "page.md", "--tables", "em,compute"]) == 0
    first, second = results_page.regions(page.read_text()).values()
    assert "slice NLL" in first.group("body") and "EM by checkpoint" not in first.group("body")
    assert "EM by checkpoint" in second.group("body") and "Compute" in second.group("body")
    assert "slice NLL" not in second.group("body")
    assert main(["--page", "page.md", "--check"]) == 0
    assert main(["runs/a", "--page", "page.md", "--tables", "bogus"]) == 2


def demo_readme(block: list[str], paragraph: str = "Nothing quoted.") -> str:
    return "\n".join(
        [
            "# Project",
            "",
            "## The demo's output",
            "",
            "It ended with these lines:",
            BEGIN.format(command="python -m evolve_train.reporting.results_page runs/demo --readme"),
            "```",
            *block,
            "```",
            END,
            paragraph,
            "",
            "## Next",
            "",
        ]
    )


def saved_demo(run: Path) -> list[str]:
    """Write the run's console output as the demo saves it (printed from another RUN_DIR); returns the block
    the README should show."""
    tables = format_summary_table(json.loads((run / "summary.json").read_text())).splitlines()
    printed = "/elsewhere/runs/demo-7"
    tail = [f"demo: training + evaluation took 12 s; outputs in {printed}", f"1 run(s) -> {printed}/report/report.html"]
    (run / "demo_output.txt").write_text("\n".join(["[log] training", *tables, *tail]) + "\n")
    return tables + [line.replace(printed, "runs/demo") for line in tail]


def test_the_readme_block_is_the_saved_tail_and_the_paragraph_follows_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    expected = saved_demo(synthetic_run(tmp_path / "runs" / "demo"))
    numbers = [[m.group() for m in NUMBER.finditer(line)] for line in expected]
    unique = itertools.count(1)  # the old block: the same lines, every number another (unique) figure
    old = [NUMBER.sub(lambda m: f"{next(unique)}.500", line) for line in expected]
    quoted = NUMBER.findall(old[2])[1]  # unchanged at checkpoint 0 in the old block
    readme = Path("README.md")
    readme.write_text(demo_readme(old, f"Unchanged starts at {quoted}."))
    assert main(["runs/demo", "--readme", "--check"]) == 1  # the block is the old run's
    assert main(["runs/demo", "--readme"]) == 0
    text = readme.read_text()
    assert text.split("```\n")[1].rstrip("\n").splitlines() == expected
    assert f"Unchanged starts at {numbers[2][1]}." in text and text.endswith("## Next\n")
    assert main(["runs/demo", "--readme", "--check"]) == 0
    readme.write_text(text.replace(f"starts at {numbers[2][1]}", "starts at 0.999"))
    assert main(["runs/demo", "--readme", "--check"]) == 1  # a quoted figure the block does not hold
    assert "0.999" in capsys.readouterr().err


def test_a_readme_figure_that_cannot_be_carried_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    saved_demo(synthetic_run(tmp_path / "runs" / "demo"))
    Path("README.md").write_text(demo_readme(["EM by checkpoint", "0  0.777"], "Unchanged falls to 0.777."))
    assert main(["runs/demo", "--readme"]) == 1  # the block is written; the figure is left to edit by hand
    assert "0.777" in capsys.readouterr().err
    assert main(["runs/other", "--readme"]) == 2  # no region of that command


def test_the_block_renders_the_tables_from_the_run_and_takes_the_rest_from_the_saved_output(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    run = synthetic_run(tmp_path / "runs" / "demo")
    expected = saved_demo(run)
    saved = (run / "demo_output.txt").read_text()
    (run / "demo_output.txt").write_text(saved.replace(expected[2], "0  an older formatter's line"))
    Path("README.md").write_text(demo_readme(["x"]))
    assert main(["runs/demo", "--readme"]) == 0
    assert Path("README.md").read_text().split("```\n")[1].rstrip("\n").splitlines() == expected
    (run / "demo_output.txt").write_text(saved.replace("demo: ", "train: "))
    assert main(["runs/demo", "--readme"]) == 2
    assert "demo_output.txt" in capsys.readouterr().err


def test_figures_are_carried_by_position_and_ambiguous_ones_named():
    old = ["a 0.500 b 1.000", "c 1.000 0.250"]
    new = ["a 0.600 b 1.000", "c 0.990 0.250"]
    paragraph, unresolved = carry_figures("from 0.500 to 0.250, and 1.000", old, new)
    assert paragraph == "from 0.600 to 0.250, and 1.000" and unresolved == ["1.000"]
    assert carry_figures("0.333", old, new) == ("0.333", ["0.333"])  # not a figure of the old block


def test_counts_are_carried_where_they_can_be_and_never_asked_for():
    old = ["n_pairs=215 a=0.500", "95 7 7"]
    new = ["n_pairs=14 a=0.250", "95 8 9"]
    assert carry_figures("0.500 over 215 pairs; 95 % and 7", old, new) == ("0.250 over 14 pairs; 95 % and 7", [])
