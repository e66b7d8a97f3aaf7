"""The processes of a run forked from a Python that has already imported torch, transformers, accelerate, peft,
hydra and evolve_train, in place of ``python script`` or ``accelerate launch ... script`` as a fresh command.

A ``multiprocessing`` forkserver, started once per test process with :data:`PRELOAD` imported (with
``OMP_NUM_THREADS`` of the test process, 1 under scripts/test.sh: the OpenMP runtime reads it when torch loads),
forks each rank. A rank gets the environment the command would give it: the test process's, W&B off, the test's
``env``, and for several ranks what ``accelerate launch`` sets (:func:`launch_env`: accelerate's own launch code
asked about the same flags as :func:`helpers.processes.accelerate_launch`, then torchrun's per-worker ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``... and a free ``MASTER_PORT``). It runs ``script`` as ``__main__`` from the repo root
with ``sys.argv = [script, *args]``, its stdout and stderr into a file, and exits as the command's process would:
0, the ``SystemExit`` code, 1 after an uncaught exception (traceback on stderr), minus the signal number when a
signal killed it. As torchrun does, the first rank to fail stops the others (SIGTERM, SIGKILL 30 s later).

A variable read while :data:`PRELOAD` was imported is read once, in the forkserver: a rank whose value differs
(one a test sets) is refused rather than run with the stale one (:func:`refuse_stale`). The command line itself
(argument parsing of ``accelerate launch``, torchrun's agent) is what tests/distributed/test_ddp.py and the
modules that keep ``accelerate launch`` cover.
"""

from __future__ import annotations

import atexit
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
TESTS = str(ROOT / "tests")

PRELOAD = [
    "forked",  # this file, first and on its own: the environment before the imports, and which variables they read
    "torch",
    "torch.distributed.checkpoint",
    "transformers",
    "accelerate",
    "peft",
    "hydra",
    "safetensors.torch",
    "evolve_train.config",
    "evolve_train.run",
    "evolve_train.cli.train",
    "evolve_train.cli.dry_run",
    "evolve_train.config_renames",
    "helpers",
]
FIXED_AT_LOAD = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "KMP_AFFINITY", "GOMP_CPU_AFFINITY", "LD_PRELOAD")
"""Variables native libraries read when they load (the OpenMP runtime with torch), whatever Python reads."""
UNSTALE = (
    "PYTHONPATH",
    "PYTEST_CURRENT_TEST",
    "COLUMNS",
    "LINES",
    "HF_XET_HIGH_PERFORMANCE",
    "HF_HUB_ENABLE_HF_TRANSFER",
)
"""Read at import but harmless to differ: the forkserver's module path, pytest's name of the current test (read as
"under pytest", set in every rank as in every launched process), the terminal size (formatting) and two
download-speed flags of huggingface_hub (importing lm-eval in a test process sets them there; offline runs never
download)."""
STOP_GRACE_S = 30
"""After the first rank fails, the others get SIGTERM, then SIGKILL this much later (torchrun's default)."""

IMPORTED_IN = os.getpid()
BEFORE_IMPORTS = dict(os.environ)
READ_AT_IMPORT: set[str] = set()
_getitem = os._Environ.__getitem__


SCANS = ("fsspec/config.py", "tqdm/utils.py")
"""Modules that scan the whole environment at import for their own prefix (``FSSPEC_*``, ``TQDM_*``): the other
variables they pass over are not read."""


def _recording_getitem(self, key):
    frame, depth = sys._getframe(1), 0
    while frame is not None and depth < 4 and not frame.f_code.co_filename.endswith(SCANS):
        frame, depth = frame.f_back, depth + 1
    if frame is None or depth == 4 or key.startswith(("FSSPEC_", "TQDM_")):
        READ_AT_IMPORT.add(key)
    return _getitem(self, key)


if sys.argv[:1] == ["-c"] and "multiprocessing.forkserver" in sys.modules:  # imported by the forkserver itself
    os._Environ.__getitem__ = _recording_getitem


@dataclass(frozen=True)
class Ranks:
    """How the processes start: ``processes`` ranks under an accelerate config of ``accelerate_configs/``
    (``"fsdp"``), plain data parallel (``config=""``, ``--multi_gpu``), or one process without a launcher
    (``config=None``: ``python script``)."""

    processes: int = 2
    config: str | None = "fsdp"


