"""Generative replay (LAMOL; Self-Synthesized Rehearsal): before each step k >= 1 the model that step k starts
from (step k-1's; ``method.generative.sampler=initial``: the model before step 0, rebuilt for the sampling)
writes documents, which are mixed into step k's rows like general documents (``methods/mixing.py``).

* **Prompts** (``method.generative.prompt``): ``bos`` — every sample starts from the tokenizer's BOS (a
  Llama-family model), or its EOS where it adds none (GPT-2's document separator, the demo's local BPE): an
  unconditional sample; ``corpus`` — each starts from the first ``prompt_tokens`` tokens of a step-0 document
  (or of a masked-entity pair with its mask filled in), chosen seeded from step 0's training corpus; the prompt
  is part of the document that is trained on.
* **Sampling**: ``samples`` documents of at most ``max_new_tokens`` new tokens (ending at EOS), pure ancestral
  sampling at ``temperature`` (no top-k, no top-p), ``batch_size`` sequences at a time, batch b seeded by
  :func:`generation_seed` (the run's seed and the step) + b, inside a forked RNG (the training's random
  numbers are the same whether the samples were generated or read back). A sample that is empty is dropped.
* **Saved, and re-used on resume**: ``<run_dir>/generated/step_<k>.jsonl`` (one sample a line: ``n``, ``prompt``,
  ``text``, ``new_tokens``) and ``step_<k>.json`` (the settings and the cost), written atomically
  (``utils/io.py``; the samples last, so a file there is complete). A step that is trained again (a killed
  run resumed) reads its samples back instead of sampling: the same rows whatever happened.
* **Cost**: generation seconds and FLOPs ``2 · N · positions`` (N: the model's parameters, positions: prompt plus
  new tokens of every sample; docs/metrics.md#11-compute's forward cost), in the step's ``group: mix`` training-log row.

Multi-process runs: the main process samples and writes, the others wait and read the file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from pathlib import Path

import torch

from evolve_train.data.schema import TimeStep
from evolve_train.errors import ConfigError
from evolve_train.methods.base import register_strategy
from evolve_train.methods.mixing import MixCounts, MixingStrategy, append_rows, document_rows, row_tokens
from evolve_train.methods.replay import sample_indices
from evolve_train.models.generation import padded_batch
from evolve_train.models.text_format import split_masked
from evolve_train.training import faults
from evolve_train.training.rng import rng_state, set_rng_state
from evolve_train.training.telemetry import eval_flops
from evolve_train.utils.io import atomic_write_text, read_jsonl, write_jsonl

log = logging.getLogger(__name__)
SAMPLES_DIR = "generated"


def samples_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / SAMPLES_DIR / f"step_{step}.jsonl"


def meta_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / SAMPLES_DIR / f"step_{step}.json"


def generation_seed(seed: int, step: int) -> int:
    """The seed of step ``step``'s samples: a hash of the run's seed and the step (63 bits)."""
    return int(hashlib.sha256(f"{seed}-generative-{step}".encode()).hexdigest()[:15], 16)


def corpus_texts(step: TimeStep) -> list:
    """What ``prompt=corpus`` draws prompts from: the step's documents, else its pairs with the mask filled in."""
    if len(step.texts):
        return step.texts
    return step.pairs


def record_text(record: dict) -> str:
    if "text" in record:
        return record["text"]
    parts = split_masked(record["input"])
    return record["input"] if parts is None else parts[0] + record["output"] + parts[1]


def prompts_for(text_format, gen, step0: TimeStep, seed: int) -> list[list[int]]:
    """The token ids each sample starts from (:mod:`the module docstring <evolve_train.methods.generative>`)."""
    start = list(text_format.prefix) or [text_format.eos_id]
    if str(gen.prompt) == "bos":
        return [list(start) for _ in range(gen.samples)]
    records = corpus_texts(step0)
    if not len(records):
        raise ConfigError("method.generative.prompt=corpus: step 0 has no training text to draw prompts from")
    chosen = sample_indices(len(records), gen.samples, random.Random(seed))
    texts = [record_text(records[i]) for i in chosen]
    return [list(text_format.prefix) + ids[: gen.prompt_tokens] or list(start) for ids in text_format.encode(texts)]


def position_limit(model):
    config = getattr(model, "config", None)
    return getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)


