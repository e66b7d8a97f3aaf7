"""The ``lm_eval`` evaluator: lm-evaluation-harness tasks scored on every checkpoint of a run.

A local task (YAML + JSONL in a temp folder, found through ``eval.lm_eval.include_path``) is scored on each
checkpoint of a tiny run, full and LoRA, and the rows must equal what the ``lm_eval`` command line gives on the
saved ``steps/<k>`` (for a LoRA step: the previous step's weights with ``peft=steps/<k>/adapter``); the rows reach
``metrics.jsonl``, the W&B offline run and the report's curves.
"""

from __future__ import annotations

import importlib.util

import pytest

from evolve_train.run import train
from helpers import tiny_cfg
from helpers.lm_eval import TASK, needs_harness, overrides, write_tasks


def test_missing_harness_is_a_clear_error_before_training(tmp_path, monkeypatch):
    from evolve_train.errors import ConfigError
    from evolve_train.evaluation.evaluators import harness

    real = importlib.util.find_spec
    monkeypatch.setattr(harness.importlib.util, "find_spec", lambda name: None if name == "lm_eval" else real(name))
    with pytest.raises(ConfigError, match="lm-evaluation-harness is not installed"):
        train(tiny_cfg(tmp_path / "run", *overrides(tmp_path / "tasks")))
    assert not (tmp_path / "run" / "steps").exists()


@needs_harness
@pytest.mark.parametrize(
    "extra, message",
    [
        (["eval.lm_eval.tasks=[]"], "eval.lm_eval.tasks: empty"),
        ([f"eval.lm_eval.tasks=[{TASK},no_such_task_here]"], "unknown task 'no_such_task_here'"),
    ],
)
def test_bad_task_settings_fail_before_training(tmp_path, extra, message):
    from evolve_train.errors import ConfigError

    tasks = write_tasks(tmp_path / "tasks")
    with pytest.raises(ConfigError, match=message):
        train(tiny_cfg(tmp_path / "run", *overrides(tasks, *extra)))
    assert not (tmp_path / "run" / "steps").exists()


def test_missing_include_path_names_the_key(tmp_path):
    from evolve_train.errors import ConfigError
    from evolve_train.evaluation.evaluators.harness import check_inputs

    if importlib.util.find_spec("lm_eval") is None:
        pytest.skip("lm-evaluation-harness is not installed")
    cfg = tiny_cfg(tmp_path / "run", *overrides(tmp_path / "absent"))
    from omegaconf import OmegaConf

    with pytest.raises(ConfigError, match=r"eval.lm_eval.include_path\[0\]: .*absent is not a folder"):
        check_inputs(OmegaConf.to_object(cfg), None)


def test_metric_rows_of_lm_eval_results():
    from evolve_train.evaluation.evaluators.harness import metric_values

    results = {
        "results": {
            "t": {
                "alias": "t",
                "acc,none": 0.5,
                "acc_stderr,none": 0.1,
                "exact_match,answer": 0.25,
                "exact_match_stderr,answer": "N/A",
                "sample_len": 8,
            },
            "g": {"alias": "g", "acc,none": 0.4, "acc_stderr,none": 0.05},
        },
        "groups": {"g": {"alias": "g", "acc,none": 0.4, "acc_stderr,none": 0.05}},
        "n-samples": {"t": {"original": 10, "effective": 8}},
    }
    assert metric_values(results) == [
        {"task": "t", "metric": "acc", "value": 0.5, "stderr": 0.1, "n": 8},
        {"task": "t", "metric": "exact_match,answer", "value": 0.25, "stderr": None, "n": 8},
        {"task": "g", "metric": "acc", "value": 0.4, "stderr": 0.05, "n": None},
    ]


def test_initial_cache_key_follows_the_local_task_files(tmp_path):
    from evolve_train.evaluation.evaluators.harness import tasks_fingerprint
    from evolve_train.config import LmEvalConfig

    tasks = write_tasks(tmp_path / "tasks")
    settings = LmEvalConfig(tasks=[TASK], include_path=[str(tasks)])
    before = tasks_fingerprint(settings)
    assert tasks_fingerprint(settings) == before
    (tasks / "toy.jsonl").write_text((tasks / "toy.jsonl").read_text().replace("Paris", "Lille"))
    assert tasks_fingerprint(settings) != before
    assert tasks_fingerprint(LmEvalConfig()) is None


def test_the_task_index_is_built_once_per_process_until_a_task_file_changes(tmp_path, monkeypatch):
    """Indexing lm-eval's tasks reads every built-in task file (seconds): the check before training and each
    checkpoint's evaluation share one index; a new or edited file under ``include_path`` builds a new one."""
    import sys
    import types

    from evolve_train.evaluation.evaluators import harness

    built = []

    class TaskManager:
        def __init__(self, include_path=None):
            built.append(include_path)

    fake = types.ModuleType("lm_eval.tasks")
    fake.TaskManager = TaskManager
    monkeypatch.setitem(sys.modules, "lm_eval", types.ModuleType("lm_eval"))
    monkeypatch.setitem(sys.modules, "lm_eval.tasks", fake)
    monkeypatch.setattr(harness, "_INDEX", {})
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "a.yaml").write_text("task: a\n")
    settings = types.SimpleNamespace(include_path=[str(folder)])
    first = harness.task_manager(settings)
    assert harness.task_manager(settings) is first and len(built) == 1
    (folder / "b.yaml").write_text("task: b\n")
    second = harness.task_manager(settings)
    assert second is not first and len(built) == 2 and harness.task_manager(settings) is second
    assert built[-1] == [str(folder.resolve())]