FSDP2 = Ranks(2, "fsdp")
DDP = Ranks(2, "")
ONE = Ranks(1, None)


@dataclass
class Completed:
    """What a finished launch left: the first failing rank's exit code (0 when none failed) and its output."""

    returncode: int
    stdout: str
    stderr: str
    codes: list[int]


def launch_env(ranks: Ranks, port: int, environ: dict[str, str]) -> dict[str, str]:
    """The environment ``accelerate launch`` with :func:`helpers.processes.accelerate_launch`'s flags, started
    with ``environ``, gives every process (accelerate's ``_validate_launch_command`` and ``prepare_multi_gpu_env``,
    as it runs them, under ``environ``); torchrun's per-rank variables are :func:`rank_env`'s."""
    import warnings

    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env

    from helpers.processes import accelerate_launch

    flags = accelerate_launch(ranks.processes, ranks.config or None, port)[3:]  # after python -m <module>
    cwd = os.getcwd()
    os.chdir(ROOT)  # where the command runs: the config file's path is relative to it
    try:
        with mock.patch.dict(os.environ, environ, clear=True), warnings.catch_warnings():
            args, _, _ = _validate_launch_command(launch_command_parser().parse_args([*flags, "train.py"]))
            warnings.simplefilter("ignore")
            return dict(prepare_multi_gpu_env(args))
    finally:
        os.chdir(cwd)


def rank_env(rank: int, processes: int, port: int) -> dict[str, str]:
    """torchrun's per-worker variables on one machine (its agent's store not used: rank 0 hosts the store)."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "GROUP_RANK": "0",
        "ROLE_RANK": str(rank),
        "ROLE_NAME": "default",
        "WORLD_SIZE": str(processes),
        "LOCAL_WORLD_SIZE": str(processes),
        "GROUP_WORLD_SIZE": "1",
        "ROLE_WORLD_SIZE": str(processes),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": "none",
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    }


def ensure_server() -> None:
    """Start the forkserver if it is not running: a fresh interpreter (nothing of this process's torch state is
    forked) with the test process's environment and ``tests/`` importable."""
    multiprocessing.set_forkserver_preload(PRELOAD)
    here = [str(Path(__file__).parent), TESTS]  # this file as ``forked`` (before the helpers package), helpers
    path = os.pathsep.join([*here, *filter(None, [os.environ.get("PYTHONPATH")])])
    threads = os.environ.get("OMP_NUM_THREADS", "1")  # as :func:`launch` gives every rank
    with mock.patch.dict(os.environ, {"PYTHONPATH": path, "OMP_NUM_THREADS": threads}):
        multiprocessing.forkserver.ensure_running()


class StaleEnvironment(RuntimeError):
    """A variable read at import in the forkserver has another value in the rank's environment."""


STALE_EXIT = 113
"""A rank's exit status when :func:`refuse_stale` refused it (before anything of the script ran)."""


def refuse_stale(server, env: dict[str, str]) -> None:
    """In the forkserver's child: fail when ``env`` gives a variable read while :data:`PRELOAD` was imported (or
    one of :data:`FIXED_AT_LOAD`) another value than the forkserver had then (``server``: this file as the
    forkserver imported it)."""
    read = server.READ_AT_IMPORT | set(FIXED_AT_LOAD)
    before = server.BEFORE_IMPORTS
    stale = sorted(k for k in read if k not in UNSTALE and before.get(k) != env.get(k))
    if stale:
        raise StaleEnvironment(
            "forked rank: read at import in the forkserver with another value: "
            + ", ".join(f"{k}={before.get(k)!r} there, {env.get(k)!r} here" for k in stale)
        )