@torch.no_grad()
def sample_continuations(
    model, text_format, prompts: list[list[int]], *, temperature: float, max_new_tokens: int, batch_size: int, seed: int
) -> list[list[int]]:
    """Each prompt's sampled new tokens up to (without) its first EOS, ``batch_size`` prompts at a time, batch b
    sampled after ``torch.manual_seed(seed + b)`` in a forked RNG; the model's train/eval mode is restored."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: list[list[int]] = []
    devices = [device.index or 0] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices):
            for b, begin in enumerate(range(0, len(prompts), batch_size)):
                chunk = prompts[begin : begin + batch_size]
                ids, mask = padded_batch(chunk, text_format.pad_id, left=True)
                torch.manual_seed(seed + b)
                generated = model.generate(
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    do_sample=True,
                    top_k=0,
                    top_p=1.0,
                    temperature=temperature,
                    max_new_tokens=max_new_tokens,
                    eos_token_id=text_format.eos_id,
                    pad_token_id=text_format.pad_id,
                    use_cache=True,
                )
                for row in generated[:, ids.shape[1] :].tolist():
                    out.append(row[: row.index(text_format.eos_id)] if text_format.eos_id in row else row)
    finally:
        model.train(was_training)
    return out


def generate_samples(model, text_format, gen, step0: TimeStep, seed: int) -> tuple[list[dict], dict]:
    """``(samples, meta)``: the documents the model writes (one dict each) and the settings and cost."""
    from evolve_train.training.telemetry import parameter_counts

    prompts = prompts_for(text_format, gen, step0, seed)
    limit = position_limit(model)
    longest = max(len(p) for p in prompts)
    max_new = gen.max_new_tokens if not limit else min(gen.max_new_tokens, int(limit) - longest)
    if max_new < 1:
        raise ConfigError(
            f"method.generative: prompts of {longest} tokens leave no room in the model's {limit} positions"
        )
    start = time.perf_counter()
    new = sample_continuations(
        model,
        text_format,
        prompts,
        temperature=gen.temperature,
        max_new_tokens=max_new,
        batch_size=gen.batch_size,
        seed=seed,
    )
    seconds = time.perf_counter() - start
    prefix = len(text_format.prefix)
    samples = []
    for n, (prompt, tokens) in enumerate(zip(prompts, new)):
        own = prompt[prefix:] if str(gen.prompt) == "corpus" else []
        samples.append(
            {
                "n": n,
                "prompt": text_format.tokenizer.decode(own, skip_special_tokens=True),
                "text": text_format.tokenizer.decode(own + tokens, skip_special_tokens=True).strip(),
                "new_tokens": len(tokens),
            }
        )
    positions = sum(len(p) + len(t) + (1 if len(t) < max_new else 0) for p, t in zip(prompts, new))  # + the EOS
    meta = {
        "seed": seed,
        "samples": gen.samples,
        "temperature": gen.temperature,
        "max_new_tokens": max_new,
        "prompt": str(gen.prompt),
        "prompt_tokens": gen.prompt_tokens if str(gen.prompt) == "corpus" else 0,
        "batch_size": gen.batch_size,
        "new_tokens": sum(len(t) for t in new),
        "positions": positions,
        "seconds": round(seconds, 4),
        "flops": eval_flops(parameter_counts(model)[0], positions),
    }
    return samples, meta


@register_strategy("generative_replay")
class GenerativeReplay(MixingStrategy):
    """Mixes the previous model's samples into each step k >= 1 (see the module docstring)."""

    @classmethod
    def check_config(cls, cfg) -> None:
        strategies = list(cfg.method.strategies)
        if str(cfg.model.arch) == "t5":
            raise ConfigError(
                "method.strategies: generative_replay samples documents, which a seq2seq model (model.arch=t5) "
                "does not train on; use a causal model"
            )
        if "oracle" in strategies:
            raise ConfigError(
                "method.strategies: generative_replay and oracle (a retrain from scratch) exclude each other"
            )
        if "replay" in strategies and strategies.index("replay") > strategies.index("generative_replay"):
            raise ConfigError(
                "method.strategies: list replay before generative_replay (replay counts the step's own rows)"
            )
        if "replay" in strategies and cfg.method.replay.decay < 1:
            raise ConfigError(
                "method.replay.decay < 1 selects the rows of each epoch by position, which the generated rows "
                "appended after them would shift: use decay=1 with generative_replay"
            )

    def samples(self, run, step: int) -> tuple[list[dict], dict]:
        """Step ``step``'s samples: read back when the run dir has them, else sampled (main process) and saved."""
        path, meta_file = samples_path(run.run_dir, step), meta_path(run.run_dir, step)
        reused = path.is_file()
        if not reused and run.main:
            gen = run.cfg.method.generative
            initial = str(gen.sampler) == "initial"
            writer = run.model
            if initial:  # the initial model built again (its seeding leaves the training's RNG as it was), dropped
                saved = rng_state()
                writer = run.initial_weights()
                set_rng_state(saved)
            samples, meta = generate_samples(
                writer, run.text_format, gen, run.timeline.steps[0], generation_seed(run.cfg.seed, step)
            )
            del writer
            meta = {"time_step": step, "from_checkpoint": -1 if initial else step - 1, **meta}
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(meta_file, json.dumps(meta, indent=2) + "\n")
            write_jsonl(path, samples)  # last: a samples file is a complete one
            faults.point("sample")
            log.info(
                "generative replay (step %d): %d samples, %d new tokens in %.1f s -> %s",
                step,
                len(samples),
                meta["new_tokens"],
                meta["seconds"],
                path,
            )
        run.accelerator.wait_for_everyone()
        if reused:
            log.info("generative replay (step %d): the samples of %s re-used", step, path)
        meta = json.loads(meta_file.read_text(encoding="utf-8")) if meta_file.is_file() else {}
        return read_jsonl(path, missing_ok=False), {**meta, "reused": reused}

    def mix_examples(self, step, examples, history):
        self.counts = None
        if step == 0:
            return examples
        run = self.require_run()
        samples, meta = self.samples(run, step)
        texts = [{"text": s["text"], "doc_id": f"generated_{step}/{s['n']}"} for s in samples if s["text"].strip()]
        corpus = TimeStep(index=step, name=f"generated_{step}", texts=texts)
        rows = document_rows(run, corpus) if texts else examples.select([])
        self.counts = MixCounts(
            step,
            "generated",
            len(examples),
            row_tokens(examples),
            len(rows),
            row_tokens(rows),
            extra={
                "samples": len(samples),
                "empty_samples": len(samples) - len(texts),
                "generated_tokens": meta.get("new_tokens"),
                "generation_seconds": meta.get("seconds"),
                "generation_flops": meta.get("flops"),
                "samples_file": f"{SAMPLES_DIR}/step_{step}.jsonl",
                "samples_reused": meta["reused"],
            },
        )
        return append_rows(examples, rows)
