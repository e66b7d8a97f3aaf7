"""GPU benchmark of the training and evaluation paths (bf16, SDPA, fused AdamW, compile) on a ~125M GPT-2.

    python scripts/gpu_bench.py --out gpu_results.json      # ~5 minutes on one H100/H200
    python scripts/gpu_bench.py --steps 10 --no-compile      # scripts/gpu_check.sh's short form

Measures, in one process: a bf16 matmul ceiling; tokens/s and MFU of the framework's loop
(`train_time_step`, accelerate bf16) against a plain PyTorch bf16-autocast loop on the same model and
batches; SDPA against eager attention; torch.compile; batched greedy generation throughput. The
model is built from config (no download), data are random tokens (throughput does not depend on them).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DATASHEET_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}


def peak_tflops(name: str) -> float | None:
    return next((v for k, v in DATASHEET_BF16_TFLOPS.items() if k in name), None)


def matmul_tflops(n: int = 8192, repeats: int = 10) -> float:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    torch.cuda.synchronize()
    return 2 * n**3 * repeats / (time.perf_counter() - start) / 1e12


def gpt2(attn: str, n_layer=12, n_embd=768, n_head=12, vocab=50304, positions=1024):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        vocab_size=vocab,
        n_positions=positions,
        resid_pdrop=0,
        embd_pdrop=0,
        attn_pdrop=0,
    )
    config._attn_implementation = attn
    return GPT2LMHeadModel(config).cuda()


def flops_per_token(model, seq: int) -> float:
    """6N for the weights plus the attention scores (PaLM appendix B), forward + backward."""
    cfg = model.config
    n = sum(p.numel() for p in model.parameters()) - cfg.n_positions * cfg.n_embd
    return 6 * n + 12 * cfg.n_layer * cfg.n_embd * seq


def random_rows(n_rows: int, seq: int, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, vocab, (n_rows, seq), generator=g).tolist()


def plain_loop(model, rows, batch: int, steps: int, warmup: int = 3) -> float:
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    data = torch.tensor(rows, device="cuda")
    model.train()
    tokens, start = 0, None
    for i in range(warmup + steps):
        if i == warmup:
            torch.cuda.synchronize()
            start = time.perf_counter()
        x = data[(i * batch) % len(data) :][:batch]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i >= warmup:
            tokens += x.numel()
    torch.cuda.synchronize()
    return tokens / (time.perf_counter() - start)


def framework_loop(model, rows, batch: int, steps: int, compile_model: bool = False) -> float:
    from accelerate import Accelerator
    from datasets import Dataset

    from evolve_train.config import MethodConfig, TrainerConfig
    from evolve_train.methods import Method
    from evolve_train.training.examples import collate
    from evolve_train.training.loop import train_time_step
    from evolve_train.training.plan import StepPlan

    n = batch * steps
    examples = Dataset.from_dict({"input_ids": rows[:n], "labels": rows[:n]})
    cfg = TrainerConfig(
        batch_size=batch,
        lr=3e-4,
        warmup_steps=10,
        mixed_precision="bf16",
        log_every=10**9,
        compile=compile_model,
        seq_len=len(rows[0]),
    )
    accelerator = Accelerator(mixed_precision="bf16")
    # a short warm-up step first (allocator, cuBLAS handles, compile), then the timed one
    train_time_step(
        StepPlan(
            step=0,
            trainer=cfg,
            examples=examples.select(range(3 * batch)),
            epochs=1,
            strategies=Method(MethodConfig()),
            collate=lambda rows: collate(rows, 0),
            seed=0,
        ),
        model,
        accelerator,
    )
    torch.cuda.synchronize()
    result = train_time_step(
        StepPlan(
            step=1,
            trainer=cfg,
            examples=examples,
            epochs=1,
            strategies=Method(MethodConfig()),
            collate=lambda rows: collate(rows, 0),
            seed=1,
        ),
        model,
        accelerator,
    )
    return result.tokens / result.seconds


def generation_throughput(model, n_prompts=512, prompt_len=32, new_tokens=16, batch=256) -> dict:
    from transformers import PreTrainedTokenizerFast  # noqa: F401  (import check only)

    model.eval()
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(0, model.config.vocab_size, (n_prompts, prompt_len), generator=g).cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        model.generate(prompts[:8], max_new_tokens=2, do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for i in range(0, n_prompts, batch):
            model.generate(
                prompts[i : i + batch],
                attention_mask=torch.ones_like(prompts[i : i + batch]),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=0,
            )
        torch.cuda.synchronize()
        batched = time.perf_counter() - start
        start = time.perf_counter()
        for i in range(16):
            model.generate(
                prompts[i : i + 1],
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=0,
            )
        torch.cuda.synchronize()
        single = (time.perf_counter() - start) / 16 * n_prompts
    return {
        "prompts": n_prompts,
        "new_tokens": new_tokens,
        "batched_s": batched,
        "one_at_a_time_s_est": single,
        "speedup": single / batched,
        "generated_tokens_per_s": n_prompts * new_tokens / batched,
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument(
        "--compile", action=argparse.BooleanOptionalAction, default=True, help="also time the loop under torch.compile"
    )
    args = parser.parse_args(argv)
    assert torch.cuda.is_available(), "no CUDA device"
    name = torch.cuda.get_device_name()
    out: dict = {"device": name, "torch": torch.__version__, "bf16_supported": torch.cuda.is_bf16_supported()}
    import transformers

    out["transformers"] = transformers.__version__
    out["matmul_bf16_tflops"] = matmul_tflops()
    print(json.dumps(out), flush=True)
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")
    rows = random_rows(args.batch * args.steps, args.seq, 50304)

    def record(key, fn):
        start = time.perf_counter()
        try:
            out[key] = fn()
        except Exception as error:  # keep going: one failing path must not hide the others
            out[key] = {"error": f"{type(error).__name__}: {error}"[:500]}
        print(f"{key}: {out[key]} ({time.perf_counter() - start:.0f} s)", flush=True)
        if args.out:  # the figures so far: a bench stopped by its time box keeps what it measured
            args.out.write_text(json.dumps(out, indent=2) + "\n")

    model = gpt2("sdpa")
    out["params_m"] = sum(p.numel() for p in model.parameters()) / 1e6
    fpt = flops_per_token(model, args.seq)
    record("plain_sdpa_tok_s", lambda: plain_loop(gpt2("sdpa"), rows, args.batch, args.steps))
    record("framework_sdpa_tok_s", lambda: framework_loop(gpt2("sdpa"), rows, args.batch, args.steps))
    record("plain_eager_tok_s", lambda: plain_loop(gpt2("eager"), rows, args.batch, args.steps))
    if args.compile:
        record("framework_compile_tok_s", lambda: framework_loop(gpt2("sdpa"), rows, args.batch, args.steps, True))
    record("generation", lambda: generation_throughput(model))
    for key in ("plain_sdpa_tok_s", "framework_sdpa_tok_s", "framework_compile_tok_s", "plain_eager_tok_s"):
        if isinstance(out.get(key), float):
            achieved = out[key] * fpt / 1e12
            out[key.replace("tok_s", "tflops")] = achieved
            if peak_tflops(name):
                out[key.replace("tok_s", "mfu")] = achieved / peak_tflops(name)
    if isinstance(out.get("framework_sdpa_tok_s"), float) and isinstance(out.get("plain_sdpa_tok_s"), float):
        out["loop_vs_torch_gpu"] = out["framework_sdpa_tok_s"] / out["plain_sdpa_tok_s"]
    if isinstance(out.get("plain_eager_tok_s"), float) and isinstance(out.get("plain_sdpa_tok_s"), float):
        out["sdpa_vs_eager"] = out["plain_sdpa_tok_s"] / out["plain_eager_tok_s"]
    out["peak_memory_gb"] = torch.cuda.max_memory_allocated() / 2**30
    print(json.dumps(out, indent=2))
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
