"""Bytes per parameter that ``l2_init`` / ``ewc`` add: the anchors (and Fisher) the strategy holds, plus the
peak resident-memory growth of one penalty forward + backward (CPU), on a GPT-2-shaped model built from
config (``--n-layer 12 --n-embd 768``: ~86M parameters). Each case runs in a fresh process (peak RSS only
grows, so it also counts the allocator's own slack: a noisy upper bound; the exact figure is what
autograd keeps from the penalty's forward until its backward, counted with ``saved_tensors_hooks``);
``--impl legacy`` is the penalty as written before the memory work (full-size temporaries kept for
backward). Figures: docs/methods.md ("Memory of l2_init and ewc").

    python scripts/penalty_memory.py            # every case, a table
    python scripts/penalty_memory.py --case current,ewc,bfloat16 --n-layer 2   # one case, quick
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

import torch

CASES = [
    (impl, name, dtype)
    for name in ("l2_init", "ewc")
    for impl, dtype in (("legacy", "float32"), ("current", "float32"), ("current", "bfloat16"))
]


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def saved_for_backward(fn, existing: set[int]) -> int:
    """Bytes of the tensors autograd keeps from the forward of ``fn()`` until its backward, not counting
    tensors that exist anyway (``existing``: storage addresses of parameters, anchors, Fisher)."""
    seen, total = set(), 0

    def pack(tensor):
        nonlocal total
        key = tensor.untyped_storage().data_ptr()
        if key not in existing and key not in seen:
            seen.add(key)
            total += tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn()
    return total


def build(n_layer: int, n_embd: int):
    from evolve_train.config import ModelConfig
    from evolve_train.models.build import build_model, train_tokenizer

    tokenizer = train_tokenizer(["a small corpus for the tokenizer"], 300)
    model = build_model(ModelConfig(n_layer=n_layer, n_embd=n_embd, n_head=max(1, n_embd // 64)), tokenizer)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)  # gradients exist in training anyway: not the penalty's cost
    return model


def legacy_penalty(anchors) -> torch.Tensor:
    total = None
    for _, param, anchor, fisher in anchors:
        term = (param - anchor).pow(2)
        term = (term * fisher).sum() if fisher is not None else term.sum()
        total = term if total is None else total + term
    return total


def anchor(model, name: str, impl: str, dtype: str):
    """The strategy's anchors; EWC's Fisher is a stand-in of ones (same size and dtype as the real one)."""
    from evolve_train.config import EwcConfig, L2InitConfig, MethodConfig
    from evolve_train.methods.regularizers import EWC, L2Init

    section = (EwcConfig if name == "ewc" else L2InitConfig)(anchor_dtype=dtype)
    cfg = MethodConfig(strategies=["full", name], **{name: section})
    strategy = (EWC if name == "ewc" else L2Init)(cfg)
    if name == "ewc":
        strategy.importance = lambda model, params: [torch.ones_like(p, dtype=torch.float32) for _, p in params]
    strategy.prepare_model(model, 1)
    if impl == "legacy":  # fp32 anchors and Fisher, as before
        strategy.anchors = [(n, p, a.float(), None if f is None else f.float()) for n, p, a, f in strategy.anchors]
    return strategy


def measure(impl: str, name: str, dtype: str, n_layer: int, n_embd: int) -> dict:
    torch.manual_seed(0)
    model = build(n_layer, n_embd)
    n = sum(p.numel() for p in model.parameters())
    strategy = anchor(model, name, impl, dtype)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1e-3)
    held = sum(t.numel() * t.element_size() for _, _, a, f in strategy.anchors for t in (a, f) if t is not None)

    def step():
        penalty = legacy_penalty(strategy.anchors) if impl == "legacy" else strategy.penalty()
        penalty.backward()

    existing = {t.untyped_storage().data_ptr() for _, p, a, f in strategy.anchors for t in (p, a, f) if t is not None}
    before = peak_rss()
    allocated = saved_for_backward(step, existing)
    rss = peak_rss() - before
    return {
        "impl": impl,
        "method": name,
        "anchor_dtype": dtype,
        "parameters": n,
        "held_bytes_per_param": round(held / n, 2),
        "saved_for_backward_bytes_per_param": round(allocated / n, 2),
        "penalty_step_rss_bytes_per_param": round(rss / n, 2),
        "total_bytes_per_param": round((held + allocated) / n, 2),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", help="impl,method,anchor_dtype (one case in this process)")
    parser.add_argument("--n-layer", type=int, default=12)
    parser.add_argument("--n-embd", type=int, default=768)
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(measure(*args.case.split(","), args.n_layer, args.n_embd)))
        return
    print(
        "| impl | method | anchor dtype | parameters | held B/param | saved for backward B/param "
        "| total | peak RSS growth B/param |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for case in CASES:
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--case",
                ",".join(case),
                "--n-layer",
                str(args.n_layer),
                "--n-embd",
                str(args.n_embd),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"| {r['impl']} | {r['method']} | {r['anchor_dtype']} | {r['parameters'] / 1e6:.1f}M | "
            f"{r['held_bytes_per_param']} | {r['saved_for_backward_bytes_per_param']} | "
            f"{r['total_bytes_per_param']} | {r['penalty_step_rss_bytes_per_param']} |"
        )


if __name__ == "__main__":
    main()
