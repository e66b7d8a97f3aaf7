"""A two-process CPU run (gloo) with an empty tokenized cache and a tokenizer slower than the process group's
timeout (``trainer.dist_timeout_s``): one rank builds each entry while the other waits on the entry's file
lock, not in a collective, so the run completes, and its entries hold the rows a one-process run writes.

The two ranks are ``accelerate launch`` of a wrapper script, not forked ranks (tests/helpers/forked.py): most of the
test's time is the intended waits (12 s per building rank) against the 8 s timeout, so forking would save only the
imports. The whole run's other work (setup, training, evaluation of its three time steps) takes about 4 s, so no
other collective comes near the timeout. The one-process reference is trained in this process: only its rows
are compared."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import TINY, read_jsonl, train_tiny
from helpers.processes import ROOT, free_port, run

TIMEOUT_S, SLOW_S, REPORT_S = 8, 12, 5

SLOW_TRAIN = f"""
import runpy, sys, time
from evolve_train.data import cache
from evolve_train.training import compact_rows

write_rows = compact_rows.write_rows
cache.WAIT_REPORT_S = {REPORT_S}  # the waiting rank's lock times out and is taken again, logging the wait


def slow(batches, sink, vocab_size):
    if isinstance(sink, str):  # a cache entry being built: the first one of this process takes {SLOW_S} s more
        if not getattr(slow, "slept", False):
            slow.slept = True
            time.sleep({SLOW_S})
    return write_rows(batches, sink, vocab_size)


compact_rows.write_rows = slow
sys.argv[0] = {str(ROOT / "train.py")!r}
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def entries(cache: Path) -> dict[str, bytes]:
    return {p.parent.name: p.read_bytes() for p in sorted((cache / "tokens").glob("*/rows.arrow"))}


@pytest.mark.slow
def test_two_ranks_wait_for_slow_rows_on_a_file_lock_not_a_collective(tmp_path):
    script = tmp_path / "slow_train.py"
    script.write_text(SLOW_TRAIN, encoding="utf-8")
    overrides = [*TINY, "trainer.num_threads=1", "trainer.epochs_step0=1", "trainer.epochs=1", "method=replay"]
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    train_tiny(single, *overrides, f"data.cache_dir={tmp_path / 'cache1'}")
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    launch += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    run(
        [
            *launch,
            "--main_process_port",
            str(free_port()),
            str(script),
            *overrides,
            "trainer.batch_size=8",
            f"trainer.dist_timeout_s={TIMEOUT_S}",
            f"data.cache_dir={tmp_path / 'cache2'}",
            f"hydra.run.dir={ddp}",
        ],
        {"ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"},
    )
    assert {r["num_processes"] for r in read_jsonl(ddp / "metrics.jsonl")} == {2}
    assert json.loads((ddp / "state.json").read_text())["trained"] == [0, 1, 2]
    written = entries(tmp_path / "cache2")
    assert len(written) >= 3 and written == entries(tmp_path / "cache1")  # the same keys, the same rows
