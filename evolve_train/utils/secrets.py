"""Which key names may hold a secret: one rule for the W&B config filter and the run-dir redaction.

A key is secret when its lowercase name contains ``secret`` or ``password``, or when a part of it (split on
anything but letters and digits) ends in ``key``, ``token``, ``secret``, ``password``, ``passwd`` or
``credential(s)``: ``api_key``, ``hf_token``, ``WANDB_API_KEY``, ``client_secret``, ``db_password``. Plural
``tokens`` (``max_new_tokens``, ``train_tokens``) and ``tokenizer`` are not secret.
"""

from __future__ import annotations

import re

_SECRET_SEGMENT = re.compile(r"(key|token|secret|password|passwd|credentials?)$")


def is_secret_key(name: str) -> bool:
    """True for config keys that may hold a secret (``api_key``, ``hf_token``, ``wandbApiKey``...)."""
    lowered = str(name).lower()
    if "secret" in lowered or "password" in lowered:
        return True
    return any(_SECRET_SEGMENT.search(part) for part in re.split(r"[^a-z0-9]+", lowered) if part)


__all__ = ["is_secret_key"]
