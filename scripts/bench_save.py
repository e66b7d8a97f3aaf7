"""The ``save`` part of scripts/bench.py: how long a mid-step state takes to write, how many bytes each process
writes and how much host memory each process peaks at, for a model of Llama-3.2-1B's shape sharded with FSDP2.

    python scripts/bench.py --part save                    # the 1B shape over 2 gloo processes; ~5 min on 2 cores
    python scripts/bench.py --part save --save-size tiny   # seconds (the test's size)

The model is transformers' ``LlamaForCausalLM`` built from Llama-3.2-1B's config (width 2,048, 16 blocks, 32 query
and 8 key/value heads, MLP 8,192, a tied 128,256-row embedding: 1.24 B parameters; random weights, nothing
downloaded), fp32, in each of 2 processes (a gloo group on CPU), then sharded as accelerate's
``fsdp2_prepare_model`` shards it: ``fully_shard`` per transformer block, then the root. AdamW's moments are
created by one update per parameter on a small random gradient (no forward or backward), so each process holds
12 bytes per parameter / 2: weights and two moments. The state is then written through the project's own path,
``training/dcp_state.py``: ``save`` (at once, what a stop writes) and ``start_async_save`` (``dcp.async_save``: the
time training waits is the staging of a CPU copy; the total is until every file is written).

Each shape runs in 2 fresh processes (``OMP_NUM_THREADS=1`` each, as torchrun sets it), so each process's memory
is its own: resident (RSS) before the model is built; peak resident after it is built (with the AdamW state) and
after the save, each the process's peak since its start; beside them the resident memory just before the save and
the save's own peak (Linux's ``VmHWM``, reset just before the save; the reset also resets ``ru_maxrss``, so the
peak since the start is kept as the largest ``VmHWM`` read). Bytes written are the process's own ``.distcp`` files
(the main process also writes ``.metadata``). A background save holds the staged copy as well as the state:
about twice the memory. Where the full shape's background save would not fit in 75 % of the memory available
when the part starts (24 bytes per parameter over both processes, plus 1 GiB per process), it runs on the same
shape with fewer blocks, the most that fit: a note says so and every row gives its depth (``6/16`` blocks); the
at-once save is then measured at both depths.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# bench_memory's Llama config builder and peak readers (scripts/ is on the path). Resetting VmHWM resets
# ru_maxrss too (the kernel's one high-water mark), so the worker keeps its whole-life peak itself.
from bench_memory import llama_config, peak_rss, reset_peak

ROOT = Path(__file__).resolve().parents[1]
RANKS = 2
STATE_BYTES = 12  # per trainable parameter: the fp32 weight and AdamW's two fp32 moments
PROCESS_OVERHEAD = 2**30  # an interpreter with torch and transformers imported, per process
BUDGET_SHARE = 0.75  # of the memory available when the part starts
SIZES = {
    # width, blocks, query heads, key/value heads, MLP width, vocabulary (tied embedding and head)
    "1b": dict(hidden=2048, layers=16, heads=32, kv=8, ffn=8192, vocab=128256),  # Llama-3.2-1B's config
    "tiny": dict(hidden=64, layers=3, heads=4, kv=2, ffn=176, vocab=1000),
}
NAMES = {"1b": "Llama-3.2-1B's shape", "tiny": "a tiny Llama"}


def n_parameters(size: dict, layers: int | None = None) -> int:
    """The parameters of ``size`` at ``layers`` blocks (all of them by default): the tied embedding, per block
    the attention's four projections, the MLP's three and two norms, and the final norm."""
    hidden, kv_width = size["hidden"], size["kv"] * (size["hidden"] // size["heads"])
    block = 2 * hidden * hidden + 2 * hidden * kv_width + 3 * hidden * size["ffn"] + 2 * hidden
    return size["vocab"] * hidden + (size["layers"] if layers is None else layers) * block + hidden


def background_bytes(size: dict, layers: int) -> int:
    """The estimated memory of a background save over every process: the state and its staged copy."""
    return 2 * STATE_BYTES * n_parameters(size, layers) + RANKS * PROCESS_OVERHEAD


def available_bytes() -> int:
    """Memory available for new processes now (``MemAvailable``), or this machine's total where unknown."""
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def background_depth(size: dict, available: int) -> int:
    """The most blocks (up to all) at which a background save fits in :data:`BUDGET_SHARE` of ``available``."""
    budget = BUDGET_SHARE * available
    return max((k for k in range(size["layers"] + 1) if background_bytes(size, k) <= budget), default=0)


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def written_bytes(path: Path, rank: int) -> int:
    """Bytes of the shard files this rank wrote (``__<rank>_<n>.distcp``)."""
    return sum(f.stat().st_size for f in path.glob(f"__{rank}_*.distcp"))


