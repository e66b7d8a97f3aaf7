"""docs/outputs.md's table of what every run writes is what a run dir holds: a small run of the default
configuration (``python train.py`` with the test suite's tiny overrides) writes exactly the files it lists as
"every run", and each of them."""

from __future__ import annotations


from helpers.docs import documented_every_run, pattern


def test_the_table_parses_and_its_placeholders_become_patterns():
    listed = documented_every_run()
    assert {"metrics.jsonl", "summary.json", "state.json", "steps/<k>/"} <= set(listed)
    assert pattern("steps/<k>/").match("steps/2/model.safetensors")
    assert pattern("predictions/step_<k>/<set>.jsonl").match("predictions/step_1/new_1.jsonl")
    assert not pattern("summary.json").match("summary.json.tmp")
