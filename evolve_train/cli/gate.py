"""`evolve-gate`: the release gate (docs/metrics.md#8-statistics-and-hygiene) on a finished run's final checkpoint.

    evolve-gate RUN_DIR [--baseline RUN_DIR] [--flip-rate-max X] [--paraphrase-gap-max X]
                [--ci-low-min X] [--slice-floor NAME=X ...] [--bootstrap B] [--seed S]

Checks, each printed with its value, operator and threshold:

* ``flip_rate`` <= ``flip_rate_max`` — the ``all`` row of group ``flip_rate`` at the final checkpoint;
* ``paraphrase_gap`` <= ``paraphrase_gap_max`` — the ``all`` row of group ``paraphrase_gap`` (rows and configs
  written under the former name ``contamination`` are read as well; ``--contamination-gap-max`` is accepted);
* ``bootstrap_ci_low`` > ``ci_low_min`` — low end of the paired-bootstrap 95% CI of EM(run) − EM(baseline)
  over Unchanged + New + Updated (``evaluation/compare.py``); only with ``--baseline``;
* ``slice:<name>`` >= floor — EM at the final checkpoint of a set (``new_2``), a split kind (``new``: every
  New_k, item-weighted) or ``all`` (Unchanged + New + Updated).

Thresholds: docs/metrics.md defaults (``GateConfig``), replaced by the run's own ``eval.gate`` when its
``.hydra/config.yaml`` has one, replaced by the flags (a value ``none`` switches a check off). A check whose
value was not measured (its evaluator did not run) fails. Exit status: 0 when every check passes, 1 when one
fails, 2 on bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Optional, Sequence

EXIT_FAIL, EXIT_BAD_INPUT = 1, 2


def _threshold(text: str) -> Optional[float]:
    if text.strip().lower() in ("none", "null", "off"):
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'none', got {text!r}") from None


def _floor(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=FLOOR, got {text!r}")
    try:
        return name.strip(), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=FLOOR with a number, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evolve-gate", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="a finished run dir")
    parser.add_argument(
        "--baseline",
        metavar="RUN_DIR",
        type=Path,
        default=None,
        help="run to beat: the paired-bootstrap CI low of EM(run) - EM(baseline) must exceed ci_low_min",
    )
    parser.add_argument(
        "--flip-rate-max",
        type=_threshold,
        default=argparse.SUPPRESS,
        metavar="X",
        help="max flip rate (default: the run's eval.gate, else 0.10; 'none' = no check)",
    )
    parser.add_argument(
        "--paraphrase-gap-max",
        "--contamination-gap-max",
        dest="paraphrase_gap_max",
        type=_threshold,
        default=argparse.SUPPRESS,
        metavar="X",
        help="max paraphrase gap (default: the run's eval.gate, else 0.03; 'none' = no check)",
    )
    parser.add_argument(
        "--ci-low-min",
        type=_threshold,
        default=argparse.SUPPRESS,
        metavar="X",
        help="CI low vs the baseline must be > X (default: the run's eval.gate, else 0)",
    )
    parser.add_argument(
        "--slice-floor",
        type=_floor,
        action="append",
        default=[],
        metavar="NAME=X",
        help="EM floor of a slice (set name, split kind or 'all'); repeatable; adds to eval.gate",
    )
    parser.add_argument(
        "--bootstrap",
        type=int,
        default=None,
        metavar="B",
        help="bootstrap resamples (default: eval.gate.bootstrap, 2000)",
    )
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    return parser


def run_thresholds(run_dir: Path) -> dict:
    """``eval.gate`` of the run's saved Hydra config merged over the defaults (GateConfig)."""
    from omegaconf import OmegaConf

    from evolve_train.config import GateConfig
    from evolve_train.config_renames import current_key

    gate = dataclasses.asdict(GateConfig())
    saved = run_dir / ".hydra" / "config.yaml"
    if saved.exists():
        node = OmegaConf.select(OmegaConf.load(saved), "eval.gate")
        if node is not None:
            for key, value in OmegaConf.to_container(node, resolve=True).items():
                key = (current_key(f"eval.gate.{key}") or key).rpartition(".")[2]  # a former name as it is now
                if key in gate:
                    gate[key] = value
    return gate


def _final_value(run, group: str, key: str, checkpoint: int) -> Optional[float]:
    for row in run.group_rows(group):
        if int(row["checkpoint"]) == checkpoint and row.get("set_name") == "all":
            return row.get(key)
    return None


