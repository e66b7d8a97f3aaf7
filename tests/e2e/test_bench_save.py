"""scripts/bench.py --part save at its tiny size: a state saved under FSDP2 by 2 gloo processes through
training/dcp_state.py at once and in the background, every figure printed per process, and the JSON line."""

import sys

from helpers.processes import ROOT, bench_part

sys.path.insert(0, str(ROOT / "scripts"))


def test_bench_save_part_prints_seconds_bytes_and_memory_per_process():
    result, figures = bench_part("save", "--save-size", "tiny", timeout=300)
    assert figures["processes"] == 2 and figures["async_layers"] == figures["full_layers"] == 3
    assert figures["async_note"] is None  # the tiny shape's background save fits: no smaller depth
    (run,) = figures["runs"]
    from bench_save import SIZES, n_parameters

    assert run["params"] == n_parameters(SIZES["tiny"])
    assert run["layers"] == 3 and run["modes"] == ["sync", "async"]
    assert [r["rank"] for r in run["ranks"]] == [0, 1]
    assert sum(r["local_params"] for r in run["ranks"]) >= run["params"] > 0  # each holds a shard (padded)
    for rank in run["ranks"]:
        assert 0 < rank["rss_before_build_gib"] <= rank["peak_rss_after_build_gib"]
        for mode in ("sync", "async"):
            save = rank[mode]
            # weights and two moments: 12 bytes per local parameter at least
            assert save["bytes_written"] >= 12 * rank["local_params"]
            assert save["rss_before_save_gib"] <= save["save_peak_rss_gib"] <= save["peak_rss_after_save_gib"]
            assert save["peak_rss_after_save_gib"] >= rank["peak_rss_after_build_gib"]
            assert ("metadata_bytes" in save) == (rank["rank"] == 0)
        assert rank["sync"]["seconds"] > 0
        assert 0 < rank["async"]["wait_s"] <= rank["async"]["total_s"]
    rows = [line for line in result.stdout.splitlines() if line.lstrip().startswith("3/3")]
    assert len(rows) == 4  # 2 processes x (at once, in the background)
    for heading in ("bytes written", "RSS before build", "peak after build", "save peak", "peak after save"):
        assert heading in result.stdout
    assert "wait " in result.stdout and "FSDP2 over 2 gloo processes" in result.stdout


def test_background_save_runs_at_fewer_blocks_only_where_the_full_shape_does_not_fit():
    from bench_save import SIZES, background_bytes, background_depth, n_parameters

    big = SIZES["1b"]
    assert round(n_parameters(big) / 1e9, 3) == 1.236  # Llama-3.2-1B: 1,235,814,400 parameters
    assert background_depth(big, 64 * 2**30) == 16
    depth = background_depth(big, 23 * 2**30)
    assert 0 < depth < 16
    assert background_bytes(big, depth) <= 0.75 * 23 * 2**30 < background_bytes(big, depth + 1)
    assert background_depth(big, 2**30) == 0  # not even the embedding: no background save at all
