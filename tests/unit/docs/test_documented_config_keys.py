"""Every configuration key README.md and docs/ write (``trainer.lr=1e-3``, ``method.ewc.coef``) is a key of the
schema (``dataclasses.fields`` of the composed config: a leaf, a section, or below a dict-valued leaf) or a
former name ``evolve_train/config_renames.py`` still reads; and the README's count and list of config groups
are the folders of ``configs/``."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SECTIONS = ("model", "method", "data", "trainer", "eval", "logger")
KEY = re.compile(rf"(?<![\w./-])((?:{'|'.join(SECTIONS)})(?:\.[A-Za-z_]\w*)+)(?![\w(/-]|\.\w)")
"""A dotted key under a section of the schema; not a file (``data.md``), a module path (``evolve_train.data.x``)
or a call (``trainer.log(row)``)."""
FILE_SUFFIXES = {"json", "jsonl", "yaml", "yml", "py", "md", "txt", "csv", "safetensors", "bin", "pt", "gz"}
NOT_KEYS = {
    "model.config.model_type": "docs/methods.md: the Hugging Face model's attribute, not a config key",
    "trainer.lrrr": "docs/training.md: an example of a misspelt key that is refused",
    "method.mix_examples": "docs/reliability.md: a method of the training strategy (Python), not a config key",
    "method.prepare_model": "docs/reliability.md: a method of the training strategy (Python), not a config key",
    "model.generate": "docs/results/benchmarks.md: the Hugging Face model's generate(), not a config key",
}


def options_doc():
    spec = importlib.util.spec_from_file_location("options_doc", ROOT / "scripts" / "options_doc.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["options_doc"] = module
    spec.loader.exec_module(module)
    return module


def code_spans(text: str) -> list[str]:
    """Inline code and fenced code blocks of a Markdown text."""
    blocks = re.findall(r"^\s*```[^\n]*\n(.*?)^\s*```", text, flags=re.DOTALL | re.MULTILINE)
    prose = re.sub(r"^\s*```[^\n]*\n.*?^\s*```", "", text, flags=re.DOTALL | re.MULTILINE)
    return blocks + re.findall(r"`([^`]+)`", prose)


def keys_in(text: str) -> list[str]:
    """The dotted config keys of a piece of code: file names (``data.md``) left out."""
    return [key for key in KEY.findall(text) if key.rpartition(".")[2] not in FILE_SUFFIXES]


def documented_keys() -> dict[str, set[str]]:
    """``{key: {document, ...}}`` of the dotted config keys the documents write in code."""
    found: dict[str, set[str]] = {}
    for path in DOCUMENTS:
        for span in code_spans(path.read_text(encoding="utf-8")):
            for key in keys_in(span):
                found.setdefault(key, set()).add(path.relative_to(ROOT).as_posix())
    return found


def known(key: str, leaves: set[str], sections: set[str]) -> bool:
    from evolve_train.config_renames import current_key

    key = current_key(key) or key  # a former name, still read
    return key in leaves or key in sections or any(key.startswith(leaf + ".") for leaf in leaves)


def test_the_documents_write_config_keys_in_code():
    keys = documented_keys()
    assert {"trainer.lr", "method.lora.r", "eval.within_step_every", "logger.wandb.group"} <= set(keys)
    for example, why in NOT_KEYS.items():  # the exceptions are still there (else drop them)
        assert example in keys, why


def test_every_documented_config_key_is_in_the_schema():
    module = options_doc()
    leaves, sections = set(module.schema_keys()), set(module.schema_sections())
    unknown = {
        key: sorted(where)
        for key, where in documented_keys().items()
        if key not in NOT_KEYS and not known(key, leaves, sections)
    }
    assert not unknown, f"config keys the documents write that the schema does not have: {unknown}"


@pytest.mark.parametrize("key", ["trainer.learning_rate", "method.l2_init.section", "eval.within_step"])
def test_a_key_not_in_the_schema_is_caught(key):
    module = options_doc()
    assert keys_in(f"python train.py {key}=1") == [key]
    assert not known(key, set(module.schema_keys()), set(module.schema_sections()))


def test_a_former_name_and_keys_below_a_dict_are_accepted():
    module = options_doc()
    leaves, sections = set(module.schema_keys()), set(module.schema_sections())
    assert known("eval.contamination.variants", leaves, sections)  # config_renames.KEYS
    assert known("eval.gate.slice_floors.new_2", leaves, sections)
    assert keys_in("see data.md and evolve_train.data.timeline, trainer.log(row)") == []


def test_the_readme_names_every_config_group():
    """The README's sentence on config groups gives their number and names: those of the folders of configs/
    (the groups ``python train.py --help`` lists)."""
    groups = sorted(p.name for p in (ROOT / "configs").iterdir() if p.is_dir() and p.name != "hydra")
    readme = re.sub(r"\s+", " ", (ROOT / "README.md").read_text(encoding="utf-8"))
    match = re.search(r"Config groups \((\d+), the folders of `configs/`\): ((?:`\w+`,? ?)+);", readme)
    assert match, "README.md: no sentence 'Config groups (N, the folders of `configs/`): `a`, `b`, ...;'"
    assert int(match.group(1)) == len(groups)
    assert sorted(re.findall(r"`(\w+)`", match.group(2))) == groups
