"""lm-evaluation-harness tasks written here, and the overrides of a run that scores them."""

import importlib.util
import json
from pathlib import Path
import pytest


needs_harness = pytest.mark.skipif(
    importlib.util.find_spec("lm_eval") is None,
    reason="lm-evaluation-harness is not installed (pip install -e '.[lmeval]'; CI installs it)",
)


DOCS = [
    ("Alice lives in", ["Paris", "Rome", "Oslo"], 0),
    ("The river runs to the", ["sea", "mountain", "desert"], 0),
    ("Bob works at", ["Acme", "Globex", "Initech"], 1),
    ("The sky is", ["blue", "green", "loud"], 0),
    ("Two plus two is", ["four", "five", "six"], 0),
    ("The company was founded in", ["1990", "2001", "1875"], 2),
    ("Carol is the chief of", ["Umbrella", "Acme", "Hooli"], 2),
    ("The city of", ["Lyon", "Bern", "Kyiv"], 1),
]


TASK = "toy_choice"


GEN_TASK = "toy_complete"


def write_tasks(folder: Path) -> Path:
    """A multiple-choice and a generation task over the same eight documents."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "toy.jsonl"
    data.write_text(
        "".join(json.dumps({"question": q, "choices": c, "label": g}) + "\n" for q, c, g in DOCS), encoding="utf-8"
    )
    common = f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\ntest_split: test\n"
    (folder / f"{TASK}.yaml").write_text(
        f"task: {TASK}\n{common}output_type: multiple_choice\ndoc_to_text: '{{{{question}}}}'\n"
        "doc_to_choice: '{{choices}}'\ndoc_to_target: label\n"
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
        "  - metric: acc_norm\n    aggregation: mean\n    higher_is_better: true\n",
        encoding="utf-8",
    )
    (folder / f"{GEN_TASK}.yaml").write_text(
        f"task: {GEN_TASK}\n{common}output_type: generate_until\ndoc_to_text: '{{{{question}}}}'\n"
        "doc_to_target: '{{choices[label]}}'\ngeneration_kwargs:\n  until: ['\\n']\n  max_gen_toks: 4\n"
        "  do_sample: false\nmetric_list:\n  - metric: exact_match\n    aggregation: mean\n"
        "    higher_is_better: true\n",
        encoding="utf-8",
    )
    return folder


def overrides(tasks_dir: Path, *extra: str) -> list[str]:
    return [
        "data.world.n_steps=2",
        "eval.evaluators=[splits,lm_eval]",
        f"eval.lm_eval.tasks=[{TASK},{GEN_TASK}]",
        f"eval.lm_eval.include_path=[{tasks_dir}]",
        "eval.lm_eval.batch_size=4",
        "eval.eval_initial=true",
        *extra,
    ]