def slice_value(run, name: str, checkpoint: int) -> Optional[float]:
    """EM of a set, of a split kind (item-weighted over its sets) or of ``all`` at ``checkpoint``."""
    from evolve_train.evaluation.rows import POOLED_KINDS, column_name

    rows = [r for r in run.split_rows if int(r["checkpoint"]) == checkpoint and r.get("em") is not None]
    exact = [r for r in rows if column_name(r) == name]
    if exact:
        return exact[0]["em"]
    kinds = POOLED_KINDS if name == "all" else (name,)
    chosen = [r for r in rows if r["set"] in kinds and r.get("n")]
    total = sum(r["n"] for r in chosen)
    return sum(r["em"] * r["n"] for r in chosen) / total if total else None


def gate(run_dir: Path, baseline: Optional[Path] = None, overrides: Optional[dict] = None, seed: int = 0) -> dict:
    """Values and thresholds of every check and ``release_gate``'s verdict; ReportError on bad run dirs."""
    from evolve_train.evaluation.compare import ALL, compare_runs
    from evolve_train.evaluation.metrics.stats import release_gate
    from evolve_train.evaluation.rows import load_run

    run = load_run(run_dir)
    thresholds = run_thresholds(run_dir)
    floors = dict(thresholds.get("slice_floors") or {})
    for key, value in (overrides or {}).items():
        if key == "slice_floors":
            floors.update(value)
        else:
            thresholds[key] = value
    thresholds["slice_floors"] = floors
    B = int(thresholds.pop("bootstrap", 2000) or 2000)
    checkpoint = run.final_checkpoint
    values = {
        "flip_rate": _final_value(run, "flip_rate", "flip_rate", checkpoint),
        "paraphrase_gap": _final_value(run, "paraphrase_gap", "paraphrase_gap", checkpoint),
        "slices": {name: slice_value(run, name, checkpoint) for name in floors},
    }
    comparison = None
    if baseline is not None:
        comparison = compare_runs(run, load_run(baseline), B=B, seed=seed)
        values["bootstrap_ci_low"] = comparison[ALL]["ci_low"] if ALL in comparison else None
    elif thresholds.get("ci_low_min") is not None:
        thresholds["ci_low_min"] = None  # nothing to compare against: the check does not apply
    verdict = release_gate(values, thresholds)
    return {
        "run_dir": str(run_dir),
        "baseline": None if baseline is None else str(baseline),
        "checkpoint": checkpoint,
        "passed": verdict["passed"],
        "checks": verdict["checks"],
        "comparison": comparison,
        "B": B,
    }


def _fmt(value) -> str:
    return "not measured" if value is None else f"{value:.4f}"


def format_gate(result: dict) -> str:
    lines = [
        f"release gate for {result['run_dir']} (final checkpoint {result['checkpoint']})"
        + (f" vs baseline {result['baseline']}" if result["baseline"] else "")
    ]
    for check in result["checks"]:
        status = "PASS" if check["passed"] else "FAIL"
        lines.append(
            f"  {status}  {check['name']:<22} {_fmt(check['value']):>12} {check['op']:>2} {check['threshold']}"
        )
    if result["baseline"] is None:
        lines.append("  SKIP  bootstrap_ci_low       (no --baseline)")
    comparison = result.get("comparison") or {}
    if "all" in comparison:
        c = comparison["all"]
        lines.append(
            f"  (EM run {c['em_a']:.4f} vs baseline {c['em_b']:.4f}: diff {c['diff']:+.4f}, "
            f"95% CI [{c['ci_low']:+.4f}, {c['ci_high']:+.4f}], kappa {_fmt(c['kappa'])}, n {c['n']}, "
            f"B {result['B']})"
        )
    passed = sum(c["passed"] for c in result["checks"])
    lines.append(f"{'PASSED' if result['passed'] else 'FAILED'}: {passed}/{len(result['checks'])} checks pass")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of `evolve-gate`; 0 if every check passes, 1 if one fails, 2 on bad input."""
    args = build_parser().parse_args(argv)
    from evolve_train.errors import EvolveTrainError

    overrides = {
        key: getattr(args, key) for key in ("flip_rate_max", "paraphrase_gap_max", "ci_low_min") if hasattr(args, key)
    }
    if args.slice_floor:
        overrides["slice_floors"] = dict(args.slice_floor)
    if args.bootstrap is not None:
        if args.bootstrap < 1:
            print("evolve-gate: error: --bootstrap must be >= 1", file=sys.stderr)
            return EXIT_BAD_INPUT
        overrides["bootstrap"] = args.bootstrap
    try:
        result = gate(args.run_dir, args.baseline, overrides, seed=args.seed)
    except (EvolveTrainError, OSError, ValueError) as err:
        message = str(err) if not isinstance(err, OSError) else f"{err.filename}: {err.strerror}"
        print(f"evolve-gate: error: {message}".replace("\n", " "), file=sys.stderr)
        return EXIT_BAD_INPUT
    print(format_gate(result))
    return 0 if result["passed"] else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
