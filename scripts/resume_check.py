"""Kill-and-resume against an uninterrupted run, for scripts/gpu_check.sh: one PASS/FAIL line per figure.

    python scripts/resume_check.py REFERENCE RESUMED [--loss-rtol R] [--metric-atol A] [--metric-rtol R]
                                   [--preflight-band LOW HIGH] [--out check.json]

REFERENCE ran uninterrupted; RESUMED is the same command killed (SIGKILL) in the middle of a time step and run
again in the same run dir. Printed, each ``PASS``/``FAIL <figure> ...``:

- ``resumed``: RESUMED's ``train.log`` says it resumed a time step from a saved training state;
- ``resume_losses``: the training-log losses, matched by (time step, optimizer step), differ by at most
  ``--loss-rtol`` (relative) and the two logs hold the same steps;
- ``resume_metrics``: every numeric metric of every metric row (matched by checkpoint, group and set) differs
  by at most ``--metric-atol`` + ``--metric-rtol`` x its magnitude, and the two runs have the same rows;
- ``peak_vs_preflight`` (only where the loop logged a CUDA peak, ``peak_mem_gb``): REFERENCE's peak against
  the memory preflight's per-device estimate in its ``train.log``, inside ``--preflight-band`` (else ``INFO``);
- ``host_load_vs_weights`` (judged where the weights went to a GPU): what RESUMED's load of its checkpoint added
  to the process's resident host memory, against the weights' size, at most ``--host-load-max`` (the weights are
  read from the file straight onto the GPU; ``INFO`` on a CPU, where they live in host memory).

Bounds: exact (``0``) where the same computation repeats bit for bit (fp32 on CPU); on a GPU in bf16 a few
kernels are not deterministic, so gpu_check.sh passes looser bounds (docs/distributed.md). Exit 0 when every
judged figure passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

from evolve_train.evaluation.metrics.directions import is_wall_clock

IDENTITY = ("checkpoint", "group", "set_name", "set_step")


def read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def losses(run: Path) -> dict[tuple, float]:
    return {
        (r["time_step"], r["optimizer_step"]): r["loss"]
        for r in read_jsonl(run / "train_log.jsonl")
        if r.get("loss") is not None and "optimizer_step" in r
    }


def metrics(run: Path) -> dict[tuple, dict[str, float]]:
    out = {}
    for row in read_jsonl(run / "metrics.jsonl"):
        values = {
            k: float(v)
            for k, v in row.items()
            if k not in IDENTITY and isinstance(v, (int, float)) and not isinstance(v, bool) and not is_wall_clock(k)
        }
        out[tuple(row.get(k) for k in IDENTITY)] = values
    return out


def _line(passed: bool, figure: str, text: str) -> str:
    return f"{'PASS' if passed else 'FAIL'} {figure} {text}"


def relative(a: float, b: float) -> float:
    if a == b:
        return 0.0
    if any(math.isnan(x) or math.isinf(x) for x in (a, b)):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def check_losses(reference: Path, resumed: Path, rtol: float) -> tuple[bool, str, float]:
    ref, res = losses(reference), losses(resumed)
    if not ref or ref.keys() != res.keys():
        only = sorted(ref.keys() ^ res.keys())[:4]
        return False, f"different optimizer steps logged ({len(ref)} vs {len(res)}; e.g. {only})", math.inf
    worst = max(relative(ref[k], res[k]) for k in ref)
    return worst <= rtol, f"= {worst:.3g} max relative difference over {len(ref)} optimizer steps (<= {rtol:g})", worst


def check_metrics(reference: Path, resumed: Path, atol: float, rtol: float) -> tuple[bool, str, float]:
    """Every numeric metric within ``atol + rtol * max(|a|, |b|)`` (both NaN counts as equal)."""
    ref, res = metrics(reference), metrics(resumed)
    if not ref or ref.keys() != res.keys():
        return False, f"different metric rows ({len(ref)} vs {len(res)})", math.inf
    worst, count, outside = 0.0, 0, 0
    for key, values in ref.items():
        if values.keys() != res[key].keys():
            return False, f"row {key} holds different metrics", math.inf
        for name, a in values.items():
            b = res[key][name]
            diff = 0.0 if (a == b or (math.isnan(a) and math.isnan(b))) else abs(a - b)
            worst = max(worst, diff)
            outside += diff > atol + rtol * max(abs(a), abs(b))
            count += 1
    text = f"= {worst:.3g} max absolute difference, {outside} of {count} values outside {atol:g} + {rtol:g} x |value|"
    return outside == 0, text, worst


def check_peak(reference: Path, band: tuple[float, float]) -> tuple[str, float | None]:
    peaks = [r["peak_mem_gb"] for r in read_jsonl(reference / "train_log.jsonl") if r.get("peak_mem_gb")]
    log = reference / "train.log"
    found = (
        re.findall(r"memory preflight, per device: ([\d.]+) GiB", log.read_text(errors="replace"))
        if log.is_file()
        else []
    )
    if not peaks or not found:
        return "INFO peak_vs_preflight not measured (no CUDA peak logged, or no preflight line)", None
    peak_gib, estimate = max(peaks) * 1e9 / 2**30, float(found[-1])
    ratio = peak_gib / estimate if estimate else math.inf
    text = f"= {ratio:.2f} (peak {peak_gib:.2f} GiB / estimate {estimate:.2f} GiB; {band[0]}-{band[1]})"
    return _line(band[0] <= ratio <= band[1], "peak_vs_preflight", text), ratio


LOAD_LINE = re.compile(
    r"model: [\d.]+M parameters from steps/\d+\n.*?weights: ([\d.]+) GiB in \w+ on (\S+); "
    r"host memory of this process ([+-][\d.]+) GiB while loading"
)


def check_host_load(resumed: Path, bound: float) -> tuple[str, float | None]:
    log = resumed / "train.log"
    found = LOAD_LINE.findall(log.read_text(errors="replace")) if log.is_file() else []
    if not found:
        return "INFO host_load_vs_weights not measured (no checkpoint load with host memory in train.log)", None
    weights, device, host = float(found[-1][0]), found[-1][1], float(found[-1][2])
    ratio = host / weights if weights else math.inf
    text = f"= {ratio:.2f} (host {host:+.2f} GiB / weights {weights:.2f} GiB on {device}; at most {bound})"
    if not device.startswith("cuda"):
        return f"INFO host_load_vs_weights {text}", ratio
    return _line(ratio <= bound, "host_load_vs_weights", text), ratio


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reference", type=Path)
    parser.add_argument("resumed", type=Path)
    parser.add_argument("--loss-rtol", type=float, default=0.0)
    parser.add_argument("--metric-atol", type=float, default=0.0)
    parser.add_argument("--metric-rtol", type=float, default=0.0)
    parser.add_argument("--preflight-band", type=float, nargs=2, default=(0.75, 1.25))
    parser.add_argument("--host-load-max", type=float, default=0.25)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    log = args.resumed / "train.log"
    resumed = (
        re.search(r"resuming time step \d+ from the training state (\S+)", log.read_text(errors="replace"))
        if log.is_file()
        else None
    )
    lines = [
        _line(resumed is not None, "resumed", f"from {resumed.group(1)}" if resumed else "(no resume in train.log)")
    ]
    ok_l, text_l, loss_diff = check_losses(args.reference, args.resumed, args.loss_rtol)
    ok_m, text_m, metric_diff = check_metrics(args.reference, args.resumed, args.metric_atol, args.metric_rtol)
    lines += [_line(ok_l, "resume_losses", text_l), _line(ok_m, "resume_metrics", text_m)]
    peak_line, ratio = check_peak(args.reference, tuple(args.preflight_band))
    host_line, host_ratio = check_host_load(args.resumed, args.host_load_max)
    lines += [peak_line, host_line]
    print("\n".join(lines))
    if args.out:
        figures = {"loss_max_rel_diff": loss_diff, "metric_max_abs_diff": metric_diff, "peak_vs_preflight": ratio}
        figures["host_load_vs_weights"] = host_ratio
        args.out.write_text(json.dumps({k: (None if v == math.inf else v) for k, v in figures.items()}, indent=1))
    return 0 if all(not line.startswith("FAIL") for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