def worker(spec: dict) -> dict:
    """One process of the launch: build, shard, create AdamW's state, then each save in ``spec["modes"]``."""
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from transformers import LlamaForCausalLM

    from evolve_train.training import dcp_state

    rank = spec["rank"]
    dist.init_process_group("gloo", init_method=spec["init"], rank=rank, world_size=spec["world"])
    out: dict = {"rank": rank, "rss_before_build_bytes": resident_bytes()}
    began = time.perf_counter()
    torch.manual_seed(0)
    model = LlamaForCausalLM(llama_config({**spec["size"], "layers": spec["layers"]}))
    for block in model.model.layers:
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for parameter in model.parameters():  # one at a time: a single shard's gradient exists at once
        grad = torch.zeros_like(parameter)
        grad.to_local().normal_(0.0, 1e-3)
        parameter.grad = grad
        optimizer.step()
        parameter.grad = None
    out["build_s"] = time.perf_counter() - began
    out["params"] = sum(p.numel() for p in model.parameters())
    out["local_params"] = sum(p.to_local().numel() for p in model.parameters())
    lifetime = out["peak_rss_after_build_bytes"] = peak_rss()  # never reset yet: the peak since the start
    root = Path(spec["dir"])
    for mode in spec["modes"]:
        path = root / f"{mode}-{spec['layers']}"
        dist.barrier()
        row: dict = {"rss_before_save_bytes": resident_bytes()}
        reset_peak()
        if mode == "sync":
            row["seconds"] = dcp_state.save(path, None, model, optimizer)
        else:
            pending = dcp_state.start_async_save(path, None, model, optimizer)
            row["wait_s"] = pending.staged_s
            row["total_s"] = pending.wait()
        row["save_peak_rss_bytes"] = peak_rss()
        lifetime = row["peak_rss_after_save_bytes"] = max(lifetime, row["save_peak_rss_bytes"])
        row["bytes_written"] = written_bytes(path, rank)
        if rank == 0:
            row["metadata_bytes"] = (path / ".metadata").stat().st_size
        dist.barrier()
        if rank == 0:
            shutil.rmtree(path)
        out[mode] = row
    dist.destroy_process_group()
    return out


def launch(size: dict, layers: int, modes: tuple[str, ...], directory: Path) -> dict:
    """:func:`worker` in :data:`RANKS` fresh processes; their rows by rank."""
    with tempfile.TemporaryDirectory() as scratch:
        spec = {"size": size, "layers": layers, "modes": list(modes), "dir": str(directory), "world": RANKS}
        spec["init"] = f"file://{scratch}/rendezvous"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        processes = [
            subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps({**spec, "rank": rank})],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for rank in range(RANKS)
        ]
        finished = [p.communicate(timeout=3600) for p in processes]
    failed = [(rank, err) for rank, (p, (_, err)) in enumerate(zip(processes, finished)) if p.returncode != 0]
    if failed:
        rank, err = failed[0]
        raise RuntimeError(f"the save part's rank {rank} at {layers} blocks failed:\n{err[-3000:]}")
    ranks = [json.loads(out.strip().splitlines()[-1]) for out, _ in finished]
    return {"layers": layers, "params": ranks[0]["params"], "modes": list(modes), "ranks": ranks}


def gib(n: int) -> float:
    return round(n / 2**30, 3)


