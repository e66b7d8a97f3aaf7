"""Compute figures (docs/metrics.md#11-compute), the within-step probe and the report's time-slice parts."""

from __future__ import annotations


from helpers.methods import VOCAB, method, one_thread, tiny_gpt2, train

from evolve_train.training.telemetry import compute_summary, parameter_counts, training_flops


def gpt2_parameters(vocab: int, positions: int, d: int, layers: int) -> int:
    """GPT-2's parameter count by hand: embeddings (the head is tied), per block 2 layer norms, attention
    (qkv d×3d + 3d, projection d×d + d) and MLP (d×4d + 4d, 4d×d + d), and the final layer norm."""
    block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d)
    return vocab * d + positions * d + layers * block + 2 * d


def fixed_rows(n: int, length: int):
    from datasets import Dataset

    rows = [[2 + (k + t) % (VOCAB - 2) for t in range(length)] for k in range(n)]
    labels = [[-100] + row[1:] for row in rows]  # as every row the adapter forms: position 0 is context
    return Dataset.from_dict({"input_ids": rows, "labels": labels})


def test_the_flops_estimate_is_6NT_for_full_fine_tuning():
    model = tiny_gpt2()
    N = gpt2_parameters(VOCAB, 32, 32, 2)
    assert parameter_counts(model) == (N, N)
    with one_thread():
        result = train(model, fixed_rows(32, 10), method("full"), epochs=2, batch_size=8)
    T = 32 * 10 * 2  # every row, every epoch: all tokens processed
    assert result.tokens == T and result.optimizer_steps == 8
    assert result.flops == 6 * N * T
    assert result.loss_tokens == 32 * 9 * 2  # every position with a label


def test_the_flops_estimate_of_lora_counts_the_weight_gradients_of_trained_parameters_only():
    from peft import LoraConfig as PeftLora, get_peft_model

    model = get_peft_model(tiny_gpt2(), PeftLora(r=2, target_modules=["c_attn"], fan_in_fan_out=True))
    N, trainable = parameter_counts(model)
    assert N == gpt2_parameters(VOCAB, 32, 32, 2) + trainable and 0 < trainable < N / 10
    assert training_flops(N, trainable, 100) == (4 * N + 2 * trainable) * 100 < 6 * N * 100


def test_the_flops_estimate_of_lwf_counts_the_teachers_forward():
    from helpers.methods import run_step

    N = gpt2_parameters(VOCAB, 32, 32, 2)
    lwf = method("full", "lwf")
    seen = []
    real = lwf.forward_parameters
    lwf.forward_parameters = lambda: seen.append(real()) or seen[-1]  # what the loop read, while the teacher lived
    with one_thread():
        run_step(tiny_gpt2(), fixed_rows(32, 10), lwf, history=None, step=1, epochs=2, batch_size=8)
    assert seen == [N]  # the teacher is a full copy: one extra forward of N parameters per token
    assert lwf.forward_parameters() == 0  # freed after the step
    with one_thread():
        result = train(tiny_gpt2(), fixed_rows(32, 10), method("full"), epochs=2, batch_size=8)
    assert training_flops(N, N, 640, forward_params=N) == 8 * N * 640 == result.flops * 8 / 6


def test_compute_summary_sums_the_timing_rows():
    rows = [
        {"group": "timing", "checkpoint": -1, "eval_tokens": 5, "eval_seconds": 1.0, "eval_flops": 10.0},
        {
            "group": "timing",
            "checkpoint": 0,
            "train_tokens": 100,
            "loss_tokens": 40,
            "optimizer_steps": 4,
            "train_seconds": 2.0,
            "train_flops": 600.0,
            "eval_tokens": 7,
            "eval_seconds": 1.5,
            "eval_flops": 14.0,
        },
        {"group": "splits", "checkpoint": 0, "train_tokens": 999},
        {
            "group": "timing",
            "checkpoint": 1,
            "train_tokens": 50,
            "loss_tokens": 20,
            "optimizer_steps": 2,
            "train_seconds": 1.0,
            "train_flops": 300.0,
            "eval_tokens": 7,
            "eval_seconds": 1.5,
            "eval_flops": 14.0,
        },
    ]
    out = compute_summary(rows)
    assert out["steps"]["1"]["cumulative_train_flops"] == 900.0 and out["steps"]["1"]["cumulative_train_tokens"] == 150
    assert out["totals"]["eval_tokens"] == 19 and out["totals"]["optimizer_steps"] == 6
    assert "-1" not in out["steps"] and out["eval"]["-1"]["eval_seconds"] == 1.0
    assert "mix_tokens" not in out["steps"]["1"] and "mix_tokens" not in out["totals"]  # no mix: no key


def test_compute_summary_carries_the_mix_and_generation_cost_of_the_steps_that_had_one():
    base = {"group": "timing", "train_tokens": 10, "loss_tokens": 4, "optimizer_steps": 1, "train_seconds": 1.0}
    rows = [
        {**base, "checkpoint": 0, "train_flops": 60.0},
        {**base, "checkpoint": 1, "train_flops": 80.0, "mix_tokens": 3, "generation_flops": 5.0},
        {**base, "checkpoint": 2, "train_flops": 80.0, "mix_tokens": 4, "generation_flops": 7.0},
    ]
    out = compute_summary(rows)
    assert "mix_tokens" not in out["steps"]["0"] and out["steps"]["2"]["mix_tokens"] == 4
    assert out["totals"]["mix_tokens"] == 7 and out["totals"]["generation_flops"] == 12.0
