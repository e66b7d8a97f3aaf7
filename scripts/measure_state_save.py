"""How long a mid-step state's model + AdamW state takes to write through torch.distributed.checkpoint (DCP), here.

One process, no process group: a stack of fp32 linear layers of about ``--params`` parameters with AdamW moments
(3 fp32 tensors per parameter: 12 bytes each), written the way ``training/dcp_state.py`` writes a state: at once
(``dcp.save``) and in the background (``dcp.async_save``: the time training waits is the staging, a CPU copy).
Under FSDP2 each of P processes writes 12 x N / P bytes into its own file, all at once: the save takes about
this time x (N / P) / the size measured here, as long as the file system keeps up with P writers.
``scripts/bench.py --part save`` measures that case itself: Llama-3.2-1B's shape under FSDP2 over 2 processes.

    .venv/bin/python scripts/measure_state_save.py --params 200e6 --out DIR
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import torch

from evolve_train.training import dcp_state


def build(params: float, width: int = 4096) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    layers = max(1, round(params / (width * width)))
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    optimizer.step()  # the moments exist, as after any update
    optimizer.zero_grad(set_to_none=True)
    return model, optimizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=float, default=200e6)
    parser.add_argument("--out", type=Path, default=None, help="a directory on the disk to measure")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    model, optimizer = build(args.params)
    n = sum(p.numel() for p in model.parameters())
    size = 12 * n
    root = Path(tempfile.mkdtemp(dir=args.out))
    try:
        for i in range(args.repeat):
            path = root / f"sync{i}"
            seconds = dcp_state.save(path, None, model, optimizer)
            written = sum(f.stat().st_size for f in path.iterdir())
            print(
                f"dcp.save: {n / 1e6:.0f} M parameters, {written / 1e9:.2f} GB in {seconds:.2f} s "
                f"({written / 1e9 / seconds:.2f} GB/s)"
            )
            shutil.rmtree(path)
            path = root / f"async{i}"
            pending = dcp_state.start_async_save(path, None, model, optimizer)
            total = pending.wait()
            print(
                f"dcp.async_save: training waits {pending.staged_s:.2f} s (staging), written after {total:.2f} s "
                f"({size / 1e9 / max(pending.staged_s, 1e-9):.1f} GB/s staged)"
            )
            shutil.rmtree(path)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
