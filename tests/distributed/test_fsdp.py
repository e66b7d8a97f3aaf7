"""FSDP2 and evaluation on every rank, with 2 gloo processes on CPU (docs/distributed.md).

* An FSDP2 run (2 processes as ``accelerate launch --config_file accelerate_configs/fsdp.yaml`` starts them, with
  ``ACCELERATE_USE_CPU=1``) really shards (each process holds about half the parameter values), finishes
  with ``method=full`` and ``method=lora``, writes checkpoints that load (transformers; the LoRA adapter with
  peft on the previous checkpoint), ends close to the same run on one process (EM per set within 0.02) and
  trains the same weights as DDP up to float rounding (relative difference < 1e-4; both scale each rank's
  mean loss to its share of the global batch's token mean, so they match one process too: tests/distributed/test_ddp.py).
* Evaluating the same checkpoints with 2 processes: each process answers or scores 40-60 % of the prompts
  and options, in whole batches of the one-process plan; every metric (EM, F1, ..., and those from option
  log-likelihoods: calibration) and every predictions file equals the one-process evaluation's exactly
  (fp32; tests/unit/evaluation/test_eval_shards.py checks the same without a process group).
* ``trainer.dist_timeout_s`` reaches the process group.
* QA adaptation runs with 2 FSDP2 processes.

The processes of every run here, one-process references included, are forked from a Python that has already imported
the libraries (tests/helpers/forked.py), each with the environment ``accelerate launch`` gives it and ``train.py`` (or
``evaluate.py``) run as ``__main__``: the launch command itself is tests/distributed/test_ddp.py's and
tests/distributed/test_multiprocess_faults.py's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import TINY, read_jsonl
from helpers.forked import DDP, FSDP2, ONE, run_forked, run_forked_killed
from helpers.processes import CPU_ENV as ENV, ROOT, relative_difference, SMALL, em_rows
from safetensors.torch import load_file

EM_TOLERANCE = 0.02
SAME_AS_DDP = 1e-4
VOLATILE = (
    "eval_seconds",
    "num_processes",
    "seconds",
    "prompts_per_process",
    "train_seconds",
    "eval_tokens",
    "eval_flops",
    "retrieval_seconds",
    "index_seconds",
)  # evaluation's positions: padding and generation length follow the batching
EVAL_TOKENS_TOLERANCE = 0.25


def held_per_process(output: str) -> list[tuple[list[int], int]]:
    """Per FSDP2-trained step: (parameter values each process held, values of the whole model)."""
    found = re.findall(r"processes held \[([\d, ]+)\] of (\d+) parameter values", output)
    return [([int(n) for n in local.split(",")], int(total)) for local, total in found]


def check_loads(run_dir: Path, method: str) -> None:
    """Every ``steps/<k>`` loads with transformers; a LoRA step's adapter loads with peft on step k-1."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    steps = sorted(int(p.name) for p in (run_dir / "steps").iterdir())
    assert steps == [0, 1, 2]
    for k in steps:
        model = AutoModelForCausalLM.from_pretrained(run_dir / "steps" / str(k))
        assert sum(p.numel() for p in model.parameters()) > 0
        if method == "lora" and k > 0:
            base = AutoModelForCausalLM.from_pretrained(run_dir / "steps" / str(k - 1))
            merged = PeftModel.from_pretrained(base, run_dir / "steps" / str(k) / "adapter").merge_and_unload()
            saved = model.state_dict()
            assert all(float((v - saved[n]).abs().max()) < 1e-5 for n, v in merged.state_dict().items())


