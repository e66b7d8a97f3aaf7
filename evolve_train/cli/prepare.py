"""``evolve-data prepare``: tokenize everything a run will train on into its tokenized cache, ahead of the run
(a CPU job before the GPU job: docs/data.md, "Preparing data ahead of a run").

With the run's overrides it reads the run's data as ``train.py`` would (every training file into
``<cache>/corpora/``), builds the run's tokenizer, then writes the tokenized cache entry of every time step in
its objective (``training/token_cache.py``: the keys the run looks up, so replay's and the oracle's history,
which read earlier steps' entries, hit them too) and of the general mix (``data.mix_files``). A run on the
prepared cache tokenizes nothing; preparing again finds every entry and writes nothing. The tokenizer encodes
each batch with ``workers`` threads (``tokenizers``' parallel batch encode). Progress: a bar per entry on a
terminal and one line per entry on the console and in ``<cache>/prepare.log``.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Optional, Sequence

from evolve_train.errors import ConfigError

log = logging.getLogger("evolve_train.prepare")
LOG_FILE = "prepare.log"


def use_workers(workers: Optional[int]) -> int:
    """Let the tokenizer encode batches on ``workers`` threads (default: every CPU); returns the count. Call it
    before the first encode of the process (the thread pool is sized then)."""
    count = workers or os.cpu_count() or 1
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if count > 1 else "false"
    os.environ["RAYON_NUM_THREADS"] = str(count)
    return count


def _file_log(root: Path) -> logging.Handler:
    root.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(root / LOG_FILE, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    return handler


def prepare(overrides: Sequence[str], config_dir: Optional[Path] = None, workers: Optional[int] = None) -> dict:
    """Write the tokenized cache entries of the run of ``overrides``; ``{"root", "entries": [{"name", "hit",
    "rows", "tokens", "seconds"}, ...], "workers"}``."""
    from evolve_train.compose import compose_config

    saved = {name: os.environ.get(name) for name in ("TOKENIZERS_PARALLELISM", "RAYON_NUM_THREADS")}
    count = use_workers(workers)
    try:
        return _prepare(compose_config(overrides, config_dir), count)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _prepare(cfg, count: int) -> dict:
    from evolve_train.data.cache import resolve_cache_dir
    from evolve_train.data.mix import mix_corpus
    from evolve_train.data.objective import check_objectives
    from evolve_train.evaluation.inputs import load_inputs
    from evolve_train.models.build import build_text_format, run_tokenizer
    from evolve_train.training.token_cache import TokenCache

    root = resolve_cache_dir(cfg.data.cache_dir)
    if root is None:
        raise ConfigError("evolve-data prepare writes into data.cache_dir: set it (the run must set the same)")
    handler = _file_log(root)
    try:
        timeline, _ = load_inputs(cfg)
        objectives = check_objectives(cfg, timeline)
        text_format = build_text_format(cfg.model, run_tokenizer(cfg.model, timeline.steps[0]))
        tokens = TokenCache(root, text_format)
        work = list(zip(timeline.steps, objectives))
        mix = mix_corpus(cfg.data)
        if mix is not None:
            work.append((mix, "clm"))
        log.info("preparing %d entries into %s with %d workers", len(work), root, count)
        entries = [
            _entry(tokens, step, objective, cfg.trainer.seq_len, k, len(work))
            for k, (step, objective) in enumerate(work)
        ]
        made = sum(not e["hit"] for e in entries)
        log.info("done: %d entries tokenized, %d already prepared", made, len(entries) - made)
        return {"root": str(root), "entries": entries, "workers": count}
    finally:
        log.removeHandler(handler)
        handler.close()


def _entry(tokens, step, objective: str, seq_len: int, k: int, total: int) -> dict:
    import pyarrow.compute as pc

    start, misses = time.perf_counter(), tokens.misses
    examples = tokens.examples(step, objective, seq_len)
    seconds = time.perf_counter() - start
    hit = tokens.misses == misses
    n_tokens = int(pc.sum(pc.list_value_length(examples.data.table.column("input_ids"))).as_py() or 0)
    entry = {"name": step.name, "objective": objective, "hit": hit, "rows": len(examples), "seconds": seconds}
    entry["tokens"] = n_tokens
    if hit:
        log.info("[%d/%d] %s (%s): already prepared, %d rows", k + 1, total, step.name, objective, len(examples))
    else:
        log.info(
            "[%d/%d] %s (%s): %d rows, %d tokens in %.1f s (%.0f tokens/s)",
            k + 1, total, step.name, objective, len(examples), n_tokens, seconds, n_tokens / max(seconds, 1e-9),
        )  # fmt: skip
    return entry
