"""lm-evaluation-harness's ``--log_samples`` output (``samples_<task>_<date>.jsonl``) read as predictions.

One line per (document, filter): ``doc`` (the exported record, whose ``id`` is the QA item's), ``resps`` (per
request the list of raw responses, as strings), ``filtered_resps``, ``filter``, the metrics. A
``generate_until`` sample has one request whose first response is the generation (already cut by lm-eval at
its ``until`` strings); a ``multiple_choice`` sample has one request per option whose response is
``[log-likelihood, is_greedy]``. The raw generation is what evolve-score reads (it applies its own stop
strings and docs/metrics.md#1-answer-matching), not the filtered one, so a task with another filter scores the same.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from evolve_train.errors import DataError


def is_sample(record: Any) -> bool:
    """Whether a JSON record is an lm-eval logged sample (rather than ``{"id", "prediction"}``)."""
    return isinstance(record, dict) and "doc" in record and "resps" in record and "id" not in record


def _log_likelihood(response: Any, option: int) -> float:
    first = response[0] if isinstance(response, list) and response else None
    pair = first if isinstance(first, list) else response  # [[ll, greedy]] (resps) or [ll, greedy] (filtered)
    try:
        value = float(pair[0])
    except (TypeError, ValueError, IndexError, KeyError):
        raise DataError(
            f"option {option}: expected [log-likelihood, is_greedy], got {response!r}", field="resps"
        ) from None
    if not math.isfinite(value):
        raise DataError(f"option {option}: log-likelihood {value} is not finite", field="resps")
    return value


def sample_prediction(record: dict) -> tuple[str, dict[str, Optional[Any]]]:
    """``(item id, {"prediction", "option_scores"})`` of one logged sample; DataError names the field."""
    doc = record["doc"]
    if not isinstance(doc, dict) or doc.get("id") is None:
        raise DataError(
            "the sample's doc has no 'id' (not a task exported by evolve-data export-lm-eval?)", field="doc.id"
        )
    resps = record["resps"]
    if not isinstance(resps, list) or not resps or not all(isinstance(r, list) and r for r in resps):
        raise DataError("expected a non-empty list of per-request response lists", field="resps")
    if len(resps) == 1 and isinstance(resps[0][0], str):
        return str(doc["id"]), {"prediction": resps[0][0], "option_scores": None}
    scores = [_log_likelihood(response, option) for option, response in enumerate(resps)]
    return str(doc["id"]), {"prediction": None, "option_scores": scores}
