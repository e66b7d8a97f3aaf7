"""The ``pretrained`` part of scripts/bench.py: a 135M Llama (SmolLM2-135M's config, random weights; no
download) trained and evaluated by the framework in fp32 and in bf16 autocast on this machine.

    python scripts/bench.py --part pretrained            # ~4 min on 2 cores
    python scripts/bench.py --part pretrained --pretrained-size tiny   # seconds (the test's size)

Figures per precision: training tokens/s of the framework loop (``train_time_step``, AdamW, masked-entity-like
rows of ~22 tokens with the loss on the last 4, batch 32, as the dated world's), evaluation tokens/s (the
held-out perplexity forward, windows of 128), and the fraction of this machine's measured matmul peak in that
dtype (a 2048² matmul; training counts 6·N FLOPs per token, evaluation 2·N, N = all parameters, the tied
output head being a real matmul). The first optimizer step of each timed run is a warm-up and not counted.

bf16 is measured where the machine computes it natively (``trainer.mixed_precision=auto`` resolves to it:
``training/distributed.py: resolve_precision``) and at the ``tiny`` size; on a 135M model an emulated bf16
would run many times slower than fp32, so it is skipped there, saying why. In the precision ``auto`` picks, a
plain PyTorch loop trains a fresh copy of the same model on the same batches (AdamW, gradient clipping,
autocast where bf16, and the loop's own loss, ``training/loss.py``, so the ratio measures the loop and not the
loss): ``framework_vs_plain`` is the framework's training tokens/s over the plain loop's (goal >= 0.95).
"""

from __future__ import annotations

import time

import torch

SMOLLM2_135M = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    max_position_embeddings=8192,
    rms_norm_eps=1e-5,
    rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
    tie_word_embeddings=True,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=2,
)
"""SmolLM2-135M's config.json (what ``evolve-data fetch-model smollm2-135m`` writes), without the weights."""
TINY = dict(
    SMOLLM2_135M,
    vocab_size=512,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)
SIZES = {"135m": SMOLLM2_135M, "tiny": TINY}


def matmul_peak(dtype: torch.dtype, n: int = 2048, seconds: float = 1.0) -> float:
    """FLOP/s of an n x n matmul in ``dtype`` (best of repeated runs over about ``seconds``)."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    a @ b
    best, spent = 0.0, 0.0
    while spent < seconds:
        start = time.perf_counter()
        a @ b
        took = time.perf_counter() - start
        spent += took
        best = max(best, 2 * n**3 / took)
    return best


def masked_rows(n: int, vocab: int, seed: int = 0) -> list[dict]:
    """Rows like the dated world's masked-entity rows: 18-26 tokens, the loss on the last 4."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        length = int(torch.randint(18, 27, (1,), generator=generator))
        ids = torch.randint(3, vocab, (length,), generator=generator).tolist()
        rows.append({"input_ids": ids, "labels": [-100] * (length - 4) + ids[-4:]})
    return rows


def _model(size: dict):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**size))


def _accelerator(precision: str):
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)  # one process measures both precisions
    return Accelerator(mixed_precision=precision)


def train_tokens_per_s(size: dict, precision: str, steps: int, batch_size: int = 32) -> dict:
    """Training tokens/s of the framework loop, the first optimizer step (warm-up) left out."""
    from evolve_train.config import MethodConfig, TrainerConfig
    from evolve_train.methods import Method
    from evolve_train.training.examples import collate
    from evolve_train.training.loop import train_time_step
    from evolve_train.training.plan import StepPlan

    from datasets import Dataset

    rows = Dataset.from_list(masked_rows(batch_size * (steps + 1), size["vocab_size"]))  # the loop reads Arrow rows
    cfg = TrainerConfig(batch_size=batch_size, lr=3e-4, warmup_steps=1, log_every=1, mixed_precision=precision)
    model, accelerator, logs = _model(size), _accelerator(precision), []
    train_time_step(
        StepPlan(
            step=0,
            trainer=cfg,
            examples=rows,
            epochs=1.0,
            strategies=Method(MethodConfig()),
            collate=lambda batch: collate(batch, 2),
            seed=0,
        ),
        model,
        accelerator,
        log_fn=logs.append,
    )
    timed = logs[1:]  # each row: one optimizer step (log_every=1), its window's tokens/s
    tokens = sum(row["tokens"] - previous["tokens"] for previous, row in zip(logs, timed))
    seconds = sum((row["tokens"] - previous["tokens"]) / row["tokens_per_s"] for previous, row in zip(logs, timed))
    return {"tokens_per_s": tokens / seconds, "steps": len(timed), "tokens": tokens}