def plain(run: dict) -> dict:
    """A run's figures with memory in GiB and seconds rounded, keys as printed."""
    ranks = []
    for r in run["ranks"]:
        row = {
            "rank": r["rank"],
            "local_params": r["local_params"],
            "build_s": round(r["build_s"], 2),
            "rss_before_build_gib": gib(r["rss_before_build_bytes"]),
            "peak_rss_after_build_gib": gib(r["peak_rss_after_build_bytes"]),
        }
        for mode in run["modes"]:
            save = r[mode]
            row[mode] = {
                **({"seconds": round(save["seconds"], 3)} if mode == "sync" else {}),
                **(
                    {"wait_s": round(save["wait_s"], 3), "total_s": round(save["total_s"], 3)}
                    if mode == "async"
                    else {}
                ),
                "bytes_written": save["bytes_written"],
                **({"metadata_bytes": save["metadata_bytes"]} if "metadata_bytes" in save else {}),
                "rss_before_save_gib": gib(save["rss_before_save_bytes"]),
                "save_peak_rss_gib": gib(save["save_peak_rss_bytes"]),
                "peak_rss_after_save_gib": gib(save["peak_rss_after_save_bytes"]),
            }
        ranks.append(row)
    return {"layers": run["layers"], "params": run["params"], "modes": run["modes"], "ranks": ranks}


def save_part(size_name: str = "1b", directory: Path | None = None) -> dict:
    """At-once save of the full shape; background save at the full shape or at the most blocks that fit."""
    size = SIZES[size_name]
    available = available_bytes()
    depth = background_depth(size, available)
    full = size["layers"]
    plan = (
        [(full, ("sync", "async"))]
        if depth == full
        else [(full, ("sync",))] + ([(depth, ("sync", "async"))] if depth else [])
    )
    root = Path(tempfile.mkdtemp(prefix="bench-save-", dir=directory))
    try:
        runs = [plain(launch(size, layers, modes, root)) for layers, modes in plan]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    note = None
    if depth < full:
        where = (
            f"at {depth} of {full} blocks ({n_parameters(size, depth) / 1e9:.3f} B parameters)" if depth else "not run"
        )
        note = (
            f"async_save {where}: at {full} blocks the estimated {background_bytes(size, full) / 2**30:.1f} GiB "
            f"(state + staged copy, {RANKS} processes) is over {BUDGET_SHARE:.0%} of the {available / 2**30:.1f} GiB "
            "available"
        )
    return {
        "shape": {**size, "name": NAMES[size_name], "dtype": "float32"},
        "processes": RANKS,
        "backend": "gloo",
        "full_layers": full,
        "async_layers": depth,
        "async_note": note,
        "available_gib": gib(available),
        "runs": runs,
    }


def print_save(result: dict) -> None:
    shape = result["shape"]
    print(
        f"{shape['name']}: width {shape['hidden']}, {result['full_layers']} blocks, "
        f"{shape['heads']}/{shape['kv']} heads, MLP {shape['ffn']}, vocabulary {shape['vocab']:,} (tied), fp32, "
        f"FSDP2 over {result['processes']} {result['backend']} processes on CPU, AdamW state"
    )
    if result["async_note"]:
        print(f"NOTE: {result['async_note']}")
    header = (
        f"{'blocks':>6} {'params':>9} {'rank':>4} {'save':<6} {'seconds':>20} {'bytes written':>15} "
        f"{'RSS before build':>16} {'peak after build':>16} {'RSS before save':>15} {'save peak':>9} "
        f"{'peak after save':>15}"
    )
    print(header)
    for run in result["runs"]:
        for row in run["ranks"]:
            for mode in run["modes"]:
                save = row[mode]
                if mode == "sync":
                    seconds = f"{save['seconds']:.2f} s"
                else:
                    seconds = f"wait {save['wait_s']:.2f} / {save['total_s']:.2f} s"
                print(
                    f"{str(run['layers']) + '/' + str(result['full_layers']):>6} {run['params'] / 1e6:>8,.1f}M {row['rank']:>4} {mode:<6} {seconds:>20} "
                    f"{save['bytes_written']:>15,} {row['rss_before_build_gib']:>12.3f} GiB "
                    f"{row['peak_rss_after_build_gib']:>12.3f} GiB {save['rss_before_save_gib']:>11.3f} GiB "
                    f"{save['save_peak_rss_gib']:>5.3f} GiB {save['peak_rss_after_save_gib']:>11.3f} GiB"
                )
    print(
        "seconds: sync = dcp_state.save; async = the time training waits (staging) / until every file is written. "
        "Memory is per process: resident (RSS), or peak resident since the process started ('peak after ...') or "
        "since just before the save ('save peak', VmHWM)."
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        sys.path.insert(0, str(ROOT))
        print(json.dumps(worker(json.loads(sys.argv[2]))))
