"""The tracked files speak to a user: no word about how the project was built (who worked on it, on which
machine, under which ticket) and no path that exists on one machine only.

Each rule is a regular expression; an allow-list removes the uses where the word has its ordinary meaning
(pytest's session scope, a plot's "not drawn", an lm-eval or SLURM task) before the rule is applied."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest
from helpers.processes import ROOT

SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()

RULES: dict[str, re.Pattern] = {
    name: re.compile(pattern, re.IGNORECASE)
    for name, pattern in {
        # who or what ran the work, instead of what the product does
        "session": r"\bsessions?\b",
        "lent": r"\blent\b",
        "the lead": r"\bthe lead\b|\blead's\b",
        "drawn task": r"\b(?:task|device|machine|gpu)s?\b[^.\n]{0,30}\bdrawn\b",
        "this task": r"\bthis task\b",
        "device time": r"\bdevice time\b",
        "shared lock": r"\bshared (?:cpu )?lock\b|evolve_heavy",
        # tickets of the project's own tracker ("issue 24", "issues 16 and 17", "(#28)")
        "issue number": r"\bissues?\s*#?\d+|\(#\d+\)|\bissue #\d+",
        # paths of one machine, or outside the clone
        "absolute path": r"(?<![\w.~-])/(?:work|root|home)(?:/|\b)",
        "outside the clone": r"\.\./shared\b|\bshared/data\b",
    }.items()
}

# Words about how the project was written, checked in what a user reads: docs, the package (its messages, help
# and plot labels), scripts and configs. Tests may still use them as plain names (a simulated model's "skill").
PRODUCT_RULES: dict[str, re.Pattern] = {
    name: re.compile(pattern, re.IGNORECASE)
    for name, pattern in {
        # the metric definitions ship as docs/metrics.md; the spec's old file name is no file a user has
        "old spec name": r"\b(?-i:METRICS)\.md\b",
        "skill": r"\bskills?\b",
        "seed article": r"\bseed articles?\b",
        "the issue": r"\bthe issues?\b(?!\s+tracker)",
    }.items()
}
PRODUCT_FILES = re.compile(r"^(?:docs/|evolve_train/|scripts/|configs/|README\.md$|CONTRIBUTING\.md$|Makefile$)")

ALLOWED = [
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"scope\s*=\s*[\"']session[\"']",  # pytest fixtures
        r"session[- ]scoped?",  # pytest's session scope
        r"\btest session\b",  # one pytest process
        r"pytest_session\w*|\bsession(?:start|finish)\b",  # pytest hooks
        r"requests\.session|\bSession\(\)",  # HTTP client APIs
        r"wandb[^\n]{0,40}\bsession\b|\bsession\b[^\n]{0,40}wandb",  # W&B's own API words
        r"one long session",  # the held-out general text (a practice session)
        r"\b(?:interpreter|interactive) session\b",  # the held-out Python documentation text (a Python REPL)
        r"\bnot drawn\b(?![^.\n]{0,20}\btask)",  # of a plot: a line or band not drawn
        r"github\.com/[^\s)]*/issues/\d+",  # an upstream project's issue, by URL
    )
]


def violations(text: str, product: bool = True) -> list[tuple[str, str]]:
    """``(rule, matched text)`` for every rule that matches ``text`` outside the allowed uses; ``product``: also
    the rules of what a user reads (docs, the package, scripts, configs)."""
    rules = {**RULES, **PRODUCT_RULES} if product else RULES
    found = []
    for line in text.splitlines():
        for allowed in ALLOWED:
            line = allowed.sub(" ", line)
        for name, rule in rules.items():
            found.extend((name, match.group(0)) for match in rule.finditer(line))
    return found


def tracked_text_files() -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout.split("\0")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    files = []
    for name in listed:
        path = ROOT / name
        if not name or name == SELF or not path.is_file():
            continue
        if b"\0" in path.read_bytes()[:4096]:  # binary (images)
            continue
        files.append(path)
    return files


@pytest.mark.parametrize(
    "phrase",
    [
        "this task was not drawn",
        "no session since the loop changes was lent a device",
        "neither 2026-11-30 session was lent a device",
        "~+14 s on the lead's 3m08s demo",
        "Changes of this session, each found with cProfile",
        "python train.py data.root=/work/shared/data/dyknow",
        "data.root=../shared/data/dyknow unless given",
        "measured under the shared lock",
        "--lock /tmp/evolve_heavy.lock",
        "the default recipe (issue 24)",
        "before issue #29.",
        "whole-batch multi-process evaluation (issues 16 and 17)",
        "the recipes issue's (#28)",
        "HOME=/root",
        "cd /home/alice/evolve-train",
        "we did not have the device time to sweep them",
        "the lead reviewed it",
        "(METRICS.md §9)",
        "see shared/METRICS.md section 4",
        "The evolvingqa-eval skill's recipe uses a set",
        "an EvolveBench-style set (second seed article)",
        "well inside the issue's 15 %",
        "as the issues asked",
    ],
)
def test_each_internal_phrase_is_caught(phrase):
    assert violations(phrase), phrase


@pytest.mark.parametrize(
    "line",
    [
        '@pytest.fixture(scope="session")',
        "a session-scoped fixture builds it once",
        "a second run in one Python process (a notebook, a test session, a sweep's in-process jobs)",
        "HIDDEN = ROW_META  # not drawn: a row's identity",
        "all-None metrics are not drawn",
        "examples drawn from earlier steps",
        "lm-eval tasks evolve_unchanged; one SLURM task per GPU",
        "few minutes of practice every day helps more than one long session.",
        "will take effect for the rest of the interpreter session.",
        "see https://github.com/EleutherAI/lm-evaluation-harness/issues/1234",
        "~/.cache/evolve-train/data/dyknow and runs/demo/steps/2",
        "python -m evolve_train.data.world --out /tmp/world",
        "see docs/metrics.md#4-paired-temporal-metrics",
        "a known bug in the issue tracker of lm-evaluation-harness",
        "the seed of the article's sampling: data.seed",
    ],
)
def test_ordinary_uses_pass(line):
    assert violations(line) == [], line


def test_tracked_files_have_no_internal_vocabulary():
    problems = []
    for path in tracked_text_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        product = bool(PRODUCT_FILES.match(path.relative_to(ROOT).as_posix()))
        for number, line in enumerate(text.splitlines(), 1):
            for name, matched in violations(line, product):
                problems.append(f"{path.relative_to(ROOT)}:{number}: {name}: {matched!r}")
    assert not problems, "internal vocabulary in tracked files:\n" + "\n".join(problems)


def test_the_product_rules_cover_docs_package_and_plot_labels_not_tests():
    assert PRODUCT_FILES.match("docs/results/baselines.md") and PRODUCT_FILES.match("README.md")
    assert PRODUCT_FILES.match("evolve_train/reporting/plots.py") and PRODUCT_FILES.match("configs/eval/default.yaml")
    assert not PRODUCT_FILES.match("tests/unit/reporting/test_report.py and tests/e2e/test_report.py")
    assert violations("skill = 0.6", product=False) == []


def test_every_link_into_the_metric_definitions_names_a_section_that_exists():
    """``docs/metrics.md#<anchor>`` in any tracked file (docs, package messages, plot labels) resolves."""
    spec = importlib.util.spec_from_file_location("relink_metrics", ROOT / "scripts" / "relink_metrics.py")
    relink = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(relink)
    anchors = set(relink.section_anchors().values())
    broken = []
    for path in tracked_text_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            for anchor in re.findall(r"metrics\.md#([\w-]+)", line):
                if anchor not in anchors:
                    broken.append(f"{path.relative_to(ROOT)}:{number}: #{anchor}")
    assert anchors and not broken, "links to missing sections of docs/metrics.md:\n" + "\n".join(broken)
