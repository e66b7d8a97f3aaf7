"""``heldout``: perplexity on held-out plain text per checkpoint (general-knowledge forgetting, as TiC-LM
reports perplexity on held-out data next to its temporal tasks).

Each file of ``eval.heldout_text`` (a name in ``SHIPPED`` = a text shipped with the package, none about the
world's organisations: ``general``, a short everyday text, and ``python_docs``, ~25,000 words of the Python
documentation's prose, ``resources/SOURCE.md``; any other entry is a path to a UTF-8 text file, documents
separated by blank lines) is tokenized once (documents joined by EOS), cut into windows of the model's context
length (at most ``eval.heldout_window`` tokens) and scored with the language-model loss. Rows: one per file,
``set_name`` = the file's stem, ``loss`` (mean negative log-likelihood per predicted token, nats),
``perplexity`` = exp(loss), ``n`` = predicted tokens, ``n_documents``, and 95 % bootstrap intervals over the
documents (``loss_ci``, ``perplexity_ci``, ``bootstrap`` resamples; each predicted token counts for the document
it belongs to). With several processes each scores whole batches of windows and the sums equal one
process's. Decoder-only models only (a seq2seq model gets no row, with a warning).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import torch

from evolve_train.errors import ConfigError
from evolve_train.evaluation.context import EvalContext, Shards
from evolve_train.evaluation.metrics.stats import bootstrap_ratio_ci
from evolve_train.evaluation.registry import HELDOUT_TEXT, register_evaluator
from evolve_train.models.batching import AutoBatchSize, in_batches
from evolve_train.models.text_format import CausalLMFormat, TextFormat

log = logging.getLogger(__name__)
RESOURCES = Path(__file__).resolve().parents[2] / "resources"
GENERAL = "general"
GENERAL_FILE = RESOURCES / "heldout_general.txt"
SHIPPED = {GENERAL: GENERAL_FILE, "python_docs": RESOURCES / "heldout_python_docs.txt"}
"""The texts ``eval.heldout_text`` names without a path (their origin and licence: ``resources/SOURCE.md``)."""
IGNORE = -100
BOOTSTRAP = 2000


def heldout_files(entries: list[str]) -> list[Path]:
    """The files named by ``eval.heldout_text``; a missing one is a ConfigError naming it."""
    files = [SHIPPED.get(entry) or Path(entry).expanduser() for entry in entries]
    for entry, path in zip(entries, files):
        if not path.is_file():
            shipped = ", ".join(f"'{name}'" for name in SHIPPED)
            raise ConfigError(f"eval.heldout_text: {entry!r} is not a file (shipped texts: {shipped})")
    return files


def document_windows(text_format: TextFormat, text: str, window: int) -> tuple[list[list[int]], list[list[int]]]:
    """The text's documents (blank-line separated) as one EOS-joined token stream, cut into windows, and for
    each window the index of the document each of its tokens belongs to (a document's EOS is its own)."""
    documents = [d.strip() for d in text.split("\n\n") if d.strip()]
    stream: list[int] = []
    owner: list[int] = []
    for index, ids in enumerate(text_format.encode(documents)):
        stream.extend(ids + [text_format.eos_id])
        owner.extend([index] * (len(ids) + 1))
    starts = [i for i in range(0, len(stream), window) if len(stream[i : i + window]) > 1]
    return [stream[i : i + window] for i in starts], [owner[i : i + window] for i in starts]


def token_windows(text_format: TextFormat, text: str, window: int) -> list[list[int]]:
    """The text's documents (blank-line separated) as one EOS-joined token stream, cut into windows."""
    return document_windows(text_format, text, window)[0]


@torch.no_grad()
def window_nll(model, windows: list[list[int]], owners: list[list[int]], batch_size: int) -> list[tuple]:
    """Per window of ``windows`` (in batches of ``batch_size``): ``(document of each predicted token, its
    negative log-likelihood)`` under the causal ``model`` — the training loss, position t predicting token
    t + 1, which counts for token t + 1's document."""
    model.eval()
    device = next(model.parameters()).device
    scored = []
    for start in range(0, len(windows), batch_size):
        chunk, chunk_owners = windows[start : start + batch_size], owners[start : start + batch_size]
        width = max(len(w) for w in chunk)
        ids = torch.zeros((len(chunk), width), dtype=torch.long)
        labels = torch.full((len(chunk), width), IGNORE, dtype=torch.long)
        owner = torch.full((len(chunk), width), -1, dtype=torch.long)
        for row, (tokens, belongs) in enumerate(zip(chunk, chunk_owners)):
            ids[row, : len(tokens)] = torch.tensor(tokens)
            labels[row, : len(tokens)] = torch.tensor(tokens)
            owner[row, : len(tokens)] = torch.tensor(belongs)
        mask = (labels != IGNORE).long()
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False).logits[:, :-1]
        target = labels[:, 1:].to(device)
        nll = torch.nn.functional.cross_entropy(
            logits.float().transpose(1, 2), target, ignore_index=IGNORE, reduction="none"
        ).cpu()
        counted = target.cpu() != IGNORE
        for row in range(len(chunk)):
            keep = counted[row]
            scored.append((owner[row, 1:][keep].numpy(), nll[row][keep].double().numpy()))
    return scored


