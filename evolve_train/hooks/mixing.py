"""Rows from outside the timeline mixed into the steps after step 0 (``methods/mixing.py``): this hook reads
``data.mix_files`` when the run is set up (a bad file fails before anything is written), adds the general mix
to the run's method (``data.mix_ratio`` > 0 turns it on: no strategy name to list), binds the strategies that
need the run (the mix, ``generative_replay``: its model, text format and run dir), and after each step's
training writes what the step mixed as one ``group: mix`` row of ``train_log.jsonl`` (:class:`MixCounts`:
step and mix rows and tokens, the mix share, the trained tokens and FLOPs that were mix ones, and the
generation's cost), the mix tokens, share, FLOPs and generation cost on the checkpoint's metric rows too)."""

from __future__ import annotations

from evolve_train.data.mix import mix_corpus
from evolve_train.errors import ConfigError
from evolve_train.methods.mixing import GeneralMix, MixingStrategy, metric_fields
from evolve_train.training.hooks import Hook, register_hook


def check_mix_config(cfg) -> None:
    """What the general mix cannot train under (``ConfigError`` naming the keys)."""
    if str(cfg.model.arch) == "t5":
        raise ConfigError(
            "data.mix_files: general documents train as documents, which a seq2seq model (model.arch=t5) does "
            "not; use a causal model"
        )
    if "replay" in cfg.method.strategies and cfg.method.replay.decay < 1:
        raise ConfigError(
            "data.mix_files with method.replay.decay < 1: replay selects each epoch's rows by position, which the "
            "mix rows appended after them would shift; use decay=1"
        )


@register_hook("mixing")
def mixing(cfg):
    generative = "generative_replay" in (cfg.method.strategies or [])
    if not cfg.data.mix_files and not generative:
        return None
    corpus = None
    if cfg.data.mix_files:
        check_mix_config(cfg)
        corpus = mix_corpus(cfg.data)
    return MixingHook(corpus, cfg.data.mix_ratio)


class MixingHook(Hook):
    def __init__(self, corpus, ratio: float):
        self.corpus, self.ratio = corpus, ratio
        self.strategies: list[MixingStrategy] = []

    def on_run_start(self, run) -> None:
        if self.corpus is not None:
            run.method.add(GeneralMix(run.cfg.method, self.corpus, self.ratio))  # last: after any replay
        self.strategies = [s for s in run.method.strategies if isinstance(s, MixingStrategy)]
        for strategy in self.strategies:
            strategy.bind(run)

    def on_step_trained(self, run, plan, result) -> None:
        for strategy in self.strategies:
            counts = strategy.counts
            if counts is not None and counts.time_step == plan.step:
                row = counts.row(result)
                run.logger.log_train(row)
                result.extra.update(metric_fields(row))  # on the checkpoint's metric rows too
