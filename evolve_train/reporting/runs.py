"""Finding and labelling the runs of a report: run-dir discovery and short labels.

A run dir is complete when it holds ``metrics.jsonl`` and ``summary.json`` (written after the last step);
it is loaded by :func:`evolve_train.evaluation.rows.load_run`. A dir without either (a sweep dir such as
``runs/<experiment>/multirun``) expands to every run dir below it that holds ``metrics.jsonl``, whatever its
path (run dirs are found by content, not by name), except those inside another run dir (``evaluations/<name>/``
of ``evolve-eval``: pass such a dir itself to report it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from evolve_train.evaluation.rows import METRICS_FILE, ReportError, Run, load_run

SKIP_DIRS = {"steps", "predictions", "wandb", ".step0_cache", ".hydra"}


def expand_run_dirs(paths: Iterable[Path | str]) -> list[Path]:
    """Run dirs as given; a dir without metrics.jsonl/summary.json expands to the run dirs below it."""
    found: list[Path] = []
    for path in map(Path, paths):
        if not path.exists():
            raise ReportError(f"{path}: no such directory")
        if (path / METRICS_FILE).exists() or (path / "summary.json").exists() or not path.is_dir():
            found.append(path)
            continue
        below = sorted(
            p.parent for p in path.rglob(METRICS_FILE) if not SKIP_DIRS & set(p.relative_to(path).parts[:-1])
        )
        runs = set(below)  # a dir inside a run dir (its evaluations/<name>/ of evolve-eval) is part of that run
        below = [p for p in below if not runs & set(p.parents)]
        if not below:
            raise ReportError(f"{path}: incomplete run dir: no {METRICS_FILE} (nor any run dir below it)")
        found.extend(below)
    unique = list(dict.fromkeys(p.resolve() for p in found))
    return [Path(p) for p in unique]


def label_runs(runs: list[Run]) -> None:
    """Short unique labels: method/seed, prefixed by the experiment when runs mix experiments."""
    experiments = {r.experiment for r in runs}
    for run in runs:
        base = f"{run.method}/seed{run.seed}"
        run.label = f"{run.experiment}/{base}" if len(experiments) > 1 else base
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.label] = counts.get(run.label, 0) + 1
    for run in runs:
        if counts[run.label] > 1:
            run.label = f"{run.label} ({run.path.parent.name}/{run.path.name})"


def load_runs(paths: Iterable[Path | str]) -> list[Run]:
    """Expand, load and label runs; ReportError when none is given or one is incomplete."""
    runs = [load_run(p) for p in expand_run_dirs(paths)]
    if not runs:
        raise ReportError("no run dirs given")
    label_runs(runs)
    return runs


__all__ = ["ReportError", "Run", "SKIP_DIRS", "expand_run_dirs", "label_runs", "load_run", "load_runs"]
