"""The ``memory`` part of scripts/bench.py: peak memory of one training step, and of held-out scoring, of a
Llama-shaped random model with a 128,256-token vocabulary, the project's chunked loss against the model's own
(unchunked) loss, and the memory preflight's estimate beside the measured training peak.

    python scripts/bench.py --part memory               # 8,192 tokens per batch (4 rows of 2,048); ~5 min on 2 cores
    python scripts/bench.py --part memory --memory-size tiny   # seconds (the test's size)

Each variant runs in a fresh Python process, after one step of a minuscule model of the same kind has loaded
the kernels and thread pools the step uses; its peak is the process's peak resident memory from then on (Linux's
``VmHWM``, reset through ``/proc/self/clear_refs``) less its resident memory just before the model was built
(the interpreter, torch and the batch), so variants never see each other's freed memory, nor the imports' or the
runtime's one-time peaks. Figures: ``train_ratio`` (the project's step, ``training/loss.py:
batch_loss``, over the same step with ``model(**batch).loss``; AdamW step included), ``score_ratio`` (held-out
scoring, ``models/scoring.py: batch_token_nll``, chunked over unchunked) and ``preflight_over_measured``.
"""

from __future__ import annotations

import gc
import json
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES = {
    # width, layers, heads, kv heads, MLP width, vocabulary, rows, row length
    "bench": dict(hidden=256, layers=2, heads=4, kv=2, ffn=704, vocab=128256, rows=4, width=2048),
    "tiny": dict(hidden=64, layers=2, heads=4, kv=2, ffn=176, vocab=32000, rows=2, width=256),
    "small": dict(hidden=192, layers=4, heads=6, kv=2, ffn=512, vocab=20000, rows=4, width=512),
    # weights (and under FSDP2 their float32 masters, gradients and moments) outweigh activations and loss
    "wide": dict(hidden=512, layers=4, heads=8, kv=4, ffn=1408, vocab=16384, rows=1, width=256),
}


def llama_config(size: dict):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=size["vocab"],
        hidden_size=size["hidden"],
        intermediate_size=size["ffn"],
        num_hidden_layers=size["layers"],
        num_attention_heads=size["heads"],
        num_key_value_heads=size["kv"],
        max_position_embeddings=max(size.get("width", 2048), 128),
        tie_word_embeddings=True,
    )


def worker(variant: str, size: dict, checkpointing: bool = False) -> dict:
    """One variant in this process: ``train`` or ``score``, ``chunked`` or ``unchunked``; peak bytes."""
    import torch
    from transformers import LlamaForCausalLM

    from evolve_train.models import scoring
    from evolve_train.training.loss import batch_loss
    from evolve_train.utils.host_memory import resident_bytes

    part, kind = variant.split("_")
    if part == "masters":
        return masters_worker(size, checkpointing)
    if kind == "unchunked":
        scoring.chunk_capable = lambda model: False

    def step(size: dict) -> None:
        torch.manual_seed(0)
        ids = torch.randint(3, size["vocab"], (size["rows"], size["width"]))
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
        nonlocal before
        before = resident_bytes()
        model = LlamaForCausalLM(llama_config(size))
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if part == "train":
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            loss = batch_loss(model, model, batch) if kind == "chunked" else model(**batch, use_cache=False).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        else:
            model.eval()
            scoring.batch_token_nll(model, batch, shift=True)

    before = 0
    step(dict(size, hidden=16, layers=1, heads=2, kv=1, ffn=32, vocab=256, rows=1, width=16))  # loads the runtime
    gc.collect()
    reset_peak()
    step(size)
    peak = peak_rss()
    return {"variant": variant, "peak_bytes": peak - before, "process_peak_bytes": peak}


