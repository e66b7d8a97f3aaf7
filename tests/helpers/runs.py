"""Run dirs a test makes or reads: tiny runs, hand-made rows, sweeps, W&B offline files, a headless browser."""

from helpers import forked
from helpers import TINY
from helpers.data import write_jsonl
from helpers.processes import ROOT

import json
from pathlib import Path
import random
import subprocess
import os
import sys
import struct
import time
import importlib.util
import pytest
import yaml


def fake_run(
    path: Path,
    outcomes: dict[str, dict[str, int]],
    checkpoint: int = 2,
    extra_rows=(),
    predictions: dict[str, dict[str, str]] | None = None,
) -> Path:
    """A finished run dir whose final checkpoint has ``outcomes`` {column: {id: 0/1}}."""
    rows = []
    for column, by_id in outcomes.items():
        kind, _, step = column.partition("_")
        em = sum(by_id.values()) / len(by_id)
        rows.append(
            {
                "group": "splits",
                "checkpoint": checkpoint,
                "set": kind,
                "set_name": column,
                "set_step": int(step) if step else None,
                "n": len(by_id),
                "em": em,
                "f1": em,
            }
        )
        write_jsonl(
            path / "predictions" / f"step_{checkpoint}" / f"{column}.jsonl",
            [
                {"id": i, "prediction": (predictions or {}).get(column, {}).get(i, "p"), "correct": c}
                for i, c in by_id.items()
            ],
        )
    write_jsonl(path / "metrics.jsonl", rows + list(extra_rows))
    (path / "summary.json").write_text(json.dumps({"method": path.name, "seed": 0, "experiment": "t"}))
    return path


SETS = {
    0: ["unchanged"],
    1: ["unchanged", "new_1", "updated_1", "outdated_1"],
    2: ["unchanged", "new_1", "updated_1", "outdated_1", "new_2", "updated_2", "outdated_2"],
}


def make_run(
    run_dir: Path, seed: int, method: str = "full", skill: float = 0.6, n: int = 40, paired: bool = True
) -> Path:
    """A finished run dir in the framework's layout with random (seeded) per-item outcomes."""
    rng = random.Random(f"{method}/{seed}")
    rows, em = [], {}
    for ckpt, columns in SETS.items():
        for column in columns:
            kind, _, step = column.partition("_")
            items = [
                {
                    "id": f"{column}/q{i}",
                    "prompt": f"Q{i}",
                    "generation": "x",
                    "prediction": "x",
                    "golds": ["y"],
                    "correct": int(rng.random() < skill * (0.5 if kind == "outdated" else 1)),
                    "f1": 0.0,
                }
                for i in range(n)
            ]
            folder = run_dir / "predictions" / f"step_{ckpt}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{column}.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
            value = sum(i["correct"] for i in items) / n
            em.setdefault(str(ckpt), {})[column] = value
            rows.append(
                {
                    "group": "splits",
                    "checkpoint": ckpt,
                    "set": kind,
                    "set_name": column,
                    "set_step": int(step) if step else None,
                    "n": n,
                    "em": value,
                    "f1": value,
                    "method": method,
                    "seed": seed,
                    "train_seconds": 1.0,
                    "train_tokens": 100,
                }
            )
        if paired and ckpt > 0:
            rows.append(
                {
                    "group": "paired",
                    "checkpoint": ckpt,
                    "set": "pairs",
                    "set_name": "pairs",
                    "set_step": None,
                    "n": 10,
                    "update_adoption": rng.random(),
                    "confusion_index": rng.random(),
                    "method": method,
                    "seed": seed,
                }
            )
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "summary.json").write_text(
        json.dumps({"run_dir": str(run_dir), "experiment": "synth", "method": method, "seed": seed, "em": em, "f1": em})
    )
    train_log = [
        {"time_step": t, "optimizer_step": s, "loss": 5.0 - t - s / 10, "lr": 1e-3, "tokens": 10 * s}
        for t in SETS
        for s in (2, 4, 6)
    ]
    (run_dir / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train_log))
    return run_dir


# -- the HTML in a real browser ------------------------------------------------------------------------


def screenshot(chromium: str, html: Path, shot: Path, size: tuple[int, int] = (1200, 1600)):
    """Render ``html`` in headless Chromium into ``shot``; returns the RGB pixels, checked to be a real page
    (not blank, many colours: text, tables and the embedded plots)."""
    import matplotlib.image as mpimg
    import numpy as np

    command = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={shot.parent / 'chromium-profile'}",
        f"--screenshot={shot}",
        f"--window-size={size[0]},{size[1]}",
        html.resolve().as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert shot.exists(), f"no screenshot (rc {done.returncode}): {done.stderr[-800:]}"
    pixels = mpimg.imread(shot)[..., :3]
    assert pixels.shape[:2] == (size[1], size[0])
    assert pixels.std() > 0.05  # not a blank page
    colours = np.unique((pixels.reshape(-1, 3) * 255).astype(np.uint8), axis=0)
    assert len(colours) > 50  # text, tables and the embedded plots, not a flat error page
    return pixels


