"""``heldout``: perplexity on held-out plain text per checkpoint (general-knowledge forgetting, as TiC-LM
reports perplexity on held-out data next to its temporal tasks).

Each file of ``eval.heldout_text`` (``general`` = the general text shipped with the package, which is not
about the world's organisations; any other entry is a path to a UTF-8 text file, documents separated by
blank lines) is tokenized once (documents joined by EOS), cut into windows of the model's context length
(at most ``eval.heldout_window`` tokens) and scored with the language-model loss. Rows: one per file,
``set_name`` = the file's stem, ``loss`` (mean negative log-likelihood per predicted token, nats),
``perplexity`` = exp(loss), ``n`` = predicted tokens. Decoder-only models only (a seq2seq model gets no
row, with a warning).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import torch

from evolve_train.errors import ConfigError
from evolve_train.evaluation.context import EvalContext
from evolve_train.evaluation.registry import register_evaluator
from evolve_train.models.text_format import CausalLMFormat, TextFormat
from evolve_train.models.scoring import batch_token_nll

log = logging.getLogger(__name__)
GENERAL = "general"
GENERAL_FILE = Path(__file__).resolve().parents[2] / "resources" / "heldout_general.txt"
IGNORE = -100


def heldout_files(entries: list[str]) -> list[Path]:
    """The files named by ``eval.heldout_text``; a missing one is a ConfigError naming it."""
    files = [GENERAL_FILE if entry == GENERAL else Path(entry).expanduser() for entry in entries]
    for entry, path in zip(entries, files):
        if not path.is_file():
            raise ConfigError(f"eval.heldout_text: {entry!r} is not a file ('{GENERAL}' = the shipped general text)")
    return files


def token_windows(text_format: TextFormat, text: str, window: int) -> list[list[int]]:
    """The text's documents (blank-line separated) as one EOS-joined token stream, cut into windows."""
    documents = [d.strip() for d in text.split("\n\n") if d.strip()]
    stream: list[int] = []
    for ids in text_format.encode(documents):
        stream.extend(ids + [text_format.eos_id])
    return [stream[i : i + window] for i in range(0, len(stream), window) if len(stream[i : i + window]) > 1]


@torch.no_grad()
def text_loss(model, windows: list[list[int]], batch_size: int) -> tuple[float, int]:
    """(summed negative log-likelihood, predicted tokens) of ``windows`` under the causal ``model`` (the
    training loss: ``models/scoring.py: batch_token_nll``)."""
    total, count = 0.0, 0
    model.eval()
    for start in range(0, len(windows), batch_size):
        chunk = windows[start : start + batch_size]
        width = max(len(w) for w in chunk)
        ids = torch.zeros((len(chunk), width), dtype=torch.long)
        labels = torch.full((len(chunk), width), IGNORE, dtype=torch.long)
        for row, tokens in enumerate(chunk):
            ids[row, : len(tokens)] = torch.tensor(tokens)
            labels[row, : len(tokens)] = torch.tensor(tokens)
        sums, counts = batch_token_nll(
            model, {"input_ids": ids, "labels": labels, "attention_mask": (labels != IGNORE).long()}, shift=True
        )
        total += sum(sums)
        count += sum(counts)
    return total, count


@register_evaluator("heldout")
def heldout_evaluator(ctx: EvalContext) -> list[dict]:
    if not isinstance(ctx.text_format, CausalLMFormat):
        log.warning("heldout: perplexity of plain text is computed for decoder-only models; skipped")
        return []
    config = ctx.model.config
    context = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None) or 1024
    window = min(context, ctx.cfg.heldout_window)
    rows = []
    for path in heldout_files(list(ctx.cfg.heldout_text)):
        windows = token_windows(ctx.text_format, path.read_text(encoding="utf-8"), window)
        total, count = text_loss(ctx.model, windows, max(1, ctx.cfg.batch_size // 8))
        loss = total / count if count else None
        rows.append(
            {
                "group": "heldout",
                "checkpoint": ctx.checkpoint,
                "set": "heldout",
                "set_name": path.stem,
                "set_step": None,
                "n": count,
                "loss": loss,
                "perplexity": math.exp(loss) if loss is not None else None,
            }
        )
    return rows