def document_nll(
    model, windows: list[list[int]], owners: list[list[int]], batch_size: int, shards: Shards | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per document (the indices of ``owners``): summed negative log-likelihood and predicted tokens of
    ``windows`` (:func:`window_nll`). With ``shards`` (a multi-process evaluation: a collective, every process
    calls it) each process scores whole batches of the one-process plan and the windows' results are
    gathered, then summed in window order: the same sums as one process."""
    shards = shards or Shards()
    batch = AutoBatchSize(batch_size)
    scored = shards.run(
        list(range(len(windows))),
        in_batches,
        lambda share: window_nll(model, [windows[i] for i in share], [owners[i] for i in share], batch.size),
        batch,
    )
    size = 1 + max((max(o) for o in owners if o), default=-1)
    sums, counts = np.zeros(size), np.zeros(size, dtype=np.int64)
    for _, (who, nll) in scored:
        np.add.at(sums, who, nll)
        np.add.at(counts, who, 1)
    return sums, counts


def text_loss(model, windows: list[list[int]], batch_size: int) -> tuple[float, int]:
    """(summed negative log-likelihood, predicted tokens) of ``windows`` under the causal ``model``."""
    sums, counts = document_nll(model, windows, [[0] * len(w) for w in windows], batch_size)
    return float(sums.sum()), int(counts.sum())


@register_evaluator("heldout", needs=(HELDOUT_TEXT,))
def heldout_evaluator(ctx: EvalContext) -> list[dict]:
    if not isinstance(ctx.text_format, CausalLMFormat):
        log.warning("heldout: perplexity of plain text is computed for decoder-only models; skipped")
        return []
    config = ctx.model.config
    context = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None) or 1024
    window = min(context, ctx.cfg.heldout_window)
    rows = []
    for path in heldout_files(list(ctx.cfg.heldout_text)):
        windows, owners = document_windows(ctx.text_format, path.read_text(encoding="utf-8"), window)
        sums, counts = document_nll(ctx.model, windows, owners, max(1, ctx.cfg.batch_size // 8), ctx.shards)
        total, count = float(sums.sum()), int(counts.sum())
        loss = total / count if count else None
        loss_ci = bootstrap_ratio_ci(sums, counts, B=BOOTSTRAP, seed=0)
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
                "n_documents": int((counts > 0).sum()),
                "loss_ci": loss_ci,
                "perplexity_ci": [math.exp(bound) for bound in loss_ci] if loss_ci else None,
                "bootstrap": BOOTSTRAP,
            }
        )
    return rows
