"""scripts/bench.py end to end on a tiny config: it runs, and every figure it prints is a sane measurement."""

import json
import subprocess
import sys

import pytest

from helpers import TINY
from helpers.processes import ROOT, bench_part


@pytest.mark.slow
def test_bench_quick_runs_on_a_tiny_config_and_prints_every_figure():
    """The smallest settings that still compute every figure: one timed round of eval_speedup (every round
    answers the same prompts the same way, so the batched answers are still compared with the whole
    one-at-a-time sample, and any one round's speed-up is a positive figure), a 1 MB corpus for cache_speedup
    (the second run maps what the first tokenized: ~80x faster at 1 MB, ~160x at 4 MB) and the shipped general
    text alone for the held-out evaluator (the 160 KB Python docs were over half of each evaluation's time; no
    figure checked here is a perplexity, and the evaluations still run every default evaluator)."""
    overrides = [o for o in TINY if not o.startswith(("logger.", "trainer.log_every"))]
    overrides.append("eval.heldout_text=[general]")
    command = [
        sys.executable,
        "scripts/bench.py",
        "--quick",
        "--repeats",
        "2",
        "--sizes",
        "1x32x2,2x32x2",
        "--size-steps",
        "3",
        "--growth-steps",
        "3",
        "--eval-rounds",
        "1",
        "--cache-mb",
        "1",
        *overrides,
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["loop_vs_torch"] > 0 and figures["tokens_per_s"]["framework"] > 0
    assert len(figures["tokens_per_s"]["framework_runs"]) == 2
    assert 0 < figures["lora_vs_full"]["training_state_memory_ratio"] < 1  # adapters hold less state than full
    assert 0 < figures["packing_efficiency"]["default_world"] <= 1
    clm = figures["clm_packing_efficiency"]
    assert clm["packed"] >= 0.99 and 0 < clm["padded"] < clm["packed"]  # packing: padding at the very end only
    cached = figures["cache_speedup"]
    assert cached["rows"] > 0 and 0 < cached["second_s"] < cached["first_s"]  # the second run maps the cache
    speed = figures["eval_speedup"]
    assert speed["n_prompts"] > 0 and speed["speedup"] > 0 and "trained here" in speed["model"]
    assert speed["sample_answers_differ"] == 0 and speed["batching_speedup"] > 0  # batching changes no answer
    assert [(r["n_layer"], r["n_embd"]) for r in figures["tokens_per_s_by_size"]] == [(1, 32), (2, 32)]
    growth = figures["eval_growth"]
    assert [(r["checkpoint"], r["max_items_per_set"]) for r in growth] == [
        (k, cap) for cap in (0, 100) for k in range(3)
    ]
    # checkpoint 1 is asked every set of checkpoint 0 and step 2's (forward transfer); the last has no next step
    assert growth[0]["items"] < growth[1]["items"] == growth[2]["items"]
    share = figures["retrieval_share"]
    assert share["share_reused"] > 0 and share["retrieval_reused_s"] <= share["retrieval_built_s"] * 1.5
    assert share["evaluators"][-1] == "retrieval" and 0 <= share["recall_at_k"] <= 1
    assert "loop_vs_torch" in result.stdout and "evaluation time by checkpoint" in result.stdout


def test_bench_rejects_a_malformed_size():
    result = subprocess.run(
        [sys.executable, "scripts/bench.py", "--sizes", "4x128"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2 and "LAYERSxWIDTHxHEADS" in result.stderr


def test_bench_pretrained_part_prints_both_precisions():
    result, figures = bench_part("pretrained", "--pretrained-size", "tiny", timeout=300)
    if "unsupported" in figures["bf16"]:  # torch's CPU bf16 kernels need AVX-512 (ATEN_CPU_CAPABILITY=avx2 here)
        assert "not supported by this CPU's kernels" in result.stdout and "bf16 / fp32" not in result.stdout
    for precision in [p for p in ("fp32", "bf16") if "unsupported" not in figures[p]]:
        row = figures[precision]
        assert row["train_tokens_per_s"] > 0 and row["eval_tokens_per_s"] > 0 and row["matmul_peak_gflops"] > 0
        assert 0 < row["train_peak_fraction"] and row["train_steps"] == 3  # 4 optimizer steps, the first a warm-up
    assert "fp32" in figures and ("bf16 / fp32" in result.stdout) == ("unsupported" not in figures["bf16"])
    chosen, reason = figures["auto"]  # what trainer.mixed_precision=auto picks here, and why
    versus = figures["framework_vs_plain"]  # the framework loop over a plain torch loop, in that precision
    assert chosen in ("no", "bf16") and reason and versus["precision"] == chosen
    assert versus["plain_tokens_per_s"] > 0 and versus["ratio"] == pytest.approx(
        versus["framework_tokens_per_s"] / versus["plain_tokens_per_s"]
    )
    assert f"auto -> {chosen}" in result.stdout and "(goal >= 0.95)" in result.stdout


@pytest.mark.slow
def test_bench_memory_part_prints_peaks_and_ratios():
    result, figures = bench_part("memory", "--memory-size", "tiny", timeout=600)
    assert set(figures["peak_gib"]) == {"train_chunked", "train_unchunked", "score_chunked", "score_unchunked"}
    assert all(v > 0 for v in figures["peak_gib"].values())
    assert figures["train_ratio"] > 0 and figures["score_ratio"] > 0 and figures["preflight_gib"] > 0
    assert "training step, chunked / unchunked" in result.stdout


@pytest.mark.slow
def test_bench_data_part_prints_throughput_bytes_per_token_and_memory():
    """The tiny size: two small corpora, each figure from its own process as at the bench size; the training
    process trains on 2 batches, and its peak (model, AdamW state, a batch's activations) is set by the first."""
    result, figures = bench_part("data", "--data-size", "tiny", timeout=900)
    assert len(figures["sizes"]) == 2
    for size in figures["sizes"].values():
        assert size["prepare"]["tokens"] > 0 and size["prepare"]["id_type"] == "uint16"
        assert size["plain"]["tokens"] > 0 and size["prepare_vs_plain"] > 0
        assert size["plain_fast"]["tokens"] == size["plain"]["tokens"] and size["prepare_vs_plain_fast"] > 0
        assert 0 < size["prepare"]["bytes_per_token"] < 8  # uint16 ids and their offsets
        assert size["train"]["peak_rss_gib"] > 0
    assert figures["prepare_rss_ratio"] > 0 and figures["train_rss_ratio"] > 0
    assert "peak RSS, large / small corpus" in result.stdout