@pytest.mark.slow
@pytest.mark.parametrize("method", ["full", "lora"])
def test_fsdp2_run_loads_and_matches_one_process(tmp_path, method):
    single, sharded, ddp = tmp_path / "single", tmp_path / "fsdp", tmp_path / "ddp"
    overrides = [*SMALL, f"method={method}"] + ["method.lora.save_merged=true"] * (method == "lora")  # loadable
    run_forked(ONE, ["train.py", *overrides, f"hydra.run.dir={single}"])
    output = run_forked(FSDP2, ["train.py", *overrides, "trainer.batch_size=8", f"hydra.run.dir={sharded}"], ENV)
    run_forked(DDP, ["train.py", *overrides, "trainer.batch_size=8", f"hydra.run.dir={ddp}"], ENV)

    assert "FSDP2 on CPU: 2 gloo processes" in output
    held = held_per_process(output)
    assert len(held) == 3 and all(len(local) == 2 and max(local) < 0.75 * total for local, total in held)  # sharded
    rows = read_jsonl(sharded / "metrics.jsonl")
    assert {r["num_processes"] for r in rows} == {2}
    keys = [(r["checkpoint"], r["group"], r.get("set_name") or r.get("set")) for r in rows]
    assert len(keys) == len(set(keys)) and len(rows) == len(read_jsonl(single / "metrics.jsonl"))
    check_loads(sharded, method)
    for k in range(3):
        weights = load_file(sharded / f"steps/{k}/model.safetensors")
        to_ddp = relative_difference(load_file(ddp / f"steps/{k}/model.safetensors"), weights)
        to_single = relative_difference(load_file(single / f"steps/{k}/model.safetensors"), weights)
        print(
            f"{method} step {k}: relative weight difference FSDP2 vs DDP {to_ddp:.2e}, vs one process {to_single:.4f}"
        )
        assert to_ddp < SAME_AS_DDP, k
    mine, reference = em_rows(sharded), em_rows(single)
    assert [r[:3] for r in mine] == [r[:3] for r in reference] and mine
    assert all(abs(a[3] - b[3]) <= EM_TOLERANCE for a, b in zip(mine, reference)), (mine, reference)


@pytest.mark.slow
def test_fsdp2_l2_init_pulls_the_sharded_weights_like_ddp(tmp_path):
    """The anchors follow the parameters fully_shard puts in place: FSDP2 trains the weights DDP trains with the
    penalty (a strong coef, so a penalty that silently stopped acting would move them far apart)."""
    sharded, ddp = tmp_path / "fsdp", tmp_path / "ddp"
    overrides = [*SMALL, "method=l2_init", "method.l2_init.coef=1000", "trainer.batch_size=8"]
    output = run_forked(FSDP2, ["train.py", *overrides, f"hydra.run.dir={sharded}"], ENV)
    run_forked(DDP, ["train.py", *overrides, f"hydra.run.dir={ddp}"], ENV)
    assert "FSDP2 on CPU: 2 gloo processes" in output and "l2_init (step 1): anchored" in output
    for k in (1, 2):
        before, mine = (load_file(sharded / f"steps/{j}/model.safetensors") for j in (k - 1, k))
        difference = relative_difference(load_file(ddp / f"steps/{k}/model.safetensors"), mine)
        moved = relative_difference(before, mine)
        print(f"l2_init step {k}: FSDP2 vs DDP {difference:.2e}; moved from step {k - 1} by {moved:.2e}")
        # the stiff pull (coef 1000) amplifies float rounding: 9.6e-5 / 1.6e-4 measured (full: < 1e-5). A penalty
        # that stopped acting would train full fine-tuning's weights, 1-2 % away (test above): far over 1e-3
        assert difference < 1e-3, (k, difference, moved)


def without_volatile(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]