def _rank(script: str, args: list[str], env: dict[str, str], output: str, error: str | None = None) -> None:
    """One rank, in a process the forkserver forked: the environment, streams (stdout into ``output``, stderr
    into ``error`` or, without one, ``output`` too), signals, directory and argv of ``python script *args``, then
    the script as ``__main__``; exits as that process would."""
    server = sys.modules.get("forked")
    os._Environ.__getitem__ = _getitem
    os.setpgrp()  # its own process group: a stop reaches what it starts (compile workers...)
    for stream, path in ((1, output), (2, error or output)):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
        os.dup2(fd, stream)
        os.close(fd)
    code = 1
    try:
        if server is None or server.IMPORTED_IN == os.getpid() or "torch" not in sys.modules:
            raise RuntimeError("forked rank: the forkserver did not import this file (as forked) and torch first")
        refuse_stale(server, env)
        changed = {k: v for k, v in os.environ.items() if server.BEFORE_IMPORTS.get(k) != v and k != "PYTHONPATH"}
        removed = [k for k in server.BEFORE_IMPORTS if k not in os.environ]
        os.environ.clear()
        os.environ.update(env)
        os.environ.update(changed)  # what the imports set, as they would in the command's process
        for k in removed:
            os.environ.pop(k, None)
        if os.environ.get("PYTHONUNBUFFERED"):  # what `python -u` / PYTHONUNBUFFERED gives a fresh interpreter
            for stream in (sys.stdout, sys.stderr):
                stream.reconfigure(line_buffering=True, write_through=True)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(ROOT)
        path = str(ROOT / script)
        sys.path[:] = [str(Path(path).parent), *(p for p in sys.path if p not in ("", TESTS, str(ROOT)))]
        sys.argv[:] = [script, *args]
        try:
            runpy.run_path(path, run_name="__main__")
            code = 0
        except SystemExit as stop:
            if stop.code is None or isinstance(stop.code, int):
                code = stop.code or 0
            else:
                print(stop.code, file=sys.stderr)
                code = 1
    except StaleEnvironment as stale:
        print(stale, file=sys.stderr)
        code = STALE_EXIT
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        # the interpreter's own shutdown: non-daemon threads joined, exit handlers run, streams flushed
        try:
            threading._shutdown()
            atexit._run_exitfuncs()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:
                    pass
            os._exit(code & 0xFF)


