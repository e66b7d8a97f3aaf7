"""scripts/cutoff_validation.py on TiC-LM-shaped files written here, with cutoffs planted: every case is
scored, the pooled rule's table and its summary rows are printed, and the counts are over the same cases."""

from __future__ import annotations

import subprocess
import sys

from helpers.cutoff import planted, write_tic_lm
from helpers.runs import ROOT

MONTHS = ["201305", "201403", "201501", "201602", "201701"]


def write_oracle(root, cutoff: str, rise: float) -> str:
    """Two domains; the loss rises by ``rise`` after ``cutoff``, and news slices get harder by 0.05 each."""
    losses = planted(MONTHS, cutoff, {"news": (0.05, rise), "wiki": (0.0, rise)})
    return str(write_tic_lm(root, f"oracle_cutoff{cutoff}", losses, half_width=0.002, sequences=1000))


def test_every_case_is_scored_and_the_pooled_rule_is_reported(tmp_path):
    paths = [
        write_oracle(tmp_path, "201403", 0.1),
        write_oracle(tmp_path, "201602", 0.1),
        write_oracle(tmp_path, "201701", 0.0),
    ]
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "cutoff_validation.py"), "--B", "200", "--tic-lm", *paths],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    pooled = [line for line in out.stdout.splitlines() if line.startswith("| oracle_cutoff")]
    assert pooled[-2].startswith("| oracle_cutoff201403 | 201403 | 201403 [") and pooled[-2].endswith("exact |")
    assert pooled[-1].startswith("| oracle_cutoff201602 | 201602 | 201602 [")
    assert "| largest jump / its sd, pooled over domains, ref | 4 / 4 | 4 / 4 |" in out.stdout
    # the reference removes the news domain's steady rise of 0.05 per slice; each domain alone then finds it too
    assert "| largest jump, ref | 4 / 4 | 4 / 4 |" in out.stdout
