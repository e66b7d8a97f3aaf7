"""`evolve-data export-lm-eval` (lm-evaluation-harness task directory) and lm-eval samples in `evolve-score`.

The end-to-end check against a real lm-eval run is the slow `test_lm_eval_harness.py`."""

import ast
import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest
import yaml

from evolve_train.cli.data import main as data_main
from evolve_train.cli.score import main as score_main, read_predictions
from evolve_train.config import DataConfig, WorldConfig
from evolve_train.data.qa_items import read_qa_items
from evolve_train.data.timeline import build_timeline
from evolve_train.errors import ConfigError, DataError
from evolve_train.evaluation.context import sample_items
from evolve_train.evaluation.metrics import answer
from evolve_train.export import lm_eval_utils
from evolve_train.export.lm_eval import MANIFEST, export_from_overrides, export_lm_eval

SMALL = [
    "data.world.n_entities=12",
    "data.world.new_entities_per_step=4",
    "data.world.n_people=10",
    "data.world.n_cities=10",
    "eval.max_new_tokens=7",
]
STOPS = ["\n", "Question:"]


class _FunctionLoader(yaml.SafeLoader):
    pass


_FunctionLoader.add_constructor("!function", lambda loader, node: ("!function", loader.construct_scalar(node)))


def load_yaml(path: Path) -> dict:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_FunctionLoader)


def small_timeline():
    return build_timeline(
        DataConfig(world=WorldConfig(n_entities=12, new_entities_per_step=4, n_people=10, n_cities=10))
    )


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "tasks"
    manifest = export_lm_eval(small_timeline(), out, stop_strings=STOPS, max_new_tokens=7)
    return out, manifest


def shipped_utils(directory: Path):
    """The task directory's utils.py imported from its file, as lm-eval does."""
    spec = importlib.util.spec_from_file_location(f"utils_{abs(hash(str(directory)))}", directory / "utils.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- utils.py: docs/metrics.md#1-answer-matching without evolve_train --------------------------------------------------------------

PIECES = [
    "The",
    "the",
    "a",
    "An",
    "AN",
    "an",
    "Paris",
    "paris",
    "theatre",
    "anna",
    "A.",
    "(the)",
    "1907",
    "U.S.A.",
    "\u00a0",
    "\u3000",
    "\t",
    "\n",
    "  ",
    "-",
    "'",
    "\u2019",
    "\uff21\uff22",
    "\ufb01",
    "Ⅻ",
    "é",
    "e\u0301",
    "İstanbul",
    "ß",
    "ǅ",
    "!?",
    "«",
    "»",
    "—",
    "…",
    "_",
    "x_y",
    "ﬀ",
    "²",
    "½",
    "Σ",
    "ς",
    "日本",
    ",",
    ";",
]


def random_strings(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    alphabet = [chr(c) for c in range(32, 127)] + list("\u00a0\u2019\u00e9\u00df\u0130\u3000\uff21\ufb01\u2166")
    texts = []
    for _ in range(n):
        if rng.random() < 0.5:
            words = [rng.choice(PIECES) + rng.choice(["", " ", "  ", "\u00a0"]) for _ in range(rng.randint(0, 6))]
            texts.append("".join(words))
        else:
            texts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20))))
    return texts


def test_shipped_normalization_equals_the_package_one_on_many_strings():
    texts = random_strings(4000)
    assert len(set(texts)) > 3000
    for text in texts:
        assert lm_eval_utils.normalize(text) == answer.normalize(text), repr(text)
    rng = random.Random(1)
    for _ in range(3000):
        prediction, golds = rng.choice(texts), rng.sample(texts, rng.randint(1, 3))
        assert lm_eval_utils.exact_match(prediction, golds) == answer.exact_match(prediction, golds)
        assert lm_eval_utils.f1(prediction, golds) == answer.f1(prediction, golds)
        stops = rng.sample(["\n", "Q", "the", "", " "], rng.randint(0, 3))
        assert lm_eval_utils.cut_at_stop(prediction, stops) == answer.cut_at_stop(prediction, stops)
    assert lm_eval_utils.exact_match(" The Paris.", "paris") == 1 and lm_eval_utils.f1("", []) == 0.0


def test_shipped_utils_imports_only_the_standard_library():
    tree = ast.parse(Path(lm_eval_utils.__file__).read_text(encoding="utf-8"))
    roots = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    roots |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert roots and roots <= set(sys.stdlib_module_names) | {"__future__"}, roots


