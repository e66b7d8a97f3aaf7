"""TiC-LM-shaped perplexity files (``<model>/ppl_evals/aggregated_ppl_evals.jsonl``) written for the cutoff tests."""

from __future__ import annotations

import json
from pathlib import Path


def write_tic_lm(root: Path, model: str, losses: dict, half_width: float = 0.0196, sequences: int = 100) -> Path:
    """One model's file: ``losses`` is domain -> YYYYMM -> mean loss; each record's 95 % interval is the loss
    ± ``half_width`` (a standard error of half_width / 1.96). Records are written newest first, as the
    released files may order them."""
    path = root / model / "ppl_evals" / "aggregated_ppl_evals.jsonl"
    path.parent.mkdir(parents=True)
    lines = []
    for domain, cells in losses.items():
        for month, loss in reversed(list(cells.items())):
            record = {"loss": loss, "loss_sequences_lower_95": loss - half_width}
            record.update(loss_sequences_upper_95=loss + half_width, sequences=sequences)
            record["val_data"] = [f"./local_data/ppl_evals/{domain}/{month}/global_shard_10_of_10/00000001.tar"]
            lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")
    return path


def planted(months: list[str], cutoff: str, domains: dict) -> dict:
    """domain -> month -> loss: 2.0 + ``slope`` per slice + ``rise`` after ``cutoff`` (``domains``: domain ->
    (slope, rise))."""
    return {
        d: {m: 2.0 + slope * j + (rise if m > cutoff else 0.0) for j, m in enumerate(months)}
        for d, (slope, rise) in domains.items()
    }
