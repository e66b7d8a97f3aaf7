"""What the README and docs/ show (the demo block, command lines, the run-dir table), read as a test reads it."""

import re
from helpers.processes import ROOT


PAGE = ROOT / "docs" / "outputs.md"


def documented_every_run() -> list[str]:
    """The paths of the table rows whose "when" column starts with "every run"."""
    paths = []
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[1].startswith("every run"):
            paths += re.findall(r"`([^`]+)`", cells[0])
    return paths


def pattern(path: str) -> re.Pattern:
    """``steps/<k>/`` -> any file below ``steps/0/``...; ``predictions/step_<k>/<set>.jsonl`` -> a regex."""
    escaped = re.escape(path).replace(re.escape("<k>"), r"-?\d+").replace(re.escape("<set>"), r"[\w-]+")
    return re.compile(escaped + (".+" if path.endswith("/") else "") + "$")


NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?")


def readme_demo_block() -> list[str]:
    """The fenced block under "## The demo's output"."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## The demo's output", 1)[1]
    return section.split("```\n", 2)[1].rstrip("\n").splitlines()


def shape(line: str) -> str:
    return NUMBER.sub("#", line.rstrip())


NETWORK = re.compile(r"^evolve-data fetch-")


CLUSTER_PATH = "evolve-train recipes copy"
"""A line of the README's block for your corpora on a SLURM GPU cluster: that block trains through SLURM, so
tests/cluster/test_readme_cluster_path.py runs it on the local cluster, not tests/e2e/test_readme_commands.py."""


def _commands(block: str) -> list[str]:
    """The block's command lines (backslash continuations joined, comments cut) that start a tool of the package."""
    joined = re.sub(r"\s*\\\n\s*", " ", block)
    return [
        re.sub(r"\s+#.*$", "", line).strip()
        for line in joined.splitlines()
        if re.match(r"(evolve-\w+|lm_eval)\s", line)
    ]


def readme_lines(cluster_path: bool = False) -> list[str]:
    """The README's code-block lines that start a command-line tool of the package (or lm_eval), comments cut;
    the block of :data:`CLUSTER_PATH` only with ``cluster_path``."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL):
        if cluster_path or CLUSTER_PATH not in block:
            lines += _commands(block)
    return lines


def readme_cluster_path() -> list[str]:
    """The commands of the README's block for your corpora on a SLURM GPU cluster, in order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL) if CLUSTER_PATH in b]
    return _commands(block)