def test_exported_filter_and_metric_score_a_leading_space_right(exported):
    out, _ = exported
    utils = shipped_utils(out)
    assert utils.stop_strings() == ("\n", "Question:")
    filtered = utils.answer_filter([[" Brito Lodal\nThe director"], [" 1907 Question: when"]], [{}, {}])
    assert filtered == [["Brito Lodal"], ["1907"]]
    doc = {"answers": ["Brito Lodal", "B. Lodal"]}
    assert utils.process_results(doc, [" brito lodal"]) == {"exact_match": 1, "f1": 1.0}
    assert utils.process_results(doc, ["Lodal"]) == {"exact_match": 0, "f1": pytest.approx(2 / 3)}


def test_exported_stop_patterns_cut_as_a_run_does(tmp_path):
    from evolve_train.evaluation.metrics.answer import prediction_of

    pattern = r"(?<!^[A-Z])(?<![\s.][A-Z])\.(?:\s|$)"
    out = tmp_path / "tasks"
    manifest = export_lm_eval(small_timeline(), out, stop_strings=["\n"], max_new_tokens=7, stop_patterns=[pattern])
    assert manifest["stop_patterns"] == [pattern]
    utils = shipped_utils(out)
    raw = ["\n A. P. J. Abdul Kalam. He was", " Brito Lodal"]
    assert utils.answer_filter([[r] for r in raw], [{}, {}]) == [[prediction_of(r, ["\n"], [pattern])] for r in raw]
    assert utils.answer_filter([[raw[0]]], [{}]) == [["A. P. J. Abdul Kalam"]]


# --- the task directory ----------------------------------------------------------------------------------------


def test_a_task_per_set_with_our_prompt_stops_and_budget(exported):
    out, manifest = exported
    timeline = small_timeline()
    tasks = {t["task"]: t for t in manifest["tasks"]}
    for eval_set in timeline.eval_sets:
        name = f"evolve_{eval_set.name}"
        config = load_yaml(out / f"{name}.yaml")
        assert config["task"] == name and config["output_type"] == "generate_until"
        assert config["generation_kwargs"]["until"] == ["\n", "Question:"]
        assert config["generation_kwargs"]["max_gen_toks"] == 7 and config["generation_kwargs"]["do_sample"] is False
        assert config["doc_to_text"] == "prompt" and config["dataset_path"] == "json"
        assert config["process_results"] == ("!function", "utils.process_results")
        assert config["filter_list"][0]["name"] == "answer"
        test_file = Path(config["dataset_kwargs"]["data_files"]["test"])
        assert test_file.is_absolute() and test_file == out / "data" / f"{name}.jsonl"
        records = [json.loads(line) for line in test_file.read_text(encoding="utf-8").splitlines()]
        assert [r["id"] for r in records] == [item["id"] for item in eval_set.items]
        assert [r["prompt"] for r in records] == [timeline.prompt(item) for item in eval_set.items]
        assert [r["answers"] for r in records] == [item["answers"] for item in eval_set.items]
        assert tasks[name]["n"] == len(eval_set.items) and tasks[name]["set"] == eval_set.name


def test_data_files_are_gold_files_and_few_shot_comes_from_dev_items_only(exported):
    import datasets

    out, manifest = exported
    utils = shipped_utils(out)
    assert sorted(p.name for p in (out / "data").iterdir()) == sorted(f"{t['task']}.jsonl" for t in manifest["tasks"])
    for task in manifest["tasks"]:
        config = load_yaml(out / f"{task['task']}.yaml")
        items = read_qa_items(config["dataset_kwargs"]["data_files"]["test"])  # the evolve-score --gold contract
        assert len(items) == task["n"]
        # few-shot pool: the test split itself (lm-eval then never shows an item as its own example), dev items only
        assert config["fewshot_split"] == config["test_split"] == "test"
        assert config["fewshot_config"] == {"process_docs": ("!function", "utils.dev_items")}
        docs = [json.loads(line) for line in (out / task["data"]).read_text().splitlines()]
        dev = [d["id"] for d in docs if d["split"] == "dev"]
        assert [d["id"] for d in utils.dev_items(docs)] == dev == [i.id for i in items if i.split == "dev"]
        assert task["n_dev"] == len(dev)
        if dev:  # lm-eval hands process_docs a datasets.Dataset
            assert utils.dev_items(datasets.Dataset.from_list(docs))["id"] == dev
    assert any(d["split"] == "private" for d in docs) and any(t["n_dev"] for t in manifest["tasks"])


