"""Did a run of the default recipe land where the README says? (``make demo`` ends with this check.)

``BANDS`` are the documented acceptance bands of the default recipe: every run of
``scripts/demo_matrix.py`` (seeds 0-2 x two kernel settings) met them when the recipe was chosen.
``MEASURED`` is the min-max of each figure over those runs, as docs/results/demo.md, "What varies", quotes it
(``tests/unit/reporting/test_demo_check.py`` keeps the two in step). A figure outside its band says the run is not what the
README describes: another recipe (overrides), a broken install, or a CPU whose kernels take the trajectory
elsewhere. The informational figures have no band: they vary more between runs and docs/results/demo.md says why.

    python -m evolve_train.reporting.demo_check RUN_DIR
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

SEE = "see docs/results/demo.md, 'What varies'"


@dataclass(frozen=True)
class Band:
    low: float
    high: float

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high

    def __str__(self) -> str:
        return f"{self.low:.2f}-{self.high:.2f}"


BANDS = {
    "Unchanged@0": Band(0.95, 1.0),
    "New_k@k": Band(0.95, 1.0),
    "Updated_k@k": Band(0.95, 1.0),
    "Outdated_k@k": Band(0.0, 0.05),
}
"""Figure -> documented band (``_k@k``: every step k >= 1, the worst step counts)."""

MEASURED = {
    "Unchanged@0": (0.998, 1.000),
    "New_k@k": (1.000, 1.000),
    "Updated_k@k": (1.000, 1.000),
    "Outdated_k@k": (0.000, 0.000),
    "Unchanged@last": (0.348, 0.586),
    "update_adoption@last": (0.000, 0.005),
    "timestamp_reliance@last": (-0.010, 0.096),
    "paraphrase_gap@last": (0.483, 0.598),
}
"""Figure -> (min, max) over the runs of ``scripts/demo_matrix.py`` (docs/results/demo.md, "What varies")."""


def _em(summary: dict, checkpoint: int, column: str) -> Optional[float]:
    return summary.get("em", {}).get(str(checkpoint), {}).get(column)


def _steps(summary: dict) -> list[int]:
    return sorted(int(c) for c in summary.get("em", {}) if c.lstrip("-").isdigit())


def figures(summary: dict) -> dict[str, Optional[float]]:
    """The checked and informational figures of one run's ``summary.json`` (``None``: not in the run)."""
    steps = _steps(summary)
    later = [k for k in steps if k >= 1]

    def worst(kind: str, pick) -> Optional[float]:
        values = [_em(summary, k, f"{kind}_{k}") for k in later]
        values = [v for v in values if v is not None]
        return pick(values) if values else None

    last = str(steps[-1]) if steps else None
    groups = summary.get("groups", {})

    def group(name: str, key: str, set_name: Optional[str] = None) -> Optional[float]:
        cell = groups.get(name, {}).get(last, {}) if last is not None else {}
        if set_name is not None:
            cell = cell.get(set_name, {}) if isinstance(cell.get(set_name), dict) else {}
        value = cell.get(key)
        return value if isinstance(value, (int, float)) else None

    return {
        "Unchanged@0": _em(summary, 0, "unchanged"),
        "New_k@k": worst("new", min),
        "Updated_k@k": worst("updated", min),
        "Outdated_k@k": worst("outdated", max),
        "Unchanged@last": _em(summary, steps[-1], "unchanged") if steps else None,
        "update_adoption@last": group("paired", "update_adoption"),
        "timestamp_reliance@last": group("ablation", "timestamp_reliance"),
        "paraphrase_gap@last": group("paraphrase_gap", "paraphrase_gap", "all"),
    }


def check_lines(summary: dict) -> tuple[list[str], bool]:
    """One line per figure, and whether every banded figure is inside its band."""
    values, lines, ok = figures(summary), [], True
    for name, value in values.items():
        measured = MEASURED.get(name)
        seen = f"measured {measured[0]:.3f}-{measured[1]:.3f}" if measured else "not measured"
        if value is None:
            lines.append(f"{name}: not in this run")
            ok = ok and name not in BANDS
            continue
        band = BANDS.get(name)
        if band is None:
            lines.append(f"{name} {value:.3f} (informational; {seen} over the documented runs)")
        elif band.holds(value):
            lines.append(f"{name} {value:.3f} - inside the documented {band} ({seen})")
        else:
            ok = False
            lines.append(f"{name} {value:.3f} - OUTSIDE the documented {band} ({seen}): {SEE}")
    return lines, ok


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m evolve_train.reporting.demo_check RUN_DIR", file=sys.stderr)
        return 2
    path = Path(args[0]) / "summary.json"
    if not path.is_file():
        print(f"demo check: {path} not found (the run did not finish)", file=sys.stderr)
        return 2
    lines, ok = check_lines(json.loads(path.read_text()))
    print("demo check (the default recipe's documented ranges):")
    print("\n".join("  " + line for line in lines))
    print(
        "demo check: "
        + (
            "every checked figure is inside its documented band"
            if ok
            else f"some figures are outside their documented band: {SEE}"
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
