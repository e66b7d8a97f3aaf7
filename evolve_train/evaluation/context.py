"""What an evaluator is given: :class:`EvalContext`, one checkpoint's evaluation state.

The context holds the model and its text format (``models/text_format.py``) and shares the
model's outputs between evaluators: a prompt asked by several sets (Updated_k and Outdated_k ask the same
questions) is generated once per checkpoint, and so is an option log-likelihood or a set of sampled answers.

In a multi-process run every process evaluates (:class:`Shards`). For each call the context asks the text format
for the batches one process would form (``generation_batches``, ``option_batches``: the same code that
generates and scores); each batch goes whole to one process (the one with the fewest items so far at this
checkpoint), each process generates or scores its batches, and the results are gathered on every process,
so each computes the same rows (the main process writes them). Every forward pass is then the tensor
computation a single process runs, so the answers, option scores and metrics equal a one-process run's
bit for bit (unless a batch runs out of memory: the smaller batches then round differently). Sampled
answers (``flip_rate``) depend on the draw order and are computed whole on every process.
"""

from __future__ import annotations

import functools
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from tqdm.auto import tqdm

from evolve_train.config import EvalConfig
from evolve_train.data.timeline import EvalSet, Timeline
from evolve_train.models.text_format import TextFormat
from evolve_train.models.batching import AutoBatchSize


@dataclass
class Shards:
    """How the processes of a multi-process evaluation (``index`` of ``count``) share a checkpoint's model
    calls: whole batches of the plan one process would run (:meth:`owners`), results gathered on every
    process (:meth:`run`, a collective: every process calls it)."""

    index: int = 0
    count: int = 1
    load: list[int] = field(default_factory=list)
    """Items (prompts, or ``(prompt, option)`` pairs) given to each process so far: the same on every process."""

    def __post_init__(self):
        self.load = self.load or [0] * self.count

    @classmethod
    def of(cls, accelerator) -> "Shards":
        return cls(accelerator.process_index, accelerator.num_processes)

    def owners(self, sizes: list[int]) -> list[int]:
        """The process that computes each batch (of ``sizes[j]`` items): batch by batch, the one given the
        fewest items so far (the lowest index on a tie), so the loads stay within one batch of each other
        over all the calls of a checkpoint (most calls are a batch or two). The same on every process."""
        owners = []
        for size in sizes:
            owner = min(range(self.count), key=lambda rank: (self.load[rank], rank))
            self.load[owner] += size
            owners.append(owner)
        return owners

    def run(
        self,
        items: list,
        plan: Callable[[list, int], list[list]],
        compute: Callable[[list], list],
        batch: AutoBatchSize,
    ) -> list[tuple]:
        """``(item, result)`` for every item, on every process. ``plan(items, size)`` gives the batches one
        process would form, at the smallest batch size of any process (a process halves it on out-of-memory);
        each process runs ``compute`` once on its own whole batches, joined in order (``compute`` forms the
        same batches again: ``TextFormat.generation_batches``/``option_batches``), and the results are
        gathered."""
        batch.size = min(self.gather(batch.size))
        batches = plan(items, batch.size)
        owners = self.owners([len(b) for b in batches])
        share = [item for b, owner in zip(batches, owners) if owner == self.index for item in b]
        results = [iter(part) for part in self.gather(compute(share))]
        return [(item, next(results[owner])) for b, owner in zip(batches, owners) for item in b]

    def gather(self, value) -> list:
        """Every process's ``value``, in process order, on every process."""
        if self.count == 1:
            return [value]
        import torch.distributed as dist

        parts: list = [None] * self.count
        dist.all_gather_object(parts, value)
        return parts

    def done_per_process(self) -> list[int]:
        """Prompts (and options) each process handled at this checkpoint."""
        return list(self.load)


@dataclass(frozen=True)
class TrainingFormat:
    """How the run's training rows are formed, for evaluators that score training-format examples (``slices``)."""

    objective: str = "masked_entity"
    """``data.objective``."""
    seq_len: int = 0
    """``trainer.seq_len`` (0: the model's context length)."""
    attention_reset: bool = True
    """``trainer.attention_reset`` (packed ``clm`` rows)."""