def test_items_with_options_become_multiple_choice_tasks(exported):
    out, manifest = exported
    with_options = {s.name: [i for i in s.items if i.get("options")] for s in small_timeline().eval_sets}
    mc = {t["set"]: t for t in manifest["tasks"] if t["output_type"] == "multiple_choice"}
    assert set(mc) == {name for name, items in with_options.items() if items} and mc
    for set_name, task in mc.items():
        config = load_yaml(out / f"{task['task']}.yaml")
        assert config["doc_to_choice"] == "choices" and config["doc_to_target"] == "label"
        assert config["target_delimiter"] == " "
        records = [json.loads(line) for line in (out / task["data"]).read_text().splitlines()]
        assert len(records) == len(with_options[set_name])
        for record in records:
            assert record["choices"][record["label"]] in record["answers"]


def test_a_group_per_kind_covers_every_task_once(exported):
    out, manifest = exported
    grouped = []
    for name, members in manifest["groups"].items():
        config = load_yaml(out / f"{name}.yaml")
        assert config["group"] == name and config["task"] == members
        kinds = {t["kind"] for t in manifest["tasks"] if t["task"] in members}
        assert len(kinds) == 1 and name == f"evolve_{kinds.pop()}{'_mc' if name.endswith('_mc_all') else ''}_all"
        grouped += members
    assert sorted(grouped) == sorted(t["task"] for t in manifest["tasks"])
    kinds = {"evolve_unchanged_all", "evolve_new_all", "evolve_updated_all", "evolve_outdated_all"}
    assert kinds <= set(manifest["groups"])