def masters_worker(size: dict, checkpointing: bool = False) -> dict:
    """bf16 weights trained as an FSDP2 launch under ``mixed_precision=bf16`` trains them, in one gloo process:
    the trainable weights upcast to float32 masters (accelerate's ``fsdp2_prepare_model``), ``fully_shard`` per
    block and the root (bf16 compute, float32 reduce), one chunked-loss step under bf16 autocast with AdamW, the
    optimizer dropped, then the step-end gather into a plain bf16 model (``training/distributed.py:
    unsharded_copy``). Peak bytes over all of it, from before the bf16 model was built."""
    import tempfile

    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import LlamaForCausalLM

    from evolve_train.training.distributed import meta_skeleton, unsharded_copy
    from evolve_train.training.loss import batch_loss
    from evolve_train.utils.host_memory import resident_bytes

    with tempfile.NamedTemporaryFile() as rendezvous:
        dist.init_process_group("gloo", init_method=f"file://{rendezvous.name}", rank=0, world_size=1)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)

    def step(size: dict) -> None:
        torch.manual_seed(0)
        ids = torch.randint(3, size["vocab"], (size["rows"], size["width"]))
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
        nonlocal before
        before = resident_bytes()
        model = LlamaForCausalLM._from_config(llama_config(size), torch_dtype=torch.bfloat16)
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        skeleton = meta_skeleton(model)
        for parameter in model.parameters():
            parameter.data = parameter.data.to(torch.float32)
        for block in model.model.layers:
            fully_shard(block, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = batch_loss(model, model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        del optimizer, loss
        unsharded_copy(model, skeleton)

    before = 0
    step(dict(size, hidden=16, layers=1, heads=2, kv=1, ffn=32, vocab=256, rows=1, width=16))  # loads the runtime
    gc.collect()
    reset_peak()
    step(size)
    peak = peak_rss()
    dist.destroy_process_group()
    return {"variant": "masters_chunked", "peak_bytes": peak - before, "process_peak_bytes": peak}


def reset_peak() -> None:
    """Start the process's peak resident memory (``VmHWM``) again from its resident memory now (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:  # not Linux: the peak stays the process's whole-life peak
        pass


def peak_rss() -> int:
    """The process's peak resident memory since :func:`reset_peak` (``VmHWM``), in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure(variant: str, size_name: str, checkpointing: bool = False) -> dict:
    """:func:`worker` in a fresh interpreter."""
    args = [sys.executable, str(Path(__file__).resolve()), "--worker", variant, size_name]
    if checkpointing:
        args.append("--checkpointing")
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{variant} at size {size_name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def preflight_estimate(size: dict, checkpointing: bool = False, masters: bool = False) -> float:
    """The preflight's estimate of :func:`worker`'s step (``masters``: of :func:`masters_worker`'s: bf16 weights,
    bf16 compute, FSDP2 over one process)."""
    from evolve_train.training.preflight import estimate, shape_of

    tokens = size["rows"] * size["width"]
    settings = dict(weight_bytes=2, compute_bytes=2, sharded=True, masters=True) if masters else {}
    return estimate(shape_of(llama_config(size)), tokens=tokens, checkpointing=checkpointing, **settings).total


def memory_part(size_name: str = "bench") -> dict:
    size = SIZES[size_name]
    peaks = {
        v: measure(v, size_name)["peak_bytes"]
        for v in ("train_chunked", "train_unchunked", "score_chunked", "score_unchunked")
    }
    estimate = preflight_estimate(size)
    return {
        "size": {**size, "tokens_per_batch": size["rows"] * size["width"]},
        "peak_gib": {k: round(v / 1024**3, 3) for k, v in peaks.items()},
        "train_ratio": round(peaks["train_chunked"] / peaks["train_unchunked"], 3),
        "score_ratio": round(peaks["score_chunked"] / peaks["score_unchunked"], 3),
        "preflight_gib": round(estimate / 1024**3, 3),
        "preflight_over_measured": round(estimate / peaks["train_chunked"], 3),
    }


def print_memory(result: dict) -> None:
    size = result["size"]
    print(
        f"Llama-shaped, width {size['hidden']}, {size['layers']} blocks, vocabulary {size['vocab']:,}, "
        f"{size['tokens_per_batch']:,} tokens per batch"
    )
    for name, gib in result["peak_gib"].items():
        print(f"  {name:<16} peak {gib:7.3f} GiB")
    print(f"  training step, chunked / unchunked: {result['train_ratio']:.3f}x (goal <= 0.35)")
    print(f"  held-out scoring, chunked / unchunked: {result['score_ratio']:.3f}x")
    print(f"  preflight estimate {result['preflight_gib']:.3f} GiB = {result['preflight_over_measured']:.2f}x measured")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        sys.path.insert(0, str(ROOT))
        print(json.dumps(worker(sys.argv[2], SIZES[sys.argv[3]], "--checkpointing" in sys.argv)))
