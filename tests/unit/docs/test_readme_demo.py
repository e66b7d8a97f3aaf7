"""The README's demo block is what ``make demo`` prints: ``scripts/demo_run.sh`` (the demo after setup) is run and
the block must be the tail of its output, line for line, with only the numbers free (they change with the
machine's kernels and wall clock; the labels, the sets, the order and every line must match)."""

from __future__ import annotations


from helpers.docs import readme_demo_block, shape


def test_the_block_is_found_and_shapes_ignore_only_numbers():
    block = readme_demo_block()
    assert block[0].startswith("EM by checkpoint") and block[-1].startswith("demo check:")
    assert shape("a=0.512 [0.1, 2e+13] took 222 s") == shape("a=0.600 [0.3, 1e+12] took 9 s")
    assert shape("update_adoption=0.0") != shape("confusion_index=0.0")
