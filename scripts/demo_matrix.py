"""The default recipe over seeds x kernel settings: where does `python train.py` land?

    python scripts/demo_matrix.py --out /tmp/demo_matrix [--seeds 0 1 2] [--settings default avx2_t1]
                                  [--lock FILE] [OVERRIDE ...]

Runs `python train.py seed=S` once per seed and setting (one after the other: never two at once), each in
``<out>/<setting>/seed<S>`` (a finished run dir is not trained again: its recorded wall time is reused), then
prints the Markdown table of the figures ``evolve_train.reporting.demo_check`` checks, each run's wall time,
and the min-max of every figure, and writes them to ``<out>/matrix.json``. Settings:

* ``default``: torch as it starts on this machine (its best kernels, every core);
* ``avx2_t1``: ``ATEN_CPU_CAPABILITY=avx2`` (ATen's AVX2 kernels instead of AVX-512) and
  ``trainer.num_threads=1`` (one thread: another reduction order in every matmul and sum);
* ``scalar``: ``ATEN_CPU_CAPABILITY=default`` (ATen's non-vectorized kernels), every core.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evolve_train.reporting.demo_check import BANDS, figures  # noqa: E402

SETTINGS = {
    "default": ({}, []),
    "avx2_t1": ({"ATEN_CPU_CAPABILITY": "avx2"}, ["trainer.num_threads=1"]),
    "scalar": ({"ATEN_CPU_CAPABILITY": "default"}, []),
}


@contextlib.contextmanager
def held(lock: Path | None):
    """The lock file held (``flock``) around one run; nothing without one."""
    if lock is None:
        yield
        return
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_one(out: Path, setting: str, seed: int, overrides: list[str], lock: Path | None = None) -> dict:
    run_dir = out / setting / f"seed{seed}"
    timing = run_dir / "demo_matrix_wall.json"
    if not (run_dir / "summary.json").is_file() or not timing.is_file():
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        env_extra, setting_overrides = SETTINGS[setting]
        command = [
            sys.executable,
            "train.py",
            f"hydra.run.dir={run_dir}",
            f"seed={seed}",
            *setting_overrides,
            *overrides,
        ]
        print(f"[demo_matrix] {setting} seed {seed}: {' '.join(command)}", flush=True)
        with held(lock):
            start = time.perf_counter()
            with open(run_dir.parent / f"seed{seed}.log", "w") as log:  # beside the run dir (it must not exist yet)
                subprocess.run(
                    command, cwd=ROOT, env={**os.environ, **env_extra}, check=True, stdout=log, stderr=subprocess.STDOUT
                )
            timing.write_text(json.dumps({"wall_s": round(time.perf_counter() - start, 1)}))
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"setting": setting, "seed": seed, "wall_s": json.loads(timing.read_text())["wall_s"], **figures(summary)}


def table(rows: list[dict]) -> str:
    names = [k for k in rows[0] if k not in ("setting", "seed", "wall_s")]
    lines = ["| setting | seed | " + " | ".join(names) + " | wall (s) |", "|---" * (len(names) + 3) + "|"]
    for row in rows:
        cells = ["-" if row[n] is None else f"{row[n]:.3f}" for n in names]
        lines.append(f"| {row['setting']} | {row['seed']} | " + " | ".join(cells) + f" | {row['wall_s']:.0f} |")
    return "\n".join(lines)


def ranges(rows: list[dict]) -> dict[str, list[float]]:
    out = {}
    for name in rows[0]:
        values = [r[name] for r in rows if isinstance(r[name], (int, float)) and name not in ("seed",)]
        if values:
            out[name] = [round(min(values), 3), round(max(values), 3)]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--settings", nargs="+", default=["default", "avx2_t1"], choices=sorted(SETTINGS))
    parser.add_argument(
        "--lock",
        type=Path,
        help="hold this lock file (flock) during each run, so that no other "
        "heavy job shares the cores with it (its wall time then includes no wait: taken inside)",
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run (none: the default recipe)")
    args = parser.parse_args()
    rows = [run_one(args.out, s, seed, args.overrides, args.lock) for s in args.settings for seed in args.seeds]
    spans = ranges(rows)
    failing = [
        (r["setting"], r["seed"], name)
        for r in rows
        for name, band in BANDS.items()
        if r[name] is None or not band.holds(r[name])
    ]
    print(table(rows))
    print("\nmin-max over the runs:")
    for name, (low, high) in spans.items():
        print(f"  {name}: {low:.3f}-{high:.3f}")
    print("every run inside the bands" if not failing else f"outside the bands: {failing}")
    (args.out / "matrix.json").write_text(json.dumps({"rows": rows, "ranges": spans, "failing": failing}, indent=1))
    return 0 if not failing else 1


if __name__ == "__main__":
    sys.exit(main())
