"""How a run ends its process group (``run.py: shut_down``, ``training/collectives.py: end_process_group``):
after a failure no barrier, no ``end_training`` and no ``destroy_process_group`` (which waits for pending
collectives: a hang when another rank sits in one), the NCCL communicators aborted; after a finished run the
orderly end. torch.distributed's functions are replaced by recorders: no process group is started."""

from __future__ import annotations

import pytest
import torch

from evolve_train.run import shut_down
from evolve_train.training import collectives


class Recorder:
    """An accelerator whose collectives call torch.distributed's, as accelerate's do."""

    def __init__(self, calls: list[str]):
        self.calls, self.trackers = calls, [self]

    def wait_for_everyone(self) -> None:
        torch.distributed.barrier()

    def end_training(self) -> None:
        self.calls.append("end_training")
        torch.distributed.destroy_process_group()

    def finish(self) -> None:  # the tracker
        self.calls.append("tracker finished")


@pytest.fixture
def calls(monkeypatch) -> list[str]:
    made: list[str] = []
    dist = torch.distributed
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: made.append("barrier"))
    monkeypatch.setattr(dist, "destroy_process_group", lambda *a, **k: made.append("destroy"))
    monkeypatch.setattr(dist.distributed_c10d, "_abort_process_group", lambda *a, **k: made.append("abort"))
    return made


def test_after_a_failure_nothing_waits_on_the_other_processes(calls):
    shut_down(None, Recorder(calls), ok=False)
    assert calls == ["tracker finished", "abort"]


def test_a_finished_run_ends_with_a_barrier_and_the_orderly_end(calls):
    shut_down(None, Recorder(calls), ok=True)
    assert calls == ["barrier", "end_training", "destroy", "destroy"]


def test_processes_stopped_together_by_a_signal_end_orderly_too(calls):
    shut_down(None, Recorder(calls), ok=False, agreed=True)
    assert "destroy" in calls and "abort" not in calls and calls[0] == "barrier"


def test_gloo_has_no_communicator_to_abort_and_a_failed_abort_is_only_logged(calls, monkeypatch, caplog):
    monkeypatch.setattr(torch.distributed, "get_backend", lambda group=None: "gloo")
    shut_down(None, None, ok=False)
    assert calls == []
    monkeypatch.setattr(torch.distributed, "get_backend", lambda group=None: "nccl")

    def broken() -> None:
        raise RuntimeError("communicator gone")

    monkeypatch.setattr(torch.distributed.distributed_c10d, "_abort_process_group", broken)
    shut_down(None, None, ok=False)
    assert calls == [] and "aborting the NCCL communicators failed: communicator gone" in caplog.text


def test_the_flight_recorder_is_on_unless_the_launch_set_it():
    environ = {"TORCH_NCCL_TRACE_BUFFER_SIZE": "0"}
    added = collectives.flight_recorder_defaults(environ)
    assert added == {"TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}
    assert environ == {"TORCH_NCCL_TRACE_BUFFER_SIZE": "0", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}
    assert collectives.flight_recorder_defaults({}) == collectives.FLIGHT_RECORDER
