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

Compute per time step (docs/metrics.md#11-compute, ``summary.json`` ``compute``): :func:`training_flops` estimates the
training FLOPs as ``(4 · N + 2 · N_trainable) · T`` — the forward pass ``2 · N · T``, the backward pass
``2 · N · T`` for the activation gradients and ``2 · N_trainable · T`` for the weight gradients (Kaplan et al.
2020's ``6 · N · T`` split into its parts), with ``N`` every parameter (embeddings included), ``N_trainable``
the ones that get gradients and ``T`` every real (non-padding) input token trained on. Full fine-tuning is
exactly ``6 · N · T``; LoRA and frozen layers save the weight-gradient part of the frozen weights (an upper
bound for frozen *lower* blocks, whose activation gradients are not needed either); a strategy's extra forward
pass per token (LwF's teacher: ``Strategy.forward_parameters``) adds ``2 · N_forward · T``; a method's extra loss
(L2/EWC penalties) is not counted. Evaluation is forward only: ``2 · N`` per processed input position.
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


def parameter_counts(model: torch.nn.Module) -> tuple[int, int]:
    """``(N, N_trainable)``: every distinct parameter's elements, and those with ``requires_grad``."""
    unique = {id(p): p for p in model.parameters()}.values()
    return sum(p.numel() for p in unique), sum(p.numel() for p in unique if p.requires_grad)


def training_flops(n_params: int, n_trainable: int, tokens: int, forward_params: int = 0) -> float:
    """``(4 · N + 2 · N_trainable + 2 · N_forward) · T`` (= ``6 · N · T`` for full fine-tuning; ``N_forward``: the
    parameters of a strategy's extra forward pass per token, e.g. LwF's teacher; see the module docstring)."""
    return float(4 * n_params + 2 * n_trainable + 2 * forward_params) * float(tokens)


def eval_flops(n_params: int, positions: int) -> float:
    """Forward-only evaluation: ``2 · N`` per processed input position."""
    return 2.0 * n_params * positions


def _first(config, *names: str) -> Optional[int]:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


class Throughput:
    """Tokens per second (and MFU, peak memory) over the window between two log rows."""

    def __init__(
        self,
        device: torch.device,
        tokens: int,
        flops_per_token: Optional[float],
        peak_flops: Optional[float],
        num_processes: int,
    ):
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


class CountPositions:
    """Context manager: input positions (``input_ids`` and ``decoder_input_ids`` elements, padding included)
    of every forward call of ``model`` while it is active (a forward pre-hook): evaluation's tokens (§11)."""

    def __init__(self, model: torch.nn.Module):
        self.model, self.positions, self._handle = model, 0, None

    def _hook(self, module, args, kwargs) -> None:
        for name in ("input_ids", "decoder_input_ids"):
            ids = kwargs.get(name)
            if ids is None and name == "input_ids" and args:
                ids = args[0]
            if isinstance(ids, torch.Tensor):
                self.positions += ids.numel()

    def __enter__(self) -> "CountPositions":
        self._handle = self.model.register_forward_pre_hook(self._hook, with_kwargs=True)
        return self

    def __exit__(self, *exc) -> None:
        self._handle.remove()


TRAIN_KEYS = ("train_tokens", "loss_tokens", "optimizer_steps", "train_seconds", "train_flops")
EVAL_KEYS = ("eval_tokens", "eval_seconds", "eval_flops")
MIX_KEYS = ("mix_tokens", "mix_train_flops", "generation_seconds", "generation_flops")
"""What a step's general mix or generative replay cost (``methods/mixing.py``), where a step had one."""


def compute_summary(rows: list[dict]) -> dict:
    """``summary.json``'s ``compute`` (docs/metrics.md#11-compute) from the metric rows' run metadata (the ``timing`` row of
    each checkpoint): ``steps`` ``{"<i>": {train_tokens, loss_tokens, optimizer_steps, train_seconds,
    train_flops, cumulative_<each>}}`` over the trained checkpoints in order, with :data:`MIX_KEYS` where the
    step mixed data in (summed in ``totals`` too); ``eval`` ``{"<i>": {eval_tokens, eval_seconds, eval_flops}}``
    (checkpoint -1 included); ``totals`` of both (None where a value is missing)."""
    per_checkpoint = {}
    for row in rows:
        if row.get("group") == "timing":
            per_checkpoint[int(row["checkpoint"])] = row
    steps, evals, running = {}, {}, {key: 0.0 for key in TRAIN_KEYS}
    for i in sorted(per_checkpoint):
        row = per_checkpoint[i]
        evals[str(i)] = {key: row.get(key) for key in EVAL_KEYS}
        if i < 0:
            continue
        entry = {key: row.get(key) for key in TRAIN_KEYS}
        for key in TRAIN_KEYS:
            running[key] = None if running[key] is None or entry[key] is None else running[key] + entry[key]
            entry[f"cumulative_{key}"] = running[key]
        entry.update({key: row[key] for key in MIX_KEYS if row.get(key) is not None})
        steps[str(i)] = entry
    totals = {key: running[key] for key in TRAIN_KEYS}
    for key in MIX_KEYS:
        if any(key in entry for entry in steps.values()):
            totals[key] = sum(entry.get(key, 0) for entry in steps.values())
    for key in EVAL_KEYS:
        values = [e[key] for e in evals.values()]
        totals[key] = None if any(v is None for v in values) else sum(values)
    return {"steps": steps, "eval": evals, "totals": totals}
