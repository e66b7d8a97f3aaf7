"""General documents mixed into every step after step 0 (``data.mix_files``, ``data.mix_ratio``): replay of
pretraining-like data (Ibrahim et al. 2024), read here into one corpus that is never a time step.

The entries are read as ``data.train_files``' are (``loaders/temporal_qa.py: expand_entry``: files, folders,
globs, relative to ``data.root``; ``.txt`` split by ``data.txt_documents``), streamed into Arrow like any
training file. Only documents: a file of masked-entity pairs is refused. The rows they give and the share
they are mixed at are the method's (``methods/general_mix.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from evolve_train.config import DataConfig
from evolve_train.data.cache import resolve_cache_dir
from evolve_train.data.corpus import concat_records
from evolve_train.data.loaders.common import read_training_file
from evolve_train.data.loaders.temporal_qa import expand_entry
from evolve_train.data.schema import TimeStep
from evolve_train.errors import DataError

KEY = "data.mix_files"
MIX_STEP = -1
"""The index of the mix corpus's :class:`TimeStep`: no time step of the timeline."""


def mix_files(cfg: DataConfig) -> list[tuple[Path, str]]:
    """``(file, document name)`` of every ``data.mix_files`` entry, each file once; a DataError naming
    ``data.mix_files`` for an entry that matches nothing."""
    files, seen = [], set()
    for entry in [cfg.mix_files] if isinstance(cfg.mix_files, str) else cfg.mix_files:
        try:
            expanded = expand_entry(str(entry), cfg.root, "mix")
        except DataError as err:
            raise DataError(err.reason.replace("step mix: ", "").replace(" of step mix", ""), file=err.file, field=KEY)
        for path, name in expanded:
            if path.resolve() not in seen:
                seen.add(path.resolve())
                files.append((path, name))
    return files


def mix_corpus(cfg: DataConfig) -> Optional[TimeStep]:
    """The general documents as one corpus (``TimeStep`` ``mix``, index :data:`MIX_STEP`), or ``None`` without
    ``data.mix_files``. DataError for a file of masked-entity pairs, or files that hold no document."""
    if not cfg.mix_files:
        return None
    files = mix_files(cfg)
    cache_dir = resolve_cache_dir(cfg.cache_dir)
    texts = []
    for path, name in files:
        pairs, documents = read_training_file(path, cache_dir, cfg.txt_documents, name, cfg.text_field)
        if len(pairs):
            raise DataError(
                "a mix file holds masked-entity pairs; general data is documents (JSONL/CSV with 'text', or .txt)",
                file=str(path),
                field=KEY,
            )
        texts.append(documents)
    corpus = concat_records(texts)
    if not len(corpus):
        raise DataError(f"the {len(files)} mix file(s) hold no document", file=str(files[0][0]), field=KEY)
    return TimeStep(index=MIX_STEP, name="mix", texts=corpus, files=[str(path) for path, _ in files])