@pytest.mark.slow
def test_every_rank_evaluates_a_share_with_the_metrics_of_one_process(tmp_path):
    trained, one, two = tmp_path / "run", tmp_path / "one", tmp_path / "two"
    run_forked(ONE, ["train.py", *SMALL, "eval.evaluators=[splits]", f"hydra.run.dir={trained}"])
    run_forked(ONE, ["evaluate.py", str(trained), "eval=full", "--out", str(one)])
    run_forked(DDP, ["evaluate.py", str(trained), "eval=full", "--out", str(two)], ENV)

    reference, rows = read_jsonl(one / "metrics.jsonl"), read_jsonl(two / "metrics.jsonl")
    assert {r["num_processes"] for r in rows} == {2} and {r["num_processes"] for r in reference} == {1}
    shares = [r["prompts_per_process"] for r in rows if r["group"] == "timing"]
    assert len(shares) == 3
    for share in shares:
        assert len(share) == 2 and all(0.4 <= n / sum(share) <= 0.6 for n in share), share
    counted = [
        (mine["eval_tokens"], theirs["eval_tokens"])
        for mine, theirs in zip(rows, reference)
        if theirs.get("eval_tokens")
    ]  # every rank's positions, summed: one process's, up to batching
    assert counted and all(abs(a / b - 1) <= EVAL_TOKENS_TOLERANCE for a, b in counted), counted
    rows, reference = without_volatile(rows), without_volatile(reference)
    assert [sorted(r) for r in rows] == [sorted(r) for r in reference]
    for mine, theirs in zip(rows, reference):
        assert mine == theirs, [(k, mine.get(k), v) for k, v in theirs.items() if mine.get(k) != v]
    files = sorted(p.relative_to(one) for p in (one / "predictions").rglob("*.jsonl"))
    assert files and files == sorted(p.relative_to(two) for p in (two / "predictions").rglob("*.jsonl"))
    for path in files:
        assert (two / path).read_text() == (one / path).read_text(), path


@pytest.mark.slow
def test_dist_timeout_reaches_the_process_group():
    output = run_forked(DDP, ["tests/helpers/fsdp_probe_timeout.py", "1234"], ENV)
    assert sorted(re.findall(r"rank (\d) of 2: timeout (\d+)", output)) == [("0", "1234"), ("1", "1234")]


SAMPLE = ROOT / "data" / "evolvingqa_sample"


@pytest.mark.slow
def test_qa_adaptation_runs_with_two_fsdp2_processes(tmp_path):
    run_dir = tmp_path / "qa"
    run_forked(
        FSDP2,
        [
            "train.py",
            *TINY,
            f"data.root={SAMPLE}",
            "data=evolvingqa",
            "data.steps=[20230101,'0102']",
            "trainer.epochs_step0=2",
            "trainer.epochs=1",
            "eval.evaluators=[splits]",
            "eval.forward_transfer=false",
            "eval.qa_adaptation.enabled=true",
            "eval.qa_adaptation.steps=4",
            f"hydra.run.dir={run_dir}",
        ],
        ENV,
    )
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert {r["checkpoint"] for r in rows if r["group"] == "splits"} == {0, 1}
    assert {r["num_processes"] for r in rows} == {2}
    assert json.loads((run_dir / "state.json").read_text())["evaluated"] == [0, 1]


@pytest.mark.slow
def test_fsdp2_mid_step_state_resumes_to_the_same_weights(tmp_path):
    """Both processes killed mid-step (SIGKILL at the same optimizer step), then the same command: the run
    continues from the sharded training state (``accelerator.save_state``) and ends with the weights and
    metrics of an uninterrupted run."""
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    overrides = [*SMALL, "method=full", "trainer.batch_size=8", "trainer.save_every_n_steps=2"]
    run_forked(FSDP2, ["train.py", *overrides, f"hydra.run.dir={reference}"], ENV)
    command = ["train.py", *overrides, f"hydra.run.dir={resumed}"]
    run_forked_killed(FSDP2, command, ENV, "optimizer_step:27")
    states = sorted(p.name for p in (resumed / "train_state").iterdir() if not p.name.startswith("."))
    assert states, "no mid-step state was saved before the kill"
    output = run_forked(FSDP2, command, ENV)
    assert "resuming time step" in output and states[-1] in output
    for k in range(3):
        difference = relative_difference(
            load_file(reference / f"steps/{k}/model.safetensors"), load_file(resumed / f"steps/{k}/model.safetensors")
        )
        assert difference < 1e-6, (k, difference)
    assert em_rows(resumed) == em_rows(reference)