def test_max_items_per_set_keeps_the_evaluators_sample(tmp_path):
    timeline = small_timeline()
    manifest = export_lm_eval(timeline, tmp_path / "t", stop_strings=["\n"], max_new_tokens=4, max_items_per_set=5)
    unchanged = next(s for s in timeline.eval_sets if s.name == "unchanged")
    lines = (tmp_path / "t" / "data" / "evolve_unchanged.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["id"] for r in records] == [item["id"] for item in sample_items(unchanged.items, 5)]
    assert all(t["n"] <= 5 for t in manifest["tasks"])


def test_loaded_data_exports_with_its_prompt_template(tmp_path):
    manifest = export_from_overrides(tmp_path / "t", ["data=evolvingqa"])
    record = json.loads((tmp_path / "t" / "data" / "evolve_unchanged.jsonl").read_text().splitlines()[0])
    assert record["prompt"] == f"Question: {record['question']}\nAnswer:"
    assert manifest["source"]["data_kind"] == "evolvingqa"


def test_re_export_replaces_its_own_files_but_never_foreign_ones(tmp_path):
    out = tmp_path / "t"
    export_from_overrides(out, SMALL)
    (out / "__pycache__").mkdir()
    (out / "__pycache__" / "utils.cpython-311.pyc").write_bytes(b"")  # what lm-eval's import leaves
    manifest = export_from_overrides(out, [*SMALL, "eval.max_new_tokens=5", "eval.stop_strings=[Q:,A:]"])
    config = load_yaml(out / "evolve_unchanged.yaml")["generation_kwargs"]
    assert (config["max_gen_toks"], config["until"]) == (5, ["Q:", "A:"]) and manifest["stop_strings"] == ["Q:", "A:"]
    assert not list(out.parent.glob(".t.tmp*"))  # the staging dir was renamed into place
    (out / "results.json").write_text("{}")
    with pytest.raises(ConfigError, match="results.json"):
        export_from_overrides(out, SMALL)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not an lm-eval export"):
        export_from_overrides(other, SMALL)
    assert (other / "notes.txt").read_text() == "mine" and (out / "results.json").exists()


def test_cli_exports_and_names_a_bad_override(tmp_path, capsys):
    assert data_main(["export-lm-eval", "--out", str(tmp_path / "t"), *SMALL, "--prefix", "tl"]) == 0
    assert "lm-eval tasks" in capsys.readouterr().out
    assert (tmp_path / "t" / "tl_unchanged.yaml").is_file() and (tmp_path / "t" / MANIFEST).is_file()
    assert data_main(["export-lm-eval", "--out", str(tmp_path / "u"), "data.world.n_entitys=3"]) == 2
    err = capsys.readouterr().err
    assert "data.world.n_entitys" in err and len(err.strip().splitlines()) == 1
    assert data_main(["export-lm-eval", "--out", str(tmp_path / "u"), "eval.max_new_tokens=0"]) == 2
    assert "eval.max_new_tokens" in capsys.readouterr().err
    assert data_main(["export-lm-eval", "--out", str(tmp_path / "u"), "--prefix", "a-b"]) == 2
    assert not (tmp_path / "u").exists()


# --- lm-eval's --log_samples as evolve-score predictions -------------------------------------------------------


def generation_sample(doc_id, doc, raw, filtered, filter_name="answer"):
    """One line of samples_<task>_<date>.jsonl as lm-eval 0.4.13 writes it for a generate_until task."""
    return {
        "doc_id": doc_id,
        "doc": doc,
        "target": doc["target"],
        "arguments": {"gen_args_0": {"arg_0": doc["prompt"], "arg_1": {"until": ["\n"], "max_gen_toks": 7}}},
        "resps": [[raw]],
        "filtered_resps": [filtered],
        "filter": filter_name,
        "metrics": ["exact_match", "f1"],
        "doc_hash": "h",
        "prompt_hash": "p",
        "target_hash": "t",
        "exact_match": 0,
        "f1": 0.0,
    }


def choice_sample(doc_id, doc, lls):
    """...and for a multiple_choice task (log-likelihoods logged as strings)."""
    return {
        "doc_id": doc_id,
        "doc": doc,
        "target": str(doc["label"]),
        "arguments": {
            f"gen_args_{k}": {"arg_0": doc["prompt"], "arg_1": f" {c}"} for k, c in enumerate(doc["choices"])
        },
        "resps": [[[str(ll), "False"]] for ll in lls],
        "filtered_resps": [[str(ll), "False"] for ll in lls],
        "filter": "none",
        "metrics": ["acc", "acc_norm", "acc_bytes"],
        "acc": 0.0,
    }


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_evolve_score_reads_generation_samples_of_an_exported_task(exported, tmp_path, capsys):
    out, _ = exported
    gold = out / "data" / "evolve_unchanged.jsonl"
    docs = [json.loads(line) for line in gold.read_text().splitlines()]
    raws = [f" {d['answers'][0]}" if k % 3 else " wrong" for k, d in enumerate(docs)]  # leading space kept
    samples = [generation_sample(k, d, raw, raw.strip()) for k, (d, raw) in enumerate(zip(docs, raws))]
    samples += [generation_sample(k, d, raw, raw, "none") for k, (d, raw) in enumerate(zip(docs, raws))]
    path = write_jsonl(tmp_path / "samples_evolve_unchanged_2026-01-01T00-00-00.jsonl", samples)
    assert score_main(["--gold", str(gold), "--predictions", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    right = sum(1 for k in range(len(docs)) if k % 3)
    assert report["overall"]["n"] == len(docs) and report["overall"]["em"] == pytest.approx(right / len(docs))


def test_evolve_score_reads_choice_samples_as_option_scores(exported, tmp_path):
    out, manifest = exported
    task = next(t for t in manifest["tasks"] if t["output_type"] == "multiple_choice")
    docs = [json.loads(line) for line in (out / task["data"]).read_text().splitlines()]
    lls = [[-1.5 * (k + 1) for k in range(len(d["choices"]))] for d in docs]
    samples = [choice_sample(k, d, ll) for k, (d, ll) in enumerate(zip(docs, lls))]
    path = write_jsonl(tmp_path / "samples_mc.jsonl", samples)
    predictions = read_predictions(path)
    assert predictions[docs[0]["id"]][1] == {"prediction": None, "option_scores": lls[0]}


def test_bad_samples_name_line_and_field(exported, tmp_path):
    out, _ = exported
    docs = [json.loads(line) for line in (out / "data" / "evolve_unchanged.jsonl").read_text().splitlines()]
    clash = [generation_sample(0, docs[0], " a", "a"), generation_sample(0, docs[0], " b", "b", "none")]
    with pytest.raises(DataError, match=r"line 2, field 'id': duplicate id"):
        read_predictions(write_jsonl(tmp_path / "s1.jsonl", clash))
    no_id = generation_sample(0, {k: v for k, v in docs[0].items() if k != "id"}, " a", "a")
    with pytest.raises(DataError, match=r"line 1, field 'doc.id'"):
        read_predictions(write_jsonl(tmp_path / "s2.jsonl", [no_id]))
    bad_ll = choice_sample(0, {**docs[0], "label": 0, "choices": ["x", "y"]}, [-1.0, -2.0])
    bad_ll["resps"][1] = [["nan", "False"]]
    with pytest.raises(DataError, match=r"line 1, field 'resps': option 1"):
        read_predictions(write_jsonl(tmp_path / "s3.jsonl", [bad_ll]))
