"""The memory part of scripts/gpu_check.sh: a Llama-shaped model with a 128,256-token vocabulary at Llama-3.2-1B's
shape (``model=llama_1b_random``: random weights, no download) on one device, bf16 weights and autocast on GPU.
One line per figure, ``PASS`` or ``FAIL`` against its bound (docs/distributed.md):

* ``chunked_loss``: the project's loss (``training/loss.py: batch_loss``) against the model's own on the same
  batch, relative difference <= 2e-3 in bf16 (1e-5 in the fp32 dry run);
* ``peak_vs_preflight``: the measured peak of one training step (forward, backward, AdamW step;
  ``torch.cuda.max_memory_allocated``, or peak resident memory on CPU) over the preflight's estimate
  (``training/preflight.py``), in [0.75, 1.25];
* ``peak_chunked_vs_unchunked``: the project's step's peak over the same step with the model's own loss, <= 0.6;
* ``throughput_vs_plain``: the project's step's tokens/s over a plain PyTorch step (``model(**batch).loss``,
  AdamW) on the same batches, >= 0.85 (the chunked loss recomputes the head's logits in the backward), with
  each one's MFU (6 N FLOPs per token over ``--peak-tflops``);
* ``eval_bf16_copy_vs_autocast``: the peak of scoring a batch (no gradients) with float32 weights evaluated as
  ``eval.precision=bf16_copy`` (``evaluation/precision.py``: a bf16 copy, the float32 weights parked in host
  memory) over the same scoring under bf16 autocast on the float32 weights, <= 0.7, with the seconds the copy
  and the weights' way back cost.

    python scripts/gpu_memory_check.py                 # GPU, ~2 min on an H100
    python scripts/gpu_memory_check.py --dry           # CPU, tiny shapes: the same code in seconds
Exit status 1 when a figure fails (in the dry run, only ``chunked_loss`` counts: tiny shapes on a CPU say nothing
of GPU memory or speed).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evolve_train.compose import compose_config  # noqa: E402
from evolve_train.evaluation.precision import eval_autocast, evaluated_weights  # noqa: E402
from evolve_train.models.build import model_config  # noqa: E402
from evolve_train.training.loss import batch_loss  # noqa: E402
from evolve_train.training.preflight import estimate, shape_of  # noqa: E402
from evolve_train.utils.host_memory import resident_bytes  # noqa: E402

BOUNDS = {
    "chunked_loss": ("<=", 2e-3),
    "peak_vs_preflight": ("in", (0.75, 1.25)),
    "peak_chunked_vs_unchunked": ("<=", 0.6),
    "throughput_vs_plain": (">=", 0.85),
    "eval_bf16_copy_vs_autocast": ("<=", 0.7),
}


def setup(dry: bool):
    overrides = ["model=llama_1b_random"]
    if dry:
        overrides += ["model.n_layer=2", "model.n_embd=64", "model.n_head=4", "model.n_kv_head=2", "model.n_inner=176"]
        overrides += ["model.vocab_size=32000"]
    cfg = compose_config(overrides).model
    device = torch.device("cpu" if dry else "cuda")
    dtype = torch.float32 if dry else torch.bfloat16
    rows, width = (2, 256) if dry else (4, 2048)
    return model_config(cfg, cfg.vocab_size), device, dtype, rows, width


def peak_bytes(device) -> int:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak(device) -> int:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    return resident_bytes()  # CPU: resident memory now (the peak is the process's)


def train_steps(model, batches, chunked: bool, device, dtype, steps: int):
    """``steps`` AdamW steps; the seconds of those after the first, the peak memory, the first loss."""
    from transformers import LlamaForCausalLM  # noqa: F401  (the model class is the caller's)

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == torch.bfloat16)
    before, first, start = reset_peak(device), None, None
    for index in range(steps):
        if index == 1:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
        batch = batches[index % len(batches)]
        with autocast:
            loss = batch_loss(model, model, batch) if chunked else model(**batch, use_cache=False).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        first = float(loss.detach()) if first is None else first
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start if start else 0.0
    return seconds, peak_bytes(device) - before, first


def eval_peak(model, batch, device, choice: str) -> tuple[int, float]:
    """(peak memory of scoring ``batch`` without gradients under ``eval.precision=choice``, counted from when the
    evaluated weights are ready; seconds of the whole evaluation, the copy and the weights' way back included)."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    with evaluated_weights(choice, model) as evaluated:
        context, _ = eval_autocast(choice, None, evaluated)
        reset_peak(device)
        with torch.no_grad(), context:
            batch_loss(evaluated, evaluated, batch)
        peak = peak_bytes(device)
        del evaluated
    if device.type == "cuda":
        torch.cuda.synchronize()
    return peak, time.perf_counter() - start


def judge(name: str, value: float) -> bool:
    kind, bound = BOUNDS[name]
    ok = bound[0] <= value <= bound[1] if kind == "in" else (value <= bound if kind == "<=" else value >= bound)
    shown = f"[{bound[0]}, {bound[1]}]" if kind == "in" else f"{kind} {bound}"
    print(f"{'PASS' if ok else 'FAIL'} {name} = {value:.4g} (bound {shown})", flush=True)
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry", action="store_true", help="CPU, tiny shapes, fp32")
    parser.add_argument("--steps", type=int, default=4, help="training steps per variant (the first is a warm-up)")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="the device's bf16 peak, for MFU")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    from transformers import LlamaForCausalLM

    config, device, dtype, rows, width = setup(args.dry)
    bounds = dict(BOUNDS)
    if args.dry:
        BOUNDS["chunked_loss"] = ("<=", 1e-5)
    torch.manual_seed(0)
    batches = []
    for _ in range(2):
        ids = torch.randint(3, config.vocab_size, (rows, width), device=device)
        batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()})
    figures, ok = {}, True
    results = {}
    for chunked in (True, False):
        torch.manual_seed(0)
        with torch.device(device):  # initialised where it trains: seconds, not a minute, at 1B
            model = LlamaForCausalLM(config).to(dtype)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        results[chunked] = train_steps(model, batches, chunked, device, dtype, args.steps)
        del model
    torch.manual_seed(0)
    with torch.device(device):  # float32 weights, as a run with model.dtype=float32 evaluates them
        model = LlamaForCausalLM(config)
    evaluation = {choice: eval_peak(model, batches[0], device, choice) for choice in ("bf16", "bf16_copy")}
    del model
    figures["eval_bf16_copy_vs_autocast"] = evaluation["bf16_copy"][0] / max(1, evaluation["bf16"][0])
    tokens = rows * width * (args.steps - 1)
    shape = shape_of(config)
    bytes_ = 2 if dtype == torch.bfloat16 else 4
    estimated = estimate(shape, tokens=rows * width, weight_bytes=bytes_, compute_bytes=bytes_, checkpointing=True)
    figures["chunked_loss"] = abs(results[True][2] - results[False][2]) / abs(results[False][2])
    figures["peak_vs_preflight"] = results[True][1] / estimated.total
    figures["peak_chunked_vs_unchunked"] = results[True][1] / max(1, results[False][1])
    speed = {k: tokens / max(v[0], 1e-9) for k, v in results.items()}
    figures["throughput_vs_plain"] = speed[True] / speed[False]
    for name in BOUNDS:  # the dry run's tiny shapes say nothing of memory or speed: only its loss decides
        passed = judge(name, figures[name])
        ok = passed and ok if (name == "chunked_loss" or not args.dry) else ok
    for chunked, label in ((True, "project"), (False, "plain")):
        mfu = 6 * shape.parameters * speed[chunked] / (args.peak_tflops * 1e12)
        figures[f"mfu_{label}"] = mfu
        print(
            f"INFO {label} step: {speed[chunked]:.0f} tokens/s, MFU {mfu:.3f}, peak {results[chunked][1] / 2**30:.2f} GiB"
        )
    for choice, (peak, seconds) in evaluation.items():
        print(f"INFO evaluation as eval.precision={choice}: peak {peak / 2**30:.2f} GiB, {seconds:.2f} s")
    print(f"INFO preflight estimate {estimated.lines()}")
    BOUNDS.update(bounds)
    if args.out:
        args.out.write_text(json.dumps(figures, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
