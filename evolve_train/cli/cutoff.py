"""``evolve-data cutoff``: the knowledge cutoff of each model in a loss matrix read from others' files
(docs/metrics.md#14-knowledge-cutoff): TiC-LM's ``aggregated_ppl_evals.jsonl`` (one per model; each domain a
matrix) or a plain CSV ``model,<slice>,...``. Per domain and model the cutoff slice with its interval, or "no
cutoff found" with the reason; with several domains also the jump pooled over them per model.

    evolve-data cutoff --tic-lm MODEL_DIR/ppl_evals/aggregated_ppl_evals.jsonl ... [--reference MODEL]
    evolve-data cutoff --csv LOSSES.csv [--reference MODEL] [--rule hinge] [--json]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from evolve_train.errors import DataError


def add_cutoff_arguments(sub) -> None:
    cutoff = sub.add_parser(
        "cutoff", help="knowledge cutoff per model from a loss matrix over time slices (TiC-LM files or a CSV)"
    )
    source = cutoff.add_mutually_exclusive_group(required=True)
    source.add_argument("--tic-lm", nargs="+", type=Path, help="TiC-LM <model>/ppl_evals/aggregated_ppl_evals.jsonl")
    source.add_argument("--csv", type=Path, help="a CSV: header model,<slice>,... then a loss per model and slice")
    cutoff.add_argument(
        "--reference", default=None, help="the row subtracted from every other (e.g. the most recent model)"
    )
    cutoff.add_argument("--rule", choices=["jump", "hinge"], default="jump", help="rule per row (default: jump)")
    cutoff.add_argument("--bootstrap", type=int, default=2000, help="resamples of each interval (default: 2000)")
    cutoff.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: 0)")
    cutoff.add_argument("--json", action="store_true", help="one JSON object per line instead of the table")


def _label(row: dict) -> str:
    if row["estimate"] is None:
        return f"no cutoff found ({row['reason']})"
    interval = f"[{row['lo']}, {row['hi']}]" if row["lo"] is not None else "(no interval)"
    return f"{row['estimate']} {interval}"


def cutoff_rows(args: argparse.Namespace) -> list[dict]:
    """One row per (domain, model) and, with several domains, one per model pooled over them."""
    from evolve_train.data.loaders.cutoff_evidence import read_loss_csv, read_tic_lm_evals
    from evolve_train.evaluation.metrics.cutoff import pooled_jump_cutoff, slice_cutoff

    more = f" and {len(args.tic_lm) - 1} more files" if args.tic_lm and len(args.tic_lm) > 1 else ""
    source = str(args.csv) if args.csv else f"{args.tic_lm[0]}{more}"
    matrices = {"": read_loss_csv(args.csv)} if args.csv else read_tic_lm_evals(args.tic_lm)
    names = [r.name for r in next(iter(matrices.values())).rows]
    if args.reference is not None and args.reference not in names:
        raise DataError(
            f"--reference {args.reference!r} is not a model there (models: {', '.join(names)})", file=source
        )
    rows = []
    for domain, matrix in matrices.items():
        ref = matrix.row(args.reference) if args.reference else None
        for row in matrix.rows:
            if row is not ref:
                est = slice_cutoff(row, matrix.slices, ref, B=args.bootstrap, seed=args.seed, rule=args.rule)
                rows.append({"domain": domain, "model": row.name, **asdict(est)})
    if len(matrices) > 1:
        first = next(iter(matrices.values()))
        for name in names:
            if name == args.reference:
                continue
            pairs = [(m.row(name), m.row(args.reference) if args.reference else None) for m in matrices.values()]
            est = pooled_jump_cutoff(pairs, first.slices, B=args.bootstrap, seed=args.seed)
            rows.append({"domain": f"pooled over {len(matrices)}", "model": name, **asdict(est)})
    return rows


def print_cutoffs(args: argparse.Namespace) -> None:
    rows = cutoff_rows(args)
    if not rows:
        raise DataError("no model besides the reference: nothing to estimate", file=args.csv or args.tic_lm[0])
    width = max(len(r["model"]) for r in rows)
    for row in rows:
        if args.json:
            print(json.dumps(row, default=str))
        else:
            domain = f"{row['domain']}: " if row["domain"] else ""
            print(f"{domain}{row['model']:<{width}}  {_label(row)}  ({row['method']})")
