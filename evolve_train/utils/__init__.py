"""Shared helpers at the bottom of the package: file I/O (``io``: atomic writes, JSONL) and secret detection
(``secrets``). Nothing here imports from the rest of ``evolve_train``, so every layer may use them."""
