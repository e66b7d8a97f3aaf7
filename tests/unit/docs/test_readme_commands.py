"""Each ``evolve-*`` (and ``lm_eval``) line of the README's code blocks runs as written, in order, on the outputs
of a small run in ``runs/demo``: not only parsed (tests/e2e/test_docs_commands.py) but executed. Lines that fetch
from the network (``evolve-data fetch-*``) are only parsed."""

from __future__ import annotations


from helpers.docs import NETWORK, readme_lines


def test_the_readme_shows_the_tools_it_runs():
    lines = readme_lines()
    tools = {line.split()[0] for line in lines}
    assert {"evolve-eval", "evolve-data", "evolve-score", "evolve-report", "evolve-gate", "lm_eval"} <= tools
    assert [line for line in lines if NETWORK.match(line)] == [
        "evolve-data fetch-model smollm2-135m",
        "evolve-data fetch-data dyknow",
    ]