def chosen_precision() -> tuple[str, str]:
    """What ``trainer.mixed_precision=auto`` picks on this machine's device, and why."""
    from evolve_train.config import TrainerConfig
    from evolve_train.training.distributed import resolve_precision

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return resolve_precision(TrainerConfig(mixed_precision="auto"), device)


def plain_tokens_per_s(size: dict, precision: str, steps: int, batch_size: int = 32) -> float:
    """Training tokens/s of a plain PyTorch loop over the rows and batches :func:`train_tokens_per_s` trains on
    (the same row order, collate and loss), the first optimizer step (warm-up) left out."""
    from datasets import Dataset

    from evolve_train.training.examples import LengthGroupedBatches, collate
    from evolve_train.training.loss import batch_loss
    from evolve_train.training.rows import TokenRows

    rows = TokenRows(Dataset.from_list(masked_rows(batch_size * (steps + 1), size["vocab_size"])))
    batches = [collate([rows[i] for i in b], 2) for b in LengthGroupedBatches(rows.lengths, batch_size, 0).epoch(0)]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # where accelerate puts the model
    model = _model(size).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    tokens, seconds = 0, 0.0
    for index, batch in enumerate(batches):
        start = time.perf_counter()
        batch = {key: value.to(device, non_blocking=True) for key, value in batch.items()}
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = batch_loss(model, model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if index > 0:  # the first step warms up (allocations, AdamW state)
            seconds += time.perf_counter() - start
            tokens += int(batch["attention_mask"].sum())
    return tokens / seconds


@torch.no_grad()
def eval_tokens_per_s(size: dict, precision: str, windows: int, window: int = 128, batch_size: int = 16) -> float:
    """Tokens/s of the held-out perplexity forward (``evaluation/evaluators/heldout.py``) in the precision."""
    from evolve_train.evaluation.evaluators.heldout import text_loss

    model, accelerator = _model(size), _accelerator(precision)
    generator = torch.Generator().manual_seed(1)
    data = torch.randint(3, size["vocab_size"], (windows + batch_size, window), generator=generator).tolist()
    with accelerator.autocast():
        text_loss(model, data[:batch_size], batch_size)  # warm-up
        start = time.perf_counter()
        text_loss(model, data[batch_size:], batch_size)
    return windows * window / (time.perf_counter() - start)


def optimizer_step_seconds(size: dict, fused: bool, repeats: int = 3) -> float:
    """Seconds of one AdamW step over every parameter (random gradients), torch's default (foreach) or fused."""
    model = _model(size)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused)
    optimizer.step()  # state allocation
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        optimizer.step()
        best = min(best, time.perf_counter() - start)
    return best