def _signal_group(process: multiprocessing.Process, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait(processes: list, timeout: float) -> tuple[bool, int]:
    """Wait for every rank; after the first failure stop the others as torchrun does (SIGTERM, then SIGKILL
    :data:`STOP_GRACE_S` later). Whether ``timeout`` passed first (every rank then killed), and the exit code
    of the first rank that failed (0 if none)."""
    deadline = time.monotonic() + timeout
    stop_at, first = None, 0
    while any(p.exitcode is None for p in processes):
        multiprocessing.connection.wait([p.sentinel for p in processes if p.exitcode is None], timeout=0.2)
        now = time.monotonic()
        if stop_at is None and any(p.exitcode not in (None, 0) for p in processes):
            stop_at, first = now + STOP_GRACE_S, next(p.exitcode for p in processes if p.exitcode not in (None, 0))
            for p in processes:
                if p.exitcode is None:
                    try:
                        os.kill(p.pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
        if now > deadline or (stop_at is not None and now > stop_at):
            for p in processes:
                _signal_group(p, signal.SIGKILL)
            for p in processes:
                p.join(10)
            return now > deadline, first
    return False, first


def run_processes(processes: list, timeout: float) -> tuple[bool, int, list[int]]:
    """Start ``processes`` and :func:`wait` for them; whatever is still running at the end (past ``timeout``, or
    what a process started and left behind) is killed. Whether ``timeout`` passed, the first failure's exit code
    (0 if none) and every process's exit code."""
    timed_out, failed = False, 0
    try:
        for process in processes:
            process.start()
        timed_out, failed = wait(processes, timeout)
    finally:
        for p in processes:
            if p.pid is not None:
                if p.exitcode is None:
                    _signal_group(p, signal.SIGKILL)
                p.join(10)
                _signal_group(p, signal.SIGKILL)  # what a process started and left behind
    codes = [p.exitcode for p in processes]
    for p in processes:
        p.close()
    return timed_out, failed, codes


def launch(ranks: Ranks, command: list[str], env: dict | None = None, timeout: int = 500) -> Completed:
    """``command`` (``[script, *args]``) as ``ranks`` forked processes; the first failing rank's exit code (0 if
    none), every rank's output (rank 0's first). Past ``timeout`` every rank is killed and the test fails."""
    from helpers.processes import free_port

    ensure_server()
    script, *args = command
    base = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1", **(env or {})}
    port = free_port()
    if ranks.config is not None:
        base = launch_env(ranks, port, base)
    context = multiprocessing.get_context("forkserver")
    with tempfile.TemporaryDirectory(prefix="ranks-") as folder:
        outputs = [str(Path(folder) / f"rank{r}.txt") for r in range(ranks.processes)]
        processes = []
        for r in range(ranks.processes):
            env_r = {**base, **(rank_env(r, ranks.processes, port) if ranks.config is not None else {})}
            processes.append(context.Process(target=_rank, args=(script, list(args), env_r, outputs[r])))
        timed_out, failed, codes = run_processes(processes, timeout)
        text = [Path(o).read_text(errors="replace") if Path(o).exists() else "" for o in outputs]
    failed = failed or next((c for c in codes if c != 0), 0)
    output = "".join(text)
    if timed_out:
        raise AssertionError(f"ranks still running after {timeout} s (exit codes {codes}):\n{output[-6000:]}")
    return Completed(failed, output, "", codes)


def run_forked(ranks: Ranks, command: list[str], env: dict | None = None, timeout: int = 500) -> str:
    """:func:`helpers.processes.run` with forked ranks: every rank's stdout + stderr; fails the test unless every
    rank exited 0."""
    done = launch(ranks, command, env, timeout)
    assert done.returncode == 0 and set(done.codes) == {0}, (done.codes, done.stdout[-6000:])
    return done.stdout


def run_forked_killed(ranks: Ranks, command: list[str], env: dict, fault: str, timeout: int = 500) -> Completed:
    """:func:`helpers.processes.run_killed` with forked ranks: the fault point ``fault`` planted
    (``EVOLVE_TRAIN_FAULT``); fails the test unless the run died of it."""
    done = launch(ranks, command, {**env, "EVOLVE_TRAIN_FAULT": fault}, timeout)
    assert done.returncode != 0, done.stdout[-6000:]
    return done


def python(
    command: list[str], env: dict | None = None, timeout: int = 500, merged: bool = False
) -> subprocess.CompletedProcess:
    """``subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)`` for
    ``command = [sys.executable, script, *args]`` (``script`` relative to the repository root), run as one process
    forked from the preloaded Python instead of a fresh interpreter (the libraries' imports, ~6 s a process here,
    are paid once per test process). ``env`` is the process's whole environment, as for ``subprocess.run``
    (None: this process's); ``merged``: stderr into stdout (``stderr=subprocess.STDOUT``). The exit status is the
    command's (``-N`` when signal N killed it); past ``timeout`` the process is killed and the test fails."""
    executable, script, *args = command
    if executable != sys.executable or Path(script).is_absolute() and not Path(script).is_relative_to(ROOT):
        raise ValueError(f"forked.python runs `{sys.executable} <script of the repository> ...`, not {command[:2]}")
    ensure_server()
    context = multiprocessing.get_context("forkserver")
    with tempfile.TemporaryDirectory(prefix="python-") as folder:
        output, error = Path(folder) / "stdout.txt", Path(folder) / "stderr.txt"
        streams = (str(output), None if merged else str(error))
        process = context.Process(
            target=_rank, args=(script, list(args), dict(os.environ if env is None else env), *streams)
        )
        timed_out, _, (code,) = run_processes([process], timeout)
        stdout = output.read_text(errors="replace") if output.exists() else ""
        stderr = "" if merged or not error.exists() else error.read_text(errors="replace")
    if timed_out:
        raise AssertionError(
            f"`{' '.join(command[1:4])} ...` still running after {timeout} s:\n{(stdout + stderr)[-6000:]}"
        )
    if code == STALE_EXIT and "forked rank: read at import" in stdout + stderr:
        # the environment differs from the forkserver's in a variable a library reads when it loads: a fresh
        # interpreter reads it as the command's would (slower, never wrong); the warning names the variable
        warnings.warn(f"forked.python ran a fresh process: {(stdout + stderr).strip()[:500]}", stacklevel=2)
        streams = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT} if merged else {"capture_output": True}
        return subprocess.run(command, cwd=ROOT, env=env, text=True, timeout=timeout, **streams)
    return subprocess.CompletedProcess(command, code, stdout, None if merged else stderr)
