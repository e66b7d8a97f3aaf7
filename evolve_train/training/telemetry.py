"""Throughput telemetry of the training loop: tokens per second, peak GPU memory and model FLOPs utilisation.

Every ``train_log.jsonl`` row (written every ``trainer.log_every`` optimizer steps, right after the loss is
read back, so no extra host sync) carries, over the window since the previous row:

- ``tokens_per_s``: real (non-padding) input tokens of all processes, per second of wall time;
- ``peak_mem_gb`` (CUDA only): ``torch.cuda.max_memory_allocated`` of this process, in GB (1e9 bytes);
- ``mfu`` (when the peak is known): achieved FLOP/s / peak FLOP/s of all processes, with the
  training FLOPs per token of the PaLM paper (Chowdhery et al. 2022, appendix B):
  ``6 * N + 12 * n_layer * d_model * seq_len``, where ``N`` is the number of
  non-embedding parameters (embedding tables excluded, an untied output head counted; frozen ones too:
  LoRA's real backward is cheaper, so its MFU reads high) and ``seq_len`` is ``trainer.seq_len`` (rows
  shorter than ``seq_len`` attend over less, so for short masked-entity rows the attention term is an upper
  bound). The peak is ``trainer.peak_flops`` when set (any device), else the dense bf16/fp16 tensor-core
  peak of the CUDA device looked up by its name (:data:`PEAK_FLOPS`: H100 / H200 / A100) under
  ``trainer.mixed_precision=bf16|fp16``; otherwise the key is absent.
"""

from __future__ import annotations

import time
from typing import Optional

import torch

PEAK_FLOPS = (("H200", 989.4e12), ("H100 PCIE", 756.0e12), ("H100", 989.4e12), ("A100", 312.0e12))
"""Dense bf16 peak FLOP/s by device-name substring (first match; NVIDIA data sheets, SXM unless PCIe)."""


def device_peak_flops(device: torch.device, mixed_precision: str, override: float = 0.0) -> Optional[float]:
    """Peak FLOP/s of one ``device``: ``override`` when > 0, else the bf16 table for CUDA devices under
    bf16/fp16 mixed precision; None when unknown."""
    if override > 0:
        return float(override)
    if device.type != "cuda" or str(mixed_precision) not in ("bf16", "fp16"):
        return None
    name = torch.cuda.get_device_name(device).upper()
    return next((peak for key, peak in PEAK_FLOPS if key in name), None)


def flops_per_token(model: torch.nn.Module, seq_len: int) -> Optional[float]:
    """``6 * N_non-embedding + 12 * n_layer * d_model * seq_len`` (see the module docstring); None when the
    config names no layer count or width."""
    config = getattr(model, "config", None)
    n_layer = _first(config, "n_layer", "num_hidden_layers", "num_layers")
    d_model = _first(config, "n_embd", "hidden_size", "d_model")
    if not n_layer or not d_model:
        return None
    embeddings = {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
    params = {id(p): p.numel() for p in model.parameters() if id(p) not in embeddings}
    return 6.0 * sum(params.values()) + 12.0 * n_layer * d_model * seq_len


def _first(config, *names: str) -> Optional[int]:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


class Throughput:
    """Tokens per second (and MFU, peak memory) over the window between two log rows."""

    def __init__(self, device: torch.device, tokens: int, flops_per_token: Optional[float],
                 peak_flops: Optional[float], num_processes: int):
        self.device, self.num_processes = device, num_processes
        self.flops = flops_per_token if peak_flops else None
        self.peak = (peak_flops or 0.0) * num_processes
        self.start_tokens, self.start_time = tokens, time.perf_counter()

    def window(self, tokens: int) -> dict:
        """The row's telemetry for ``tokens`` (all processes, since the step began); starts the next window."""
        now = time.perf_counter()
        rate = (tokens - self.start_tokens) / max(now - self.start_time, 1e-9)
        self.start_tokens, self.start_time = tokens, now
        row = {"tokens_per_s": round(rate, 1)}
        if self.device.type == "cuda":
            row["peak_mem_gb"] = round(torch.cuda.max_memory_allocated(self.device) / 1e9, 3)
        if self.flops:
            row["mfu"] = float(f"{rate * self.flops / self.peak:.4g}")
        return row