@pytest.mark.slow
def test_fsdp2_step0_cache_is_stored_and_loaded(tmp_path):
    """The first FSDP2 run stores its step 0 (plain weights, written by the main process); the second,
    another method, loads it on both processes instead of training and continues sharded."""
    cache, first, second = tmp_path / "cache", tmp_path / "full", tmp_path / "lora"
    overrides = [*SMALL, "trainer.batch_size=8", f"method.step0_cache={cache}"]
    run_forked(FSDP2, ["train.py", *overrides, "method=full", f"hydra.run.dir={first}"], ENV)
    entries = [p for p in cache.iterdir() if not p.name.startswith(".")]
    assert len(entries) == 1 and (entries[0] / "model.safetensors").is_file()
    output = run_forked(
        FSDP2,
        ["train.py", *overrides, "method=lora", "method.lora.save_merged=true", f"hydra.run.dir={second}"],
        ENV,
    )  # merged weights: check_loads reads them with transformers
    assert output.count("loaded from the step-0 cache") == 1  # the main process logs; step 0 trained by neither:
    assert [len(local) for local, _ in held_per_process(output)] == [2, 2]  # steps 1 and 2 sharded over both
    a, b = load_file(first / "steps/0/model.safetensors"), load_file(second / "steps/0/model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    check_loads(second, "lora")


@pytest.mark.slow
def test_fsdp2_keeps_the_optimizer_state_across_steps_like_ddp(tmp_path):
    """``trainer.optimizer_state=keep`` under FSDP2: at the end of each step every process writes its shards of the
    AdamW state through ``torch.distributed.checkpoint`` (train_state/carry/<k>/optimizer/: one file per process,
    no process ever holds the full state) and the next step's processes read theirs back, so FSDP2 trains the
    weights DDP trains with the same setting."""
    sharded, ddp = tmp_path / "fsdp", tmp_path / "ddp"
    overrides = [*SMALL, "method=full", "trainer.batch_size=8", "trainer.optimizer_state=keep"]
    output = run_forked(FSDP2, ["train.py", *overrides, f"hydra.run.dir={sharded}"], ENV)
    held = re.findall(r"the AdamW state saved sharded .*; processes held \[(\d+), (\d+)\] values", output)
    assert len(held) == 3, output[-3000:]  # steps 0-2
    assert all(0.25 < int(a) / (int(a) + int(b)) < 0.75 for a, b in held), held  # each process about half
    run_forked(DDP, ["train.py", *overrides, f"hydra.run.dir={ddp}"], ENV)
    folder = sharded / "train_state/carry/2/optimizer"
    assert sorted(p.name for p in folder.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    carried = sharded_carry(folder, tmp_path / "carry.pt")
    assert carried.keys() == load_file(ddp / "train_state/carry/2/optimizer.safetensors").keys()
    assert carried["transformer.wte.weight/step"].item() > 12  # counts every step's updates since step 0
    for k in (1, 2):
        difference = relative_difference(
            load_file(ddp / f"steps/{k}/model.safetensors"), load_file(sharded / f"steps/{k}/model.safetensors")
        )
        assert difference < SAME_AS_DDP, (k, difference)


def sharded_carry(folder: Path, scratch: Path) -> dict:
    """A sharded carry (DCP) as ``{"<param name>/<key>": tensor}``, the layout of the whole one DDP writes."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(folder, scratch)
    state = torch.load(scratch, weights_only=False)["optim"]["state"]
    return {f"{name}/{key}": value for name, per in state.items() for key, value in per.items()}


@pytest.mark.slow
def test_fsdp2_gradient_accumulation_syncing_every_micro_batch_trains_ddps_weights(tmp_path):
    """``trainer.grad_accum=2`` under FSDP2 (gradients reduce-scattered after each micro-batch,
    ``trainer.fsdp_sync_each_batch``) trains the weights DDP trains with the same accumulation."""
    sharded, ddp = tmp_path / "fsdp", tmp_path / "ddp"
    overrides = [*SMALL, "method=full", "trainer.batch_size=4", "trainer.grad_accum=2"]
    run_forked(FSDP2, ["train.py", *overrides, f"hydra.run.dir={sharded}"], ENV)
    run_forked(DDP, ["train.py", *overrides, f"hydra.run.dir={ddp}"], ENV)
    for k in (1, 2):
        difference = relative_difference(
            load_file(ddp / f"steps/{k}/model.safetensors"), load_file(sharded / f"steps/{k}/model.safetensors")
        )
        assert difference < SAME_AS_DDP, (k, difference)
