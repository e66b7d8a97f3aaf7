"""QA adaptation (the EvolvingQA protocol): evaluate a QA-fine-tuned *copy* of every checkpoint.

A model continually pretrained on masked-entity text has never seen the question/answer format. The
EvolvingQA authors therefore fine-tune each checkpoint on a QA train set (``unchanged_train.csv``) before
asking the eval questions. Here :class:`QAAdaptation` does the same with the project's one training loop:
the QA items become a :class:`~evolve_train.data.timeline.TimeStep` of pairs (input = the item's prompt,
output = its first answer), a deep copy of the checkpoint is trained on it with ``train_time_step``, that
copy is evaluated and dropped. The chain of time steps continues from the un-adapted model.

The train set is read and checked before anything is written: no eval item's question (normalized as in
docs/metrics.md#1-answer-matching) may appear in it (a DataError names the train file, its line and the eval item).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from evolve_train.config import Config, MethodConfig
from evolve_train.data.loaders.common import read_release_items, resolve_path
from evolve_train.data.qa_items import QAItem
from evolve_train.data.timeline import TimeStep, Timeline
from evolve_train.errors import ConfigError, DataError
from evolve_train.evaluation.metrics.answer import normalize

log = logging.getLogger(__name__)


def default_train_file(cfg: Config) -> Path:
    if cfg.data.kind == "evolvingqa" and cfg.data.root:
        from evolve_train.data.loaders.evolvingqa import adaptation_file

        return adaptation_file(Path(cfg.data.root).expanduser())
    raise ConfigError(
        "eval.qa_adaptation.train_file: no QA train set given (only data=evolvingqa has a default, "
        "the release's unchanged_train.csv)"
    )


def check_no_eval_questions(items: list[tuple[int, QAItem]], timeline: Timeline, path: Path) -> None:
    """DataError if a QA-adaptation item asks (normalized) the question, or gives the prompt, of any eval item."""
    eval_questions: dict[str, tuple[str, str]] = {}
    for eval_set in timeline.eval_sets:
        for item in eval_set.items:
            for text in (item["question"], timeline.prompt(item)):
                eval_questions.setdefault(normalize(text), (item["id"], eval_set.name))
    for number, item in items:
        hit = eval_questions.get(normalize(item.question)) or eval_questions.get(
            normalize(timeline.prompt(item.to_dict()))
        )
        if hit is not None:
            raise DataError(
                f"the QA adaptation set asks the question of eval item '{hit[0]}' (set {hit[1]}); "
                "eval questions must never be trained on",
                file=str(path),
                line=number,
                field="question",
            )


@dataclass
class QAAdaptation:
    """A validated QA train set and how to fine-tune a checkpoint copy on it."""

    cfg: Config
    path: Path
    pairs: list[dict]

    @classmethod
    def from_config(cls, cfg: Config, timeline: Timeline) -> Optional["QAAdaptation"]:
        """None when ``eval.qa_adaptation.enabled`` is false; else the checked train set."""
        settings = cfg.eval.qa_adaptation
        if not settings.enabled:
            return None
        if settings.steps < 0 or settings.epochs <= 0:
            raise ConfigError("eval.qa_adaptation: steps must be >= 0 and epochs > 0")
        path = resolve_path(settings.train_file, cfg.data.root) if settings.train_file else default_train_file(cfg)
        items = read_release_items(path, settings.fields, "dev", "adapt")
        if settings.max_items and len(items) > settings.max_items:
            keep = set(random.Random(0).sample(range(len(items)), settings.max_items))
            items = [row for k, row in enumerate(items) if k in keep]
        check_no_eval_questions(items, timeline, path)
        pairs = [{"input": timeline.prompt(item.to_dict()), "output": item.answers[0]} for _, item in items]
        log.info("QA adaptation: %d items from %s", len(pairs), path)
        return cls(cfg=cfg, path=path, pairs=pairs)

    def adapted(self, model, text_format, *, checkpoint: int, accelerator):
        """A copy of ``model`` fine-tuned on the QA train set (all parameters trainable), its rows encoded by
        ``text_format`` (``models/text_format.py``) as masked-entity pairs; ``model`` is untouched.

        With several processes every process calls this: the copy trains data-parallel like a time step
        (DDP, or sharded under FSDP2 and returned unsharded), so every process holds the same adapted copy
        and evaluates its share of the prompts."""
        from evolve_train.methods import Method
        from evolve_train.training.distributed import train_sharded
        from evolve_train.training.examples import collate
        from evolve_train.training.loop import train_time_step
        from evolve_train.training.plan import StepPlan

        settings, trainer = self.cfg.eval.qa_adaptation, self.cfg.trainer
        trainer = dataclasses.replace(
            trainer,
            lr=settings.lr or trainer.lr,
            batch_size=settings.batch_size or trainer.batch_size,
            save_every_n_steps=0,
            tokens_per_batch=0,
        )  # rows per batch, as documented
        adapted = copy.deepcopy(model)
        for parameter in adapted.parameters():
            parameter.requires_grad_(True)
        step = TimeStep(index=checkpoint, name=f"qa_adaptation@{checkpoint}", pairs=self.pairs)
        examples = text_format.encode_step(step, "masked_entity", trainer.seq_len)
        batches = -(-len(examples) // trainer.batch_size)
        epochs = settings.epochs
        if settings.steps > 0:
            epochs = (settings.steps - 0.5) * trainer.grad_accum / batches  # ceil() in the loop gives `steps`
        total = max(1, -(-int(batches * epochs) // trainer.grad_accum))
        trainer = dataclasses.replace(trainer, warmup_steps=min(trainer.warmup_steps, max(1, total // 10)))
        adapted, result = train_sharded(
            accelerator,
            adapted,
            lambda copy_: train_time_step(
                StepPlan(
                    step=checkpoint,
                    trainer=trainer,
                    examples=examples,
                    epochs=epochs,
                    strategies=Method(MethodConfig()),
                    collate=lambda rows: collate(rows, text_format.pad_id),
                    seed=self.cfg.seed + 7919 * (checkpoint + 1),
                ),
                copy_,
                accelerator,
            ),
        )
        log.info(
            "QA adaptation of checkpoint %d: %d optimizer steps, final loss %.4f, %.1f s",
            checkpoint,
            result.optimizer_steps,
            result.final_loss,
            result.seconds,
        )
        adapted.eval()
        return adapted