def run_sweep(sweep: Path, *overrides: str) -> list[Path]:
    """``train.py -m`` on the tiny world into ``sweep``; the run dirs it wrote (summary.json), sorted."""
    command = [sys.executable, "train.py", "-m", *TINY, f"hydra.sweep.dir={sweep}", *overrides]
    done = forked.python(command, env={**os.environ, "WANDB_MODE": "disabled"}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return sorted(p.parent for p in sweep.rglob("summary.json") if ".step0_cache" not in p.parts)


BLOCK = 32 * 1024


FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_records(path: Path) -> list:
    """Every protobuf Record of an offline ``.wandb`` file."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    records, pos, pending = [], 7, b""
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # block trailer too short for a header: skip to the next block
            pos += BLOCK - pos % BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 or pos + 7 + length > len(data):  # zero padding, or a record still being written
            break
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (FULL, FIRST):
            pending = chunk
        elif kind in (MIDDLE, LAST):
            pending += chunk
        if kind in (FULL, LAST):
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def _key(item) -> str:
    return "/".join(item.nested_key) if item.nested_key else item.key


def parse_offline_run(run_folder: Path, timeout: float = 60.0) -> dict:
    """run (the RunRecord), config, history rows, merged summary, metric definitions, exit code.

    ``run.finish()`` can return before wandb-core has flushed the file, so wait for its exit record."""
    deadline = time.monotonic() + timeout
    while True:
        parsed = _parse_offline_run(run_folder)
        if parsed["exit_code"] is not None or time.monotonic() > deadline:
            return parsed
        time.sleep(0.2)


def _parse_offline_run(run_folder: Path) -> dict:
    (log_file,) = run_folder.glob("run-*.wandb")
    out = {"run": None, "config": {}, "history": [], "summary": {}, "metrics": {}, "exit_code": None}
    for record in read_records(log_file):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["run"] = record.run
            out["config"].update({u.key: json.loads(u.value_json) for u in record.run.config.update})
        elif kind == "config":
            out["config"].update({u.key: json.loads(u.value_json) for u in record.config.update})
        elif kind == "history":
            out["history"].append({_key(i): json.loads(i.value_json) for i in record.history.item})
        elif kind == "summary":
            out["summary"].update({_key(u): json.loads(u.value_json) for u in record.summary.update})
        elif kind == "metric":
            out["metrics"][record.metric.name or record.metric.glob_name] = record.metric.step_metric
        elif kind == "exit":
            out["exit_code"] = record.exit.exit_code
    return out


def offline_runs(run_dir: Path) -> list[Path]:
    return sorted((run_dir / "wandb").glob("offline-run-*"))


_spec = importlib.util.spec_from_file_location("resume_check", ROOT / "scripts" / "resume_check.py")
resume_check = importlib.util.module_from_spec(_spec)  # scripts/resume_check.py, as gpu_check.sh runs it
_spec.loader.exec_module(resume_check)


def hydra_run(run_dir: Path, method: str, seed: int, skill: float, lr: float = 0.001, threads: int = 0) -> Path:
    """A synthetic finished run with the ``.hydra/`` files a Hydra job saves."""
    make_run(run_dir, seed, method, skill)
    (run_dir / ".hydra").mkdir()
    config = {
        "method": {"name": method},
        "trainer": {"lr": lr, "num_threads": threads},
        "seed": seed,
        "run_dir": None,
        "logger": {"backends": ["disk"]},
        "data": {"world": {"n_entities": 12}},
    }
    (run_dir / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    overrides = [f"method={method}", f"seed={seed}", "data.world.n_entities=12", f"trainer.num_threads={threads}"]
    overrides += [f"trainer.lr={lr}"] if lr != 0.001 else []
    (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    return run_dir


@pytest.fixture
def sweep(tmp_path) -> Path:
    """full and lora, seeds 0, 1, 2 each, in dirs whose names say nothing (runs are found by content)."""
    root = tmp_path / "sweep"
    for index, (method, seed, skill) in enumerate(
        [(m, s, k) for m, k in (("full", 0.7), ("lora", 0.45)) for s in (0, 1, 2)]
    ):
        hydra_run(root / f"job{index}" / "out", method, seed, skill, threads=seed)  # threads: not a result key
    return root
