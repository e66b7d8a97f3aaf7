"""A timeline's eval sets as an lm-evaluation-harness task directory (``evolve-data export-lm-eval``).

Written under ``out``:

* ``<prefix>_<set>.yaml``: a ``generate_until`` task per eval set, every item; ``doc_to_text`` is the item's
  prompt exactly as evolve-train asks it (``timeline.prompt(item)``), generation stops at ``eval.stop_strings``
  (lm-eval adds the EOS) after at most ``eval.max_new_tokens`` tokens, greedy. The filter ``answer`` cuts the
  generation at the stop strings and strips it; ``exact_match`` and ``f1`` follow docs/metrics.md#1-answer-matching.
* ``<prefix>_<set>_mc.yaml``: a ``multiple_choice`` task over the set's items that carry ``options``
  (``acc``, ``acc_norm`` by characters, ``acc_bytes`` = evolve-train's ``acc_norm`` by UTF-8 bytes).
* ``<prefix>_<kind>_all.yaml``: a group per kind of set (unchanged, new, updated, outdated, ...; ``_mc_all``
  for the choice tasks), its metrics pooled over the items of its sets.
* ``data/<task>.jsonl``: the items in the QA item contract plus ``prompt`` and ``target`` (the first alias),
  a valid ``--gold`` file for ``evolve-score``.
* ``utils.py`` (the filter, the metric and the few-shot pool; standard library only) and ``evolve_export.json``
  (the manifest).

Few-shot examples (``--num_fewshot``) come from the set's own ``dev`` items only (docs/metrics.md#8-statistics-and-hygiene):
``fewshot_split`` is the test split itself, so lm-eval never shows an item as its own example, and
``utils.dev_items`` keeps its dev items; a set without dev items has none to give (lm-eval then stops with
"no documents available for sampling" instead of showing private items).

The YAML names the data files by absolute path (lm-eval resolves ``data_files`` against its working
directory): export again after moving the directory.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml

from evolve_train.data.qa_items import CONTRACT_FIELDS, QAItem
from evolve_train.data.timeline import EvalSet, Timeline
from evolve_train.errors import ConfigError, DataError
from evolve_train.utils.io import atomic_dir, jsonl_text, remove_stale_tmp

MANIFEST = "evolve_export.json"
FILTER = "answer"
UTILS_SOURCE = Path(__file__).with_name("lm_eval_utils.py")
GENERATION_METRICS = ("exact_match", "f1")
CHOICE_METRICS = ("acc", "acc_norm", "acc_bytes")
_NAME = re.compile(r"[^A-Za-z0-9_]+")


class _Function(str):
    """A YAML ``!function module.name`` reference, resolved by lm-eval relative to the YAML file."""


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:  # every list written out, no &id001 anchors
        return True


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    control = any(ch in value for ch in "\n\r\t")  # stop strings such as "\n" as escapes, not line breaks
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"' if control else None)


_Dumper.add_representer(_Function, lambda dumper, value: dumper.represent_scalar("!function", str(value)))
_Dumper.add_representer(str, _represent_str)


@dataclass
class ExportedTask:
    name: str
    set_name: str
    kind: str
    output_type: str
    records: list[dict] = field(repr=False)

    @property
    def n_dev(self) -> int:
        return sum(1 for record in self.records if record.get("split") == "dev")


def task_name(prefix: str, *parts: str) -> str:
    """An lm-eval task or group name: the parts joined by ``_``, other characters than [A-Za-z0-9_] as ``_``."""
    return "_".join(_NAME.sub("_", part).strip("_") for part in (prefix, *parts) if part)


def contract_record(item: dict, prompt: str, eval_set: EvalSet) -> dict:
    """The item's contract fields (validated, ``None`` left out), its prompt and its first alias as ``target``."""
    try:
        qa_item = QAItem.from_dict({key: item.get(key) for key in CONTRACT_FIELDS})
    except DataError as err:
        raise DataError(f"eval set {eval_set.name}, item '{item.get('id')}': {err.reason}", field=err.field) from None
    record = qa_item.to_dict()
    return {**record, "prompt": prompt, "target": qa_item.answers[0] if qa_item.answers else ""}


def _gold_index(record: dict) -> int:
    if record.get("gold_index") is not None:
        return record["gold_index"]
    options = record["options"]
    for gold in record["answers"]:  # the first alias first, as the calibration evaluator reads it
        if gold in options:
            return options.index(gold)
    raise DataError(f"item '{record['id']}': no option equals a gold answer and no gold_index", field="options")


def choice_record(record: dict) -> dict:
    """A multiple-choice record: ``choices`` (the options, stripped: lm-eval puts one space before each, as
    evolve-train scores ``" " + option``) and ``label`` (the gold option's index)."""
    return {**record, "choices": [option.strip() for option in record["options"]], "label": _gold_index(record)}


