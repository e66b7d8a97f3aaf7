"""Throughput figures of finished (or partly finished) run dirs, for scripts/gpu_check.sh.

    python scripts/run_figures.py RUN_DIR [RUN_DIR ...] [--peak-tflops 989] [--out figures.json]

Per run: training tokens/s, MFU and peak memory from ``train_log.jsonl`` rows when the loop logs them
(``tokens_per_s``, ``mfu``, ``peak_mem_gb``; the last row that has each), else tokens/s from the
``metrics.jsonl`` rows (``train_tokens / train_seconds`` summed over checkpoints) and MFU estimated as
``6 * parameters * tokens/s / peak`` (parameters read from ``train.log``'s "model: X M parameters" line);
plus optimizer steps, the last loss and EM per set at the last checkpoint. Missing files give ``null``s,
never an error: a part of the GPU check that failed still leaves the others' figures.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def last_value(train_rows: list[dict], key: str):
    return next((row[key] for row in reversed(train_rows) if row.get(key) is not None), None)


def parameters(run: Path) -> float | None:
    log = run / "train.log"
    found = re.findall(r"model: ([\d.]+)M parameters", log.read_text(errors="replace")) if log.is_file() else []
    return float(found[-1]) * 1e6 if found else None


def training_rate(metric_rows: list[dict]) -> float | None:
    """tokens/s over the checkpoints' training (one row per checkpoint carries train_tokens/train_seconds)."""
    per_checkpoint = {
        r["checkpoint"]: (r["train_tokens"], r["train_seconds"])
        for r in metric_rows
        if r.get("train_seconds") and r.get("train_tokens") is not None
    }
    seconds = sum(s for _, s in per_checkpoint.values())
    return sum(t for t, _ in per_checkpoint.values()) / seconds if seconds else None


def optimizer_steps(train_rows: list[dict]) -> int:
    """Optimizer steps over all time steps (each time step's count restarts at 1)."""
    last: dict = {}
    for row in train_rows:
        if "optimizer_step" in row:
            last[row.get("time_step")] = max(last.get(row.get("time_step"), 0), row["optimizer_step"])
    return sum(last.values())


def figures(run: Path, peak_tflops: float | None) -> dict:
    train_rows, metric_rows = rows(run / "train_log.jsonl"), rows(run / "metrics.jsonl")
    rate = last_value(train_rows, "tokens_per_s") or training_rate(metric_rows)
    n = parameters(run)
    mfu = last_value(train_rows, "mfu")
    if mfu is None and rate and n and peak_tflops:
        mfu = round(6 * n * rate / (peak_tflops * 1e12), 4)  # estimate: 6 N FLOPs per trained token
    last = max((r["checkpoint"] for r in metric_rows if "em" in r), default=None)
    em = {r.get("set_name") or r.get("set"): r["em"] for r in metric_rows if r.get("checkpoint") == last and "em" in r}
    return {
        "run": str(run),
        "parameters": n,
        "tokens_per_s": round(rate, 1) if rate else None,
        "mfu": mfu,
        "mfu_source": "train_log" if last_value(train_rows, "mfu") is not None else "estimate 6N",
        "peak_mem_gb": last_value(train_rows, "peak_mem_gb"),
        "optimizer_steps": optimizer_steps(train_rows),
        "last_loss": last_value(train_rows, "loss"),
        "checkpoint": last,
        "em": em,
        "complete": (run / "summary.json").is_file(),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--peak-tflops", type=float, default=None, help="the card's bf16 peak (H100/H200: 989)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    result = [figures(run, args.peak_tflops) for run in args.runs]
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
