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


def readme_lines() -> list[str]:
    """The README's code-block lines that start a command-line tool of the package (or lm_eval), comments cut."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL):
        for line in block.splitlines():
            if re.match(r"(evolve-\w+|lm_eval)\s", line):
                lines.append(re.sub(r"\s+#.*$", "", line).strip())
    return lines
