"""`evolve-score`: score predictions produced anywhere against a gold QA file (docs/metrics.md#1-answer-matching, docs/metrics.md#4-paired-temporal-metrics, docs/metrics.md#6-the-five-dimensions, docs/metrics.md#7-multiple-choice-and-confidence).

    evolve-score --gold GOLD.jsonl --predictions PRED.jsonl [--field KEY=SOURCE ...] [--json]

PRED.jsonl holds ``{"id", "prediction" [, "option_scores"]}`` lines, or is lm-evaluation-harness's
``--log_samples`` file (``samples_<task>_<date>.jsonl``) of a task written by ``evolve-data export-lm-eval``;
its gold file is the task's ``data/<task>.jsonl``.

Bad input (malformed line, missing or duplicate id in either file, unparseable timestamp) exits with 2 and
one line on stderr naming the file, the line and the reason.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from evolve_train.data.qa_items import iter_numbered_qa_items
from evolve_train.errors import EvolveTrainError, DataError
from evolve_train.evaluation.metrics import DEFAULT_STOPS, score_items
from evolve_train.export.lm_eval_samples import is_sample, sample_prediction

EXIT_BAD_INPUT = 2


def _parse_fields(pairs: Sequence[str], parser: argparse.ArgumentParser) -> dict[str, str]:
    mapping = {}
    for pair in pairs:
        key, sep, source = pair.partition("=")
        if not sep or not key.strip() or not source.strip():
            parser.error(f"--field expects KEY=SOURCE, got {pair!r}")
        mapping[key.strip()] = source.strip()
    return mapping


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _record_prediction(record: Any, fail) -> tuple[str, dict[str, Any]]:
    """``(id, {"prediction", "option_scores"})`` of one predictions record, or of one lm-eval logged sample."""
    if not isinstance(record, dict):
        raise fail(f"expected a JSON object, got {type(record).__name__}")
    if is_sample(record):
        try:
            return sample_prediction(record)
        except DataError as err:
            raise fail(err.reason, err.field) from None
    item_id = record.get("id")
    if item_id is None:
        raise fail("missing required field 'id'", "id")
    if isinstance(item_id, bool) or not isinstance(item_id, (str, int)):
        raise fail("wrong type: expected a string id", "id")
    prediction, scores = record.get("prediction"), record.get("option_scores")
    if scores is not None and (not isinstance(scores, list) or not scores or not all(_is_number(s) for s in scores)):
        raise fail("wrong type: expected a non-empty list of numbers", "option_scores")
    if prediction is None and scores is None:
        raise fail("missing required field 'prediction'", "prediction")
    if prediction is not None and not isinstance(prediction, str):
        raise fail(f"wrong type: expected a string, got {type(prediction).__name__}", "prediction")
    return str(item_id), {"prediction": prediction, "option_scores": scores}


def read_predictions(path: str | Path) -> dict[str, tuple[int, dict[str, Any]]]:
    """id → (line, {"prediction", "option_scores"}) from a predictions JSONL (``{"id", "prediction"
    [, "option_scores"]}``) or from lm-eval's ``--log_samples`` file of an exported task
    (``evolve_train/export/lm_eval_samples.py``; a document logged once per filter counts once); DataError names
    file and line."""
    path, found = Path(path), {}
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):

            def fail(reason: str, field: Optional[str] = None) -> DataError:
                return DataError(reason, file=str(path), line=number, field=field)

            try:
                text = raw.decode("utf-8").lstrip("\ufeff")
            except UnicodeDecodeError as err:
                raise fail(f"not valid UTF-8 (byte {err.start})") from None
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as err:
                raise fail(f"malformed JSON: {err.msg} (column {err.colno})") from None
            item_id, prediction = _record_prediction(record, fail)
            if item_id in found:
                if is_sample(record) and found[item_id][1] == prediction:
                    continue  # the same document under another filter
                raise fail(f"duplicate id '{item_id}' (lines {found[item_id][0]} and {number})", "id")
            found[item_id] = (number, prediction)
    if not found:
        raise DataError("empty file: no predictions", file=str(path))
    return found


def score_files(
    gold: str | Path,
    predictions: str | Path,
    fields: Optional[dict[str, str]] = None,
    stops: Sequence[str] = DEFAULT_STOPS,
) -> dict[str, Any]:
    """Read both files, check that their ids match one to one, and return `score_items`' report."""
    numbered = list(iter_numbered_qa_items(gold, fields))
    predicted = read_predictions(predictions)
    gold_ids = {item.id for _, item in numbered}
    for line, item in numbered:
        if item.id not in predicted:
            raise DataError(
                f"no prediction for id '{item.id}' in {predictions}",
                file=str(gold),
                line=line,
                field=(fields or {}).get("id", "id"),
            )
    for item_id, (line, _) in predicted.items():
        if item_id not in gold_ids:
            raise DataError(
                f"id '{item_id}' is not in the gold file {gold}", file=str(predictions), line=line, field="id"
            )
    items = [item for _, item in numbered]
    for line, item in numbered:
        scores = predicted[item.id][1]["option_scores"]
        if scores is not None and (item.options is None or len(scores) != len(item.options)):
            count = "no" if item.options is None else len(item.options)
            raise DataError(
                f"{len(scores)} option_scores for item '{item.id}' with {count} options",
                file=str(predictions),
                line=predicted[item.id][0],
                field="option_scores",
            )
    return score_items(items, {item_id: record for item_id, (_, record) in predicted.items()}, stops=stops)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def format_table(report: dict[str, Any]) -> str:
    """The report as aligned text rows: group, name, then metric=value columns."""
    rows: list[tuple[str, str, dict[str, Any]]] = [("overall", "", report["overall"])]
    rows += [("set", name, row) for name, row in report["sets"].items()]
    rows.append(("paired", "", report["paired"]))
    rows += [("time", name, row) for name, row in report["time_accuracy"].items()]
    rows.append(("retention", "", report["old_knowledge_retention"]))
    rows += [("dimension", name, row) for name, row in report["dimensions"].items()]
    rows.append(("calibration", "", report["calibration"]))
    width = max(len(f"{group} {name}".strip()) for group, name, _ in rows)
    return "\n".join(
        f"{f'{group} {name}'.strip():<{width}}  " + "  ".join(f"{key}={_fmt(value)}" for key, value in metrics.items())
        for group, name, metrics in rows
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evolve-score", description=__doc__.splitlines()[0])
    parser.add_argument("--gold", required=True, help="gold QA items (JSONL or CSV, the QA item contract)")
    parser.add_argument(
        "--predictions",
        required=True,
        help="JSONL with id, prediction [, option_scores], or lm-eval's samples_<task>_<date>.jsonl "
        "(--log_samples) of an exported task",
    )
    parser.add_argument(
        "--field",
        action="append",
        default=[],
        metavar="KEY=SOURCE",
        help="read contract field KEY from the gold file's SOURCE column (repeatable)",
    )
    parser.add_argument(
        "--stop",
        action="append",
        default=None,
        metavar="TEXT",
        help="cut predictions at this stop string, \\n for a newline (repeatable; default: newline)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of `evolve-score`; returns the exit status (0, or 2 on bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    stops = DEFAULT_STOPS if args.stop is None else tuple(s.replace("\\n", "\n") for s in args.stop)
    try:
        report = score_files(args.gold, args.predictions, _parse_fields(args.field, parser), stops)
    except (EvolveTrainError, ValueError, OSError) as err:
        message = str(err) if not isinstance(err, OSError) else f"{err.filename}: {err.strerror}"
        print(f"evolve-score: error: {message}".replace("\n", " "), file=sys.stderr)
        return EXIT_BAD_INPUT
    print(json.dumps(report, indent=2) if args.json else format_table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
