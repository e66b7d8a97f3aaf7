"""The metric-logger interface, used by the training loop and the evaluator alike."""

from __future__ import annotations

from typing import Callable


class MetricLogger:
    """Receives training rows, per-checkpoint evaluation rows and the final summary."""

    def log_train(self, row: dict) -> None:
        pass

    def log_eval(self, checkpoint: int, rows: list[dict]) -> None:
        pass

    def log_summary(self, summary: dict) -> None:
        pass

    def close(self, ok: bool = True) -> None:
        pass


class MultiLogger(MetricLogger):
    def __init__(self, loggers: list[MetricLogger]):
        self.loggers = loggers

    def log_train(self, row):
        for logger in self.loggers:
            logger.log_train(row)

    def log_eval(self, checkpoint, rows):
        for logger in self.loggers:
            logger.log_eval(checkpoint, rows)

    def log_summary(self, summary):
        for logger in self.loggers:
            logger.log_summary(summary)

    def close(self, ok=True):
        for logger in self.loggers:
            logger.close(ok)


LOGGERS: dict[str, Callable[..., MetricLogger]] = {}


def register_logger(name: str):
    def decorate(factory):
        LOGGERS[name] = factory
        return factory

    return decorate
