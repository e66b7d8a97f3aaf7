"""Tiny models and token datasets for the method tests: no world, no tokenizer, each step in well under a second."""

from __future__ import annotations

import dataclasses

import contextlib

import torch
from accelerate import Accelerator
from datasets import Dataset
from transformers import GPT2Config, GPT2LMHeadModel

from evolve_train.config import MethodConfig, TrainerConfig
from evolve_train.methods import Method, TokenizedHistory
from evolve_train.training.examples import collate
from evolve_train.training.loop import train_time_step
from evolve_train.training.plan import StepPlan

VOCAB = 64
PAD = 0


@contextlib.contextmanager
def one_thread():
    """Tiny models run ~15x faster on one thread when the 2 cores are shared (measured 0.5 s vs 8 s a step)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def tiny_gpt2(seed: int = 0, n_layer: int = 2) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=32,
        n_embd=32,
        n_layer=n_layer,
        n_head=2,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=1,
        eos_token_id=1,
        pad_token_id=PAD,
    )
    return GPT2LMHeadModel(config)


def token_rows(n: int, low: int, high: int, seed: int) -> Dataset:
    """``n`` random rows of 6-11 tokens drawn from [low, high): disjoint ranges tell datasets apart."""
    g = torch.Generator().manual_seed(seed)
    rows = [
        torch.randint(low, high, (int(torch.randint(6, 12, (1,), generator=g)),), generator=g).tolist()
        for _ in range(n)
    ]
    return Dataset.from_dict({"input_ids": rows, "labels": rows})


def make_history(datasets) -> TokenizedHistory:
    """Earlier steps' examples as run.py hands them to the strategies."""
    return TokenizedHistory(list(range(len(datasets))), lambda index: datasets[index], pad_id=PAD)


def method(*strategies: str, **sections) -> Method:
    """``method("full", "l2_init", l2_init={"coef": 1.0})``."""
    cfg = MethodConfig(name="+".join(strategies), strategies=list(strategies))
    for section, values in sections.items():  # rebuilt, so that the schema checks the values
        current = getattr(cfg, section)
        setattr(cfg, section, dataclasses.replace(current, **values))
    return Method(cfg)


def trainer_cfg(**overrides) -> TrainerConfig:
    values = dict(batch_size=16, lr=1e-2, warmup_steps=2, log_every=1000, grad_clip=1.0)
    values.update(overrides)
    return TrainerConfig(**values)


def train(model, examples, m: Method, *, step: int = 1, epochs: float = 3, seed: int = 0, **trainer):
    return train_time_step(
        StepPlan(
            step=step,
            trainer=trainer_cfg(**trainer),
            examples=examples,
            epochs=epochs,
            strategies=m,
            collate=lambda rows: collate(rows, PAD),
            seed=seed,
        ),
        model,
        Accelerator(cpu=True),
    )


def run_step(model, examples, m: Method, history, step: int = 1, **kwargs):
    """One time step exactly as run.py drives it: mix -> prepare -> train -> after_step."""
    mixed = m.mix_examples(step, examples, history)
    model = m.prepare_model(model, step)
    train(model, mixed, m, step=step, **kwargs)
    return m.after_step(model, step, mixed), mixed


def snapshot(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def drift(model, before: dict[str, torch.Tensor]) -> float:
    """L2 distance of the weights from ``before`` (names of a plain, unwrapped model)."""
    return float(sum(((p.detach() - before[n]) ** 2).sum() for n, p in model.named_parameters()) ** 0.5)
