"""What an evaluator is given: :class:`EvalContext`, one checkpoint's evaluation state.

The context holds the model and its adapter (``models/adapter.py``, the model's text format) and shares the
model's outputs between evaluators: a prompt asked by several sets (Updated_k and Outdated_k ask the same
questions) is generated once per checkpoint, and so is an option log-likelihood or a set of sampled answers.

In a multi-process run every process evaluates (:class:`Shards`): each generates answers and scores options
for a contiguous share of the prompts the evaluators ask, and the shares are gathered on every process, so
each computes the same rows (the main process writes them). Greedy answers and option scores do not depend
on how prompts are batched, so the metrics equal a one-process run's. Sampled answers (``flip_rate``) depend
on the draw order and are computed whole on every process.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from tqdm.auto import tqdm

from evolve_train.config import EvalConfig
from evolve_train.data.timeline import EvalSet, Timeline
from evolve_train.models.adapter import ModelAdapter
from evolve_train.models.batching import AutoBatchSize


@dataclass
class Shards:
    """This process's share of each list of prompts (``index`` of ``count`` processes), and the gather of
    the shares' results, in order, on every process (a collective: every process calls it)."""

    index: int = 0
    count: int = 1
    done: list[int] = field(default_factory=list)
    """Prompts this process answered or scored, per call (for the timing row)."""

    @classmethod
    def of(cls, accelerator) -> "Shards":
        return cls(accelerator.process_index, accelerator.num_processes)

    def part(self, items: list) -> list:
        """A contiguous share: sizes differ by at most one."""
        size, extra = divmod(len(items), self.count)
        start = self.index * size + min(self.index, extra)
        share = items[start:start + size + (self.index < extra)]
        self.done.append(len(share))
        return share

    def gather(self, results: list) -> list:
        if self.count == 1:
            return results
        import torch.distributed as dist

        parts: list = [None] * self.count
        dist.all_gather_object(parts, results)
        return [result for part in parts for result in part]

    def done_per_process(self) -> list[int]:
        """Prompts (and options) each process handled at this checkpoint."""
        return [sum(done) for done in self.gather([self.done])] if self.count > 1 else [sum(self.done)]


@dataclass
class EvalContext:
    timeline: Timeline
    checkpoint: int
    """Step whose checkpoint is evaluated (-1 = the model before any training)."""
    cfg: EvalConfig
    run_dir: Optional[Path] = None
    model: object = None
    adapter: Optional[ModelAdapter] = None
    """The model's text format: prompt encoding, generation, scoring, sampling."""
    rows: list[dict] = field(default_factory=list)
    """Rows produced so far at this checkpoint: an evaluator may read those of the ones listed before it."""
    batch: AutoBatchSize = field(init=False)
    """Generation/scoring batch size: ``eval.batch_size``, halved for the rest of the checkpoint on OOM."""
    shards: Shards = field(default_factory=Shards)
    """This process's share of the prompts (multi-process runs)."""
    writes: bool = True
    """Whether this process writes files (predictions, spot checks): the main process only."""
    _answers: dict[str, str] = field(default_factory=dict)
    _scores: dict[tuple[str, str], float] = field(default_factory=dict)
    _samples: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self):
        self.batch = AutoBatchSize(self.cfg.batch_size)

    def sets(self) -> list[EvalSet]:
        """Sets introduced so far (and the next step's with ``forward_transfer``); every set for the model
        before training (checkpoint -1), which gives A_init of each step (METRICS.md §3)."""
        if self.checkpoint < 0:
            sets = list(self.timeline.eval_sets)
        else:
            sets = self.timeline.sets_for_checkpoint(self.checkpoint, self.cfg.forward_transfer)
        return [EvalSet(s.name, s.kind, s.step, sample_items(s.items, self.cfg.max_items_per_set)) for s in sets]

    def answers(self, prompts: list[str]) -> list[str]:
        """Raw greedy generations for ``prompts``, generating only those not asked before at this checkpoint."""
        missing = sorted({p for p in prompts if p not in self._answers})
        if missing:
            share = self.shards.part(missing)
            with tqdm(total=len(share), desc=f"eval ckpt {self.checkpoint}", leave=False, dynamic_ncols=True,
                      disable=not self.writes) as bar:
                raw = self.adapter.generate(self.model, share, batch_size=self.batch,
                                            max_new_tokens=self.cfg.max_new_tokens,
                                            stop_strings=self.cfg.stop_strings, decoder=self.cfg.greedy_decoder,
                                            progress=bar)
            self._answers.update(zip(missing, self.shards.gather(raw)))
        return [self._answers[p] for p in prompts]

    def option_scores(self, questions: list[tuple[str, list[str]]]) -> list[list[float]]:
        """Log-likelihood of each option given its prompt (METRICS.md §7), for ``(prompt, options)`` pairs;
        each (prompt, option) is scored once per checkpoint, many per forward pass."""
        missing = sorted({(p, o) for p, options in questions for o in options} - set(self._scores))
        if missing:
            scores = self.adapter.score_options(self.model, self.shards.part(missing), batch_size=self.batch)
            self._scores.update(zip(missing, self.shards.gather(scores)))
        return [[self._scores[(p, o)] for o in options] for p, options in questions]

    def samples(self, prompts: list[str]) -> list[list[str]]:
        """``eval.flip_rate.samples`` raw sampled generations per prompt (seeded per checkpoint), sampling
        only the prompts not sampled before at this checkpoint."""
        settings = self.cfg.flip_rate
        missing = sorted({p for p in prompts if p not in self._samples})
        if missing:
            raw = self.adapter.sample(self.model, missing, n=settings.samples, temperature=settings.temperature,
                                      seed=settings.seed + 1000 * (self.checkpoint + 1), batch_size=self.batch,
                                      max_new_tokens=self.cfg.max_new_tokens, stop_strings=self.cfg.stop_strings)
            self._samples.update(zip(missing, raw))
        return [self._samples[p] for p in prompts]


def sample_items(items: list[dict], cap: int) -> list[dict]:
    if cap <= 0 or len(items) <= cap:
        return items
    keep = set(random.Random(0).sample(range(len(items)), cap))
    return [item for i, item in enumerate(items) if i in keep]


def write_predictions(run_dir: Path, checkpoint: int, set_name: str, records: list[dict]) -> None:
    from evolve_train.utils.io import atomic_write_text

    directory = run_dir / "predictions" / f"step_{checkpoint}"
    directory.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    atomic_write_text(directory / f"{set_name}.jsonl", text)
