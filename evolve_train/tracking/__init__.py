"""Where metrics go: disk (jsonl), console, Weights & Biases — one interface."""

from evolve_train.tracking import console, disk, wandb_logger  # noqa: F401  (register the loggers)
from evolve_train.tracking.base import LOGGERS, MetricLogger, MultiLogger


def build_logger(names: list[str], **kwargs) -> MultiLogger:
    from evolve_train.errors import ConfigError

    unknown = [n for n in names if n not in LOGGERS]
    if unknown:
        raise ConfigError(f"logger.backends: unknown logger '{unknown[0]}' (known: {', '.join(sorted(LOGGERS))})")
    return MultiLogger([LOGGERS[name](**kwargs) for name in names])


__all__ = ["MetricLogger", "MultiLogger", "build_logger"]
