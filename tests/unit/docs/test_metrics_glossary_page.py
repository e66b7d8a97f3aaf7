"""docs/metrics_glossary.md is what ``scripts/metrics_doc.py`` generates from the metric registry: every
registered metric and every key the direction table knows, with its direction, unit, meaning and a link to its
section of docs/metrics.md; and every metric name the README's demo block prints is explained there."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "metrics_glossary.md"


def metrics_doc():
    spec = importlib.util.spec_from_file_location("metrics_doc", ROOT / "scripts" / "metrics_doc.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["metrics_doc"] = module
    spec.loader.exec_module(module)
    return module


def metrics_anchors() -> set[str]:
    """GitHub's anchors of the headings of docs/metrics.md."""
    text = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    return {
        re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        for title in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)
    }


def glossary_names() -> set[str]:
    """Every name the page explains: registered metrics, the row keys they write, the other row keys."""
    from evolve_train.evaluation.metrics.registry import ROW_KEYS, list_metrics, metric_info

    names = set(ROW_KEYS)
    for name in list_metrics():
        info = metric_info(name)
        if info is not None:
            names |= {name, *info.keys}
    return names


def explained(key: str, names: set[str]) -> bool:
    """``key`` is a name of the page, or matches one with a placeholder (``*_ci``, ``heldout_<text>``)."""
    for name in names:
        pattern = re.sub(r"<[^>]+>", r"\\w+", re.escape(name).replace(r"\*", r"\w+"))
        if re.fullmatch(pattern, key):
            return True
    return False


def test_glossary_page_is_current():
    assert PAGE.read_text(encoding="utf-8") == metrics_doc().render(), (
        "docs/metrics_glossary.md is out of date: run python scripts/metrics_doc.py"
    )


def test_check_mode_fails_on_a_stale_page(tmp_path, monkeypatch, capsys):
    module = metrics_doc()
    stale = tmp_path / "metrics_glossary.md"
    stale.write_text(module.render().replace("| `fuar` |", "| `fuar_old` |"), encoding="utf-8")
    monkeypatch.setattr(module, "PAGE", stale)
    monkeypatch.setattr(module, "ROOT", tmp_path)
    assert module.main(["--check"]) == 1 and "out of date" in capsys.readouterr().err
    assert module.main([]) == 0 and module.main(["--check"]) == 0


def test_every_registered_metric_has_a_unit_a_meaning_and_a_section_of_metrics_md():
    from evolve_train.evaluation.metrics.registry import list_metrics, metric_info

    anchors = metrics_anchors()
    text = PAGE.read_text(encoding="utf-8")
    for name in list_metrics():
        info = metric_info(name)
        assert info is not None, f"{name} is registered without a MetricInfo"
        assert info.unit.strip() and info.meaning.strip() and "\n" not in info.meaning, name
        assert info.section in anchors, f"{name}: no heading #{info.section} in docs/metrics.md"
        assert f"| `{name}`" in text, name


def test_the_other_row_keys_link_to_sections_of_metrics_md_and_nothing_outside_the_repo():
    from evolve_train.evaluation.metrics.registry import ROW_KEYS

    anchors = metrics_anchors()
    for key, info in ROW_KEYS.items():
        assert info.section in anchors, f"{key}: no heading #{info.section} in docs/metrics.md"
    targets = re.findall(r"\]\(([^)]+)\)", PAGE.read_text(encoding="utf-8"))
    assert targets and all(t == "metrics.md" or t.startswith("metrics.md#") for t in targets), set(targets)


def test_every_key_with_a_direction_is_explained():
    from evolve_train.evaluation.metrics.directions import HIGHER_IS_BETTER, RENAMED

    names = glossary_names()
    assert not [key for key in HIGHER_IS_BETTER if key not in names]
    text = PAGE.read_text(encoding="utf-8")
    for former in RENAMED:
        assert f"formerly `{former}`" in text


def test_directions_agree_with_metrics_md():
    """metrics.md says fuar and Outdated EM are lower-is-better: the page (and the report's marks) say so."""
    text = PAGE.read_text(encoding="utf-8")
    assert "| `fuar` | ↓ |" in text
    assert "| `exact_match` (row keys `em`) | ↑ (↓ on Outdated sets) |" in text
    assert "| `perplexity` | ↓ |" in text and "vocabulary size" in text


def test_every_metric_the_readme_demo_block_prints_is_explained():
    from evolve_train.evaluation.metrics.dimensions import DIMENSIONS

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("## The demo's output", 1)[1].split("```", 2)[1]
    keys: set[str] = set()
    for line in block.splitlines():
        if " @ checkpoint " in line or line.startswith(("slice NLL:", "learned EM:")):
            keys |= set(re.findall(r"(\w+)=", line.split(":", 1)[1]))
        if line.startswith("ckpt") and "avg_acc" in line:  # the continual-learning matrix's columns
            keys |= {word for word in line.split()[1:] if not word.startswith("j=")}
        keys |= set(re.findall(r"matrix '(\w+)'", line))
    assert {"fuar", "learned", "timestamp_invariance", "acc_norm", "brier", "position_consistency"} <= keys
    assert "heldout_general" in keys
    set_names = re.compile(r"(unchanged|all|(new|updated|outdated)_\d+)$")
    names = glossary_names()
    missing = sorted(k for k in keys if not set_names.match(k) and k not in DIMENSIONS and not explained(k, names))
    assert not missing, f"printed in the README's demo block, not in docs/metrics_glossary.md: {missing}"