def plan_tasks(timeline: Timeline, prefix: str, max_items_per_set: int = 0) -> list[ExportedTask]:
    """The tasks of every eval set: a generation task, and a choice task where items carry options."""
    tasks: list[ExportedTask] = []
    for eval_set in timeline.eval_sets:
        items = eval_set.items
        if max_items_per_set > 0:
            from evolve_train.evaluation.context import sample_items  # the evaluator's own seeded sample

            items = sample_items(items, max_items_per_set)
        if not items:
            continue
        records = [contract_record(item, timeline.prompt(item), eval_set) for item in items]
        tasks.append(_task(task_name(prefix, eval_set.name), eval_set, "generate_until", records))
        with_options = [choice_record(r) for r in records if r.get("options")]
        if with_options:
            tasks.append(_task(task_name(prefix, eval_set.name, "mc"), eval_set, "multiple_choice", with_options))
    names = [task.name for task in tasks]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ConfigError(f"eval set names give the same lm-eval task name {duplicates}: rename the sets")
    return tasks


def _task(name: str, eval_set: EvalSet, output_type: str, records: list[dict]) -> ExportedTask:
    return ExportedTask(name=name, set_name=eval_set.name, kind=eval_set.kind, output_type=output_type, records=records)


def _common(task: ExportedTask, out: Path) -> dict[str, Any]:
    files = {"test": str(out / "data" / f"{task.name}.jsonl")}
    return {
        "task": task.name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": files},
        "test_split": "test",
        "fewshot_split": "test",
        "fewshot_config": {"process_docs": _Function("utils.dev_items")},
        "output_type": task.output_type,
        "doc_to_text": "prompt",
    }


def generation_task_config(
    task: ExportedTask, out: Path, stop_strings: Sequence[str], max_new_tokens: int
) -> dict[str, Any]:
    """``generate_until`` with evolve-train's prompt, stop strings, token budget, filter and metrics."""
    return {
        **_common(task, out),
        "doc_to_target": "target",
        "generation_kwargs": {
            "until": list(stop_strings),
            "max_gen_toks": max_new_tokens,
            "do_sample": False,
            "temperature": 0.0,
        },
        "filter_list": [
            {
                "name": FILTER,
                "filter": [
                    {"function": "custom", "filter_fn": _Function("utils.answer_filter")},
                    {"function": "take_first"},
                ],
            }
        ],
        "process_results": _Function("utils.process_results"),
        "metric_list": [{"metric": m, "aggregation": "mean", "higher_is_better": True} for m in GENERATION_METRICS],
        "metadata": {"version": 1.0, "eval_set": task.set_name, "kind": task.kind},
    }


def choice_task_config(task: ExportedTask, out: Path) -> dict[str, Any]:
    """``multiple_choice`` over ``choices`` (one space before each option), gold = ``label``."""
    return {
        **_common(task, out),
        "doc_to_choice": "choices",
        "doc_to_target": "label",
        "target_delimiter": " ",
        "metric_list": [{"metric": m, "aggregation": "mean", "higher_is_better": True} for m in CHOICE_METRICS],
        "metadata": {"version": 1.0, "eval_set": task.set_name, "kind": task.kind},
    }


def group_configs(tasks: Sequence[ExportedTask], prefix: str) -> list[dict[str, Any]]:
    """A group per (kind, output type), metrics pooled over its items (``weight_by_size``)."""
    members: dict[tuple[str, str], list[str]] = {}
    for task in tasks:
        members.setdefault((task.kind, task.output_type), []).append(task.name)
    groups = []
    for (kind, output_type), names in members.items():
        choice = output_type == "multiple_choice"
        metrics, filters = (CHOICE_METRICS, ["none"]) if choice else (GENERATION_METRICS, [FILTER])
        groups.append(
            {
                "group": task_name(prefix, kind, "mc" if choice else "", "all"),
                "task": names,
                "aggregate_metric_list": [
                    {"metric": m, "filter_list": filters, "aggregation": "mean", "weight_by_size": True}
                    for m in metrics
                ],
                "metadata": {"version": 1.0, "kind": kind},
            }
        )
    return groups


def _write_yaml(path: Path, config: dict[str, Any]) -> None:
    path.write_text(
        yaml.dump(config, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1000), encoding="utf-8"
    )


