"""`evolve-report`: compare finished runs: forgetting curves, EM matrices, per-step tables, paired CIs.

    evolve-report RUN_DIR [RUN_DIR ...] --out DIR [--bootstrap B] [--seed S] [--no-ci]

A sweep dir (e.g. runs/<experiment>/multirun) expands to the run dirs below it (found by their
metrics.jsonl). Runs whose saved configs differ only by seed are grouped: mean ± 95% t-interval across seeds,
forgetting curves with a band per configuration, differences between configurations pooled over seeds
(docs/tracking.md). An incomplete run dir (no metrics.jsonl / summary.json) or runs evaluated on different
questions exit with 2 and one line on stderr naming the dir, file or split.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evolve-report", description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run dirs or sweep dirs")
    parser.add_argument("--out", required=True, metavar="DIR", help="where the PNGs, report.md and report.html go")
    parser.add_argument("--bootstrap", type=int, default=2000, metavar="B", help="bootstrap resamples (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--no-ci", action="store_true", help="skip the paired bootstrap (runs without predictions)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of `evolve-report`; returns the exit status (0, or 2 on bad input)."""
    args = build_parser().parse_args(argv)
    if args.bootstrap < 1:
        print("evolve-report: error: --bootstrap must be >= 1", file=sys.stderr)
        return EXIT_BAD_INPUT
    from evolve_train.errors import EvolveTrainError
    from evolve_train.reporting.report import build_report

    try:
        result = build_report(args.run_dirs, args.out, B=args.bootstrap, seed=args.seed, ci=not args.no_ci)
    except (EvolveTrainError, OSError) as err:
        message = str(err) if not isinstance(err, OSError) else f"{err.filename}: {err.strerror}"
        print(f"evolve-report: error: {message}".replace("\n", " "), file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{len(result['runs'])} run(s) -> {result['html']} and {result['markdown']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
