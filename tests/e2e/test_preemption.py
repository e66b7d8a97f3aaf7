"""Preemption at every point of a run (in process, real signals): a SIGTERM during a checkpoint write, during an
evaluation or during generative sampling is deferred to the end of what it interrupted; the run stops there
(exit 143) and the same command resumes without repeating a completed optimizer update, to the rows of an
uninterrupted run. A run killed during an evaluation resumes by evaluating the trained step only.

Optimizer updates of a rerun are counted at the ``optimizer_step`` fault point (training/faults.py) with a fault
planned past the end, so the count is exact. Also here: equal batches on every process (the short last batch)
and the main process as the only one that logs INFO.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from evolve_train.run import log_on_main_only, train
from evolve_train.training import faults, signals
from evolve_train.training.examples import LengthGroupedBatches
from evolve_train.training.signals import DeferredSignals
from evolve_train.training.train_state import list_states
from helpers import tiny_cfg, wall_clock
from helpers.faults import FAST, assert_same_as, metrics, train_log

STEP0_BATCHES = 21  # optimizer steps of time step 0 of the tiny config
NEVER = "optimizer_step:1000000"  # counts every arrival, delivers nothing
STEP_UPDATES = 12  # optimizer steps of time steps 1 and 2 of the tiny config (test_reliability.py)


@pytest.fixture(autouse=True)
def fresh_fault_counts(monkeypatch):
    monkeypatch.setattr(faults, "_arrivals", {})
    monkeypatch.delenv(faults.ENV, raising=False)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def state(run_dir: Path) -> dict:
    return json.loads((run_dir / "state.json").read_text())


def interrupted(run_dir: Path, monkeypatch, fault: str, *overrides: str) -> int:
    """Run with ``fault`` (a real signal to this process); the exit code."""
    monkeypatch.setenv(faults.ENV, fault)
    with pytest.raises(SystemExit) as exit_info:
        train(tiny_cfg(run_dir, *FAST, *overrides))
    return exit_info.value.code


def rerun_updates(run_dir: Path, monkeypatch, *overrides: str) -> int:
    """Run the same command again; the optimizer updates it made."""
    monkeypatch.setattr(faults, "_arrivals", {})
    monkeypatch.setenv(faults.ENV, NEVER)
    train(tiny_cfg(run_dir, *FAST, *overrides))
    return faults._arrivals.get("optimizer_step", 0)


def test_sigterm_during_an_evaluation_finishes_it_stops_and_the_rerun_trains_only_what_is_left(
    reference, tmp_path, monkeypatch
):
    run_dir = tmp_path / "run"
    assert interrupted(run_dir, monkeypatch, "evaluate:2:SIGTERM") == 143  # step 1's evaluation
    assert (state(run_dir)["trained"], state(run_dir)["evaluated"]) == ([0, 1], [0, 1])
    assert rerun_updates(run_dir, monkeypatch) == STEP_UPDATES  # step 2 only
    assert_same_as(reference, run_dir)


def test_a_run_killed_during_an_evaluation_resumes_by_evaluating_the_trained_step_only(
    reference, tmp_path, monkeypatch, caplog
):
    run_dir = tmp_path / "run"
    monkeypatch.setenv(faults.ENV, "evaluate:2:raise")  # stands in for a kill: nothing after it runs
    with pytest.raises(RuntimeError, match="fault injected"):
        train(tiny_cfg(run_dir, *FAST))
    assert (state(run_dir)["trained"], state(run_dir)["evaluated"]) == ([0, 1], [0])
    caplog.set_level(logging.INFO)
    assert rerun_updates(run_dir, monkeypatch) == STEP_UPDATES  # step 1 evaluated, not trained again
    assert "step 1 is trained, its evaluation runs again" in caplog.text
    assert_same_as(reference, run_dir)


def test_sigterm_during_a_checkpoint_write_completes_it_and_the_rerun_evaluates_before_training(
    reference, tmp_path, monkeypatch
):
    run_dir = tmp_path / "run"
    assert interrupted(run_dir, monkeypatch, "checkpoint_write:2:SIGTERM") == 143  # step 1's checkpoint
    assert (state(run_dir)["trained"], state(run_dir)["evaluated"]) == ([0, 1], [0])
    assert rerun_updates(run_dir, monkeypatch) == STEP_UPDATES
    assert_same_as(reference, run_dir)


def test_submitits_signal_stops_at_the_next_optimizer_step_saves_a_state_and_only_then_requeues(
    reference, tmp_path, monkeypatch
):
    """submitit's SIGUSR2 handler (here a stand-in that records what was saved when it ran) is called once every
    process stopped at an optimizer step with its state saved; the rerun continues from that state."""
    run_dir = tmp_path / "run"
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
    calls = []

    def requeue(signum, frame):
        calls.append((signum, [(step, opt) for step, opt, _ in list_states(run_dir)]))
        raise SystemExit(-1)  # what submitit's handler does on global rank 0 after requeueing

    previous = signal.signal(signal.SIGUSR2, requeue)
    try:
        assert interrupted(run_dir, monkeypatch, f"optimizer_step:{STEP0_BATCHES + 6}:SIGUSR2") == -1
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert calls == [(signal.SIGUSR2, [(1, 7)])]  # once, after the state at step 1's optimizer step 7
    monkeypatch.delenv("SUBMITIT_EXECUTOR")
    assert rerun_updates(run_dir, monkeypatch) == (STEP_UPDATES - 7) + STEP_UPDATES
    assert_same_as(reference, run_dir)


GEN = ["method=generative_replay", "method.generative.samples=6", "method.generative.max_new_tokens=12"]


def test_sigterm_during_generative_sampling_keeps_the_samples_and_the_rerun_matches(tmp_path, monkeypatch, caplog):
    plain = tmp_path / "plain"
    train(tiny_cfg(plain, *FAST, *GEN))
    run_dir = tmp_path / "run"
    assert interrupted(run_dir, monkeypatch, "sample:1:SIGTERM", *GEN) == 143  # step 1's samples
    assert (state(run_dir)["trained"], state(run_dir)["evaluated"]) == ([0], [0])
    assert (run_dir / "generated" / "step_1.jsonl").is_file()
    caplog.set_level(logging.INFO)
    assert rerun_updates(run_dir, monkeypatch, *GEN) == 2 * STEP_UPDATES  # steps 1 and 2, nothing twice
    assert "generative replay (step 1): the samples of" in caplog.text  # read back, not sampled again

    # everything but timings (and whether the samples were read back) is the uninterrupted run's
    def kept(rows):
        return [{k: v for k, v in r.items() if k != "samples_reused" and not wall_clock(k)} for r in rows]

    assert kept(metrics(run_dir)) == kept(metrics(plain))
    assert kept(train_log(run_dir)) == kept(train_log(plain))


@pytest.mark.parametrize("processes", [1, 2, 3, 4])
def test_every_process_gets_rows_of_every_batch_the_short_last_one_included(processes):
    rng = random.Random(processes)
    for rows in range(processes, 90):
        for batch_size, group in [(1, 1), (2, 1), (3, 2), (4, 50)]:
            lengths = [rng.randint(1, 9) for _ in range(rows)]
            batches = LengthGroupedBatches(lengths, batch_size * processes, 0, group, processes)
            epoch = batches.epoch(0)
            assert len(epoch) == len(batches)
            assert sorted(i for b in epoch for i in b) == list(range(rows))  # every row once
            assert all(len(b[p::processes]) > 0 for b in epoch for p in range(processes))
            if processes == 1:
                assert epoch == LengthGroupedBatches(lengths, batch_size, 0, group).epoch(0)


def test_fewer_rows_than_processes_is_a_clear_error():
    with pytest.raises(ValueError, match="3 training rows for 4 processes"):
        LengthGroupedBatches([1, 2, 3], 8, 0, 50, 4).epoch(0)


def test_only_the_main_process_logs_info(caplog):
    root = logging.getLogger()
    level = root.level
    try:
        root.setLevel(logging.INFO)
        log_on_main_only(0)
        logging.getLogger("evolve_train.x").info("main's line")
        log_on_main_only(1)
        logging.getLogger("evolve_train.x").info("another's line")
        logging.getLogger("evolve_train.x").warning("another's warning")
    finally:
        root.setLevel(level)
    assert "main's line" in caplog.text and "another's warning" in caplog.text
    assert "another's line" not in caplog.text


def test_faults_parse_actions_and_ranks():
    assert faults.parse("evaluate:2,optimizer_step:5:raise@1,sample:1:SIGTERM") == [
        ("evaluate", 2, 9, None),
        ("optimizer_step", 5, faults.RAISE, 1),
        ("sample", 1, 15, None),
    ]
    with pytest.raises(ValueError, match="bad fault"):
        faults.parse("optimizer_step:5:explode")


def test_a_pause_fault_holds_the_process_until_a_signal_handler_has_run(monkeypatch):
    assert faults.parse("optimizer_step:3:pause@0") == [("optimizer_step", 3, faults.PAUSE, 0)]
    monkeypatch.setenv(faults.ENV, "optimizer_step:2:pause")
    monkeypatch.setattr(faults, "_arrivals", {})
    handled = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: handled.append(signum))
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        started = time.monotonic()
        faults.point("optimizer_step")  # the first arrival passes
        assert time.monotonic() - started < 0.2 and not handled
        timer.start()
        faults.point("optimizer_step")  # the second waits for the signal
        assert handled == [signal.SIGUSR1] and time.monotonic() - started >= 0.25
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)


def test_the_same_signal_twice_at_once_is_one_request_and_a_later_one_acts_at_once(monkeypatch):
    """On a SLURM step every rank gets SIGTERM from the scheduler and again from torchrun, milliseconds apart:
    that is one request (a state is still saved); a second signal after the window reaches the previous handler."""
    previous_calls = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: previous_calls.append(signum))
    notified = []
    deferred = DeferredSignals(notify=notified.append, extra=(signal.SIGUSR1,))
    deferred.install()
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGUSR1)  # the launcher's copy
        time.sleep(0.05)
        assert deferred.received == signal.SIGUSR1 and notified == [signal.SIGUSR1] and previous_calls == []
        monkeypatch.setattr(signals, "REPEAT_WINDOW_S", 0.0)
        os.kill(os.getpid(), signal.SIGUSR1)  # a second request
        time.sleep(0.05)
        assert previous_calls == [signal.SIGUSR1] and notified == [signal.SIGUSR1]
        assert signal.getsignal(signal.SIGUSR1) != deferred._handle  # the previous handler is back
    finally:
        deferred.restore()
        signal.signal(signal.SIGUSR1, previous)


def test_a_forked_worker_takes_sigterm_as_usual_not_as_the_runs_request():
    """A library's worker pool forked during a run (lm-eval, datasets) stops its workers with SIGTERM: a worker
    must end, not log the run's "stopping at the next safe point" and carry on."""
    import multiprocessing

    deferred = DeferredSignals()
    deferred.install()
    try:
        child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(30,))
        child.start()
        time.sleep(0.2)
        os.kill(child.pid, signal.SIGTERM)
        child.join(timeout=10)
        assert child.exitcode == -signal.SIGTERM
        assert deferred.received is None  # the run itself got nothing
    finally:
        deferred.restore()