def pretrained_part(size_name: str = "135m", quick: bool = False) -> dict:
    size = SIZES[size_name]
    n_params = sum(p.numel() for p in _model(size).parameters())
    steps, windows = (3, 32) if quick or size_name == "tiny" else (6, 64)
    chosen, reason = chosen_precision()
    out = {"size": size_name, "params": n_params, "threads": torch.get_num_threads(), "auto": [chosen, reason]}
    for precision, dtype in (("no", torch.float32), ("bf16", torch.bfloat16)):
        if precision == "bf16" and chosen != "bf16" and size_name != "tiny":
            out["bf16"] = {
                "skipped": f"not native here ({reason}): emulated, many times slower than fp32, not timed at this size"
            }
            continue
        try:
            peak = matmul_peak(dtype, n=512, seconds=0.2) if size_name == "tiny" else matmul_peak(dtype)
            train = train_tokens_per_s(size, precision, steps)
            plain = plain_tokens_per_s(size, precision, steps) if precision == chosen else None
            evaluation = eval_tokens_per_s(size, precision, windows)
        except RuntimeError as error:  # e.g. torch's CPU bf16 kernels without AVX-512 ("pack_vnni2 is only ...")
            if precision == "no":
                raise
            out["bf16"] = {"unsupported": str(error).splitlines()[0]}
            continue
        if plain is not None:
            out["framework_vs_plain"] = {
                "precision": precision,
                "framework_tokens_per_s": train["tokens_per_s"],
                "plain_tokens_per_s": plain,
                "ratio": train["tokens_per_s"] / plain,
            }
        out["fp32" if precision == "no" else "bf16"] = {
            "matmul_peak_gflops": peak / 1e9,
            "train_tokens_per_s": train["tokens_per_s"],
            "train_peak_fraction": 6 * n_params * train["tokens_per_s"] / peak,
            "train_steps": train["steps"],
            "eval_tokens_per_s": evaluation,
            "eval_peak_fraction": 2 * n_params * evaluation / peak,
        }
    out["adamw_step_s"] = {
        "foreach": optimizer_step_seconds(size, fused=False),
        "fused": optimizer_step_seconds(size, fused=True),
    }
    if "train_tokens_per_s" in out["bf16"]:
        out["bf16_vs_fp32"] = {
            "train": out["bf16"]["train_tokens_per_s"] / out["fp32"]["train_tokens_per_s"],
            "eval": out["bf16"]["eval_tokens_per_s"] / out["fp32"]["eval_tokens_per_s"],
        }
    return out


def print_pretrained(result: dict) -> None:
    print(
        f"pretrained part: Llama {result['params'] / 1e6:.1f}M parameters (SmolLM2-135M's config, random weights), "
        f"{result['threads']} threads"
    )
    print(
        f"  {'dtype':6s} {'matmul peak':>12s} {'train tok/s':>12s} {'of peak':>8s} {'eval tok/s':>11s} {'of peak':>8s}"
    )
    for name in ("fp32", "bf16"):
        row = result[name]
        if "unsupported" in row:
            print(f"  {name:6s} not supported by this CPU's kernels: {row['unsupported']}")
            continue
        if "skipped" in row:
            print(f"  {name:6s} skipped: {row['skipped']}")
            continue
        print(
            f"  {name:6s} {row['matmul_peak_gflops']:8.0f} GF/s {row['train_tokens_per_s']:12.1f} "
            f"{row['train_peak_fraction']:8.1%} {row['eval_tokens_per_s']:11.1f} {row['eval_peak_fraction']:8.1%}"
        )
    adamw = result["adamw_step_s"]
    print(
        f"  AdamW step over all parameters: {adamw['foreach']:.3f} s (foreach, the loop's on CPU), "
        f"{adamw['fused']:.3f} s fused"
    )
    ratio = result.get("bf16_vs_fp32")
    if ratio is not None:
        print(f"  bf16 / fp32: training {ratio['train']:.2f}x, evaluation {ratio['eval']:.2f}x")
    versus = result.get("framework_vs_plain")
    if versus is not None:
        chosen, reason = result["auto"]
        print(
            f"  framework / plain PyTorch loop in {'fp32' if versus['precision'] == 'no' else 'bf16'} (auto -> "
            f"{chosen}: {reason}): {versus['framework_tokens_per_s']:.1f} / {versus['plain_tokens_per_s']:.1f} "
            f"tokens/s = {versus['ratio']:.3f} (goal >= 0.95)"
        )