@dataclass
class EvalContext:
    timeline: Timeline
    checkpoint: int
    """Step whose checkpoint is evaluated (-1 = the model before any training)."""
    cfg: EvalConfig
    run_dir: Optional[Path] = None
    model: object = None
    text_format: Optional[TextFormat] = None
    """The model's text format: prompt encoding, generation, scoring, sampling."""
    rows: list[dict] = field(default_factory=list)
    """Rows produced so far at this checkpoint: an evaluator may read those of the ones listed before it."""
    batch: AutoBatchSize = field(init=False)
    """Generation/scoring batch size: ``eval.batch_size``, halved for the rest of the checkpoint on OOM (with
    several processes, every process takes the smallest size at its next call: ``Shards.run``)."""
    shards: Shards = field(default_factory=Shards)
    """How the processes share the model calls (multi-process runs: whole batches each)."""
    writes: bool = True
    """Whether this process writes files (predictions, spot checks): the main process only."""
    shared: dict = field(default_factory=dict)
    """What is built once per run and reused by every checkpoint (the open-book evaluator's passage stores):
    the run hands each checkpoint's context the same dict."""
    training: TrainingFormat = field(default_factory=TrainingFormat)
    """The run's training-row format (``data.objective``, ``trainer.seq_len``, ``trainer.attention_reset``)."""
    _answers: dict[str, str] = field(default_factory=dict)
    _scores: dict[tuple[str, str], float] = field(default_factory=dict)
    _samples: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self):
        self.batch = AutoBatchSize(self.cfg.batch_size)

    def sets(self) -> list[EvalSet]:
        """Sets introduced so far (and the next step's with ``forward_transfer``); every set for the model
        before training (checkpoint -1), which gives A_init of each step (docs/metrics.md#3-continual-learning-matrix)."""
        if self.checkpoint < 0:
            sets = list(self.timeline.eval_sets)
        else:
            sets = self.timeline.sets_for_checkpoint(self.checkpoint, self.cfg.forward_transfer)
        return [EvalSet(s.name, s.kind, s.step, sample_items(s.items, self.cfg.max_items_per_set)) for s in sets]

    def answers(self, prompts: list[str]) -> list[str]:
        """Raw greedy generations for ``prompts``, generating only those not asked before at this checkpoint."""
        missing = sorted({p for p in prompts if p not in self._answers})
        if missing:
            self._answers.update(self.each_process(missing, self._generate, self.text_format.generation_batches))
        return [self._answers[p] for p in prompts]

    def _generate(self, prompts: list[str]) -> list[str]:
        with tqdm(
            total=len(prompts),
            desc=f"eval ckpt {self.checkpoint}",
            leave=False,
            dynamic_ncols=True,
            disable=None if self.writes else True,  # None: shown only where stderr is a terminal
        ) as bar:
            return self.text_format.generate(
                self.model,
                prompts,
                batch_size=self.batch,
                max_new_tokens=self.cfg.max_new_tokens,
                stop_strings=self.cfg.stop_strings,
                decoder=self.cfg.greedy_decoder,
                progress=bar,
            )

    def option_scores(self, questions: list[tuple[str, list[str]]]) -> list[list[float]]:
        """Log-likelihood of each option given its prompt (docs/metrics.md#7-multiple-choice-and-confidence), for ``(prompt, options)`` pairs;
        each (prompt, option) is scored once per checkpoint, many per forward pass."""
        missing = sorted({(p, o) for p, options in questions for o in options} - set(self._scores))
        if missing:
            score = functools.partial(self.text_format.score_options, self.model, batch_size=self.batch)
            self._scores.update(self.each_process(missing, score, self.text_format.option_batches))
        return [[self._scores[(p, o)] for o in options] for p, options in questions]

    def each_process(
        self, items: list, compute: Callable[[list], list], plan: Callable[[list, int], list[list]]
    ) -> list[tuple]:
        """``(item, result)`` pairs: one process computes all ``items``; several split ``plan(items, size)``,
        the batches one process would form, into whole batches (:meth:`Shards.run`)."""
        if self.shards.count == 1:
            return list(zip(items, compute(items)))
        return self.shards.run(items, plan, compute, self.batch)

    def samples(self, prompts: list[str]) -> list[list[str]]:
        """``eval.flip_rate.samples`` raw sampled generations per prompt (seeded per checkpoint), sampling
        only the prompts not sampled before at this checkpoint."""
        settings = self.cfg.flip_rate
        missing = sorted({p for p in prompts if p not in self._samples})
        if missing:
            raw = self.text_format.sample(
                self.model,
                missing,
                n=settings.samples,
                temperature=settings.temperature,
                seed=settings.seed + 1000 * (self.checkpoint + 1),
                batch_size=self.batch,
                max_new_tokens=self.cfg.max_new_tokens,
                stop_strings=self.cfg.stop_strings,
            )
            self._samples.update(zip(missing, raw))
        return [self._samples[p] for p in prompts]


def sample_items(items: list[dict], cap: int) -> list[dict]:
    if cap <= 0 or len(items) <= cap:
        return items
    keep = set(random.Random(0).sample(range(len(items)), cap))
    return [item for i, item in enumerate(items) if i in keep]


def write_predictions(run_dir: Path, checkpoint: int, set_name: str, records: list[dict]) -> None:
    from evolve_train.utils.io import atomic_write_text

    path = run_dir / "predictions" / f"step_{checkpoint}" / f"{set_name}.jsonl"  # set_name may hold a folder
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    atomic_write_text(path, text)