def _check_out(out: Path) -> None:
    """``out`` may be new, empty, or an earlier export holding only its own files (and lm-eval's __pycache__)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise ConfigError(f"--out {out} is a file, not a directory")
    present = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    if not present:
        return
    try:
        owned = set(json.loads((out / MANIFEST).read_text(encoding="utf-8"))["files"])
    except (OSError, ValueError, KeyError, TypeError):
        raise ConfigError(
            f"--out {out} is not empty and is not an lm-eval export of evolve-train (no readable "
            f"{MANIFEST}): choose a new or empty directory"
        ) from None
    foreign = sorted(present - owned)
    if foreign:
        raise ConfigError(
            f"--out {out} holds files the earlier export did not write ({foreign[0]}"
            f"{' ...' if len(foreign) > 1 else ''}): move them away or choose another directory"
        )


def _write_tree(
    target: Path,
    out: Path,
    tasks: Sequence[ExportedTask],
    groups: list[dict],
    manifest: dict,
    stop_strings: Sequence[str],
    max_new_tokens: int,
) -> None:
    (target / "data").mkdir(parents=True)
    for task in tasks:
        (target / "data" / f"{task.name}.jsonl").write_text(jsonl_text(task.records), encoding="utf-8")
        config = (
            generation_task_config(task, out, stop_strings, max_new_tokens)
            if task.output_type == "generate_until"
            else choice_task_config(task, out)
        )
        _write_yaml(target / f"{task.name}.yaml", config)
    for group in groups:
        _write_yaml(target / f"{group['group']}.yaml", group)
    shutil.copyfile(UTILS_SOURCE, target / "utils.py")
    manifest["files"] = sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()) + [MANIFEST]
    (target / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _check_settings(prefix: str, max_new_tokens: int) -> None:
    if not prefix or task_name(prefix) != prefix:
        raise ConfigError(f"--prefix {prefix!r}: use letters, digits and '_' only")
    if max_new_tokens <= 0:
        raise ConfigError(f"eval.max_new_tokens must be positive, got {max_new_tokens}")


def export_lm_eval(
    timeline: Timeline,
    out: str | Path,
    *,
    stop_strings: Sequence[str],
    max_new_tokens: int,
    prefix: str = "evolve",
    max_items_per_set: int = 0,
    source: Optional[dict[str, Any]] = None,
    stop_patterns: Sequence[str] = (),
) -> dict[str, Any]:
    """Write the task directory ``out`` (replacing an earlier export there, never other files); returns the
    manifest: tasks with their set, kind, output type and item count, groups, stop strings, token budget."""
    _check_settings(prefix, max_new_tokens)
    out = Path(out).resolve()
    _check_out(out)
    tasks = plan_tasks(timeline, prefix, max_items_per_set)
    if not tasks:
        raise ConfigError("the timeline has no eval items to export")
    groups = group_configs(tasks, prefix)
    clash = {g["group"] for g in groups} & {t.name for t in tasks}
    if clash:
        raise ConfigError(f"group and task names clash: {sorted(clash)}; rename the eval sets")
    manifest = {
        "format": 1,
        "prefix": prefix,
        "stop_strings": list(stop_strings),
        "stop_patterns": list(stop_patterns),
        "max_new_tokens": max_new_tokens,
        "prompt_template": timeline.prompt_template,
        "source": source or {},
        "tasks": [
            {
                "task": t.name,
                "set": t.set_name,
                "kind": t.kind,
                "output_type": t.output_type,
                "n": len(t.records),
                "n_dev": t.n_dev,
                "data": f"data/{t.name}.jsonl",
            }
            for t in tasks
        ],
        "groups": {g["group"]: g["task"] for g in groups},
    }
    remove_stale_tmp(out.parent, of=out.name)  # what an interrupted export left
    with atomic_dir(out) as staging:  # replaces the earlier export
        _write_tree(staging, out, tasks, groups, manifest, stop_strings, max_new_tokens)
    return manifest


def export_from_overrides(
    out: str | Path, overrides: Sequence[str] = (), *, prefix: str = "evolve", config_dir: Optional[str | Path] = None
) -> dict[str, Any]:
    """Compose the run configuration from ``overrides`` (as ``train.py`` takes them), build its timeline and
    export it with its ``eval.stop_strings``, ``eval.max_new_tokens`` and ``eval.max_items_per_set``."""
    from evolve_train.data.few_shot import with_few_shot
    from evolve_train.data.timeline import build_timeline
    from evolve_train.compose import compose_config

    cfg = compose_config(overrides, config_dir)
    _check_settings(prefix, cfg.eval.max_new_tokens)  # before the timeline is built
    _check_out(Path(out).resolve())
    timeline = with_few_shot(build_timeline(cfg.data), cfg.eval.few_shot)  # the prompts a run asks
    return export_lm_eval(
        timeline,
        out,
        stop_strings=cfg.eval.stop_strings,
        max_new_tokens=cfg.eval.max_new_tokens,
        prefix=prefix,
        max_items_per_set=cfg.eval.max_items_per_set,
        source={"data_kind": cfg.data.kind, "overrides": list(overrides)},
        stop_patterns=cfg.eval.stop_patterns,
    )
