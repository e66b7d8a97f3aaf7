"""Metrics registered by name, lm-evaluation-harness style: `register_metric(name)` and `get_metric(name)`."""

from __future__ import annotations

from typing import Callable, TypeVar

from evolve_train.evaluation.metrics import answer, calibration, continual, dimensions, stats, temporal

F = TypeVar("F", bound=Callable)
_METRICS: dict[str, Callable] = {}


class UnknownMetricError(LookupError):
    """No metric is registered under the requested name; the message lists the known names."""


def register_metric(name: str) -> Callable[[F], F]:
    """Decorator registering a metric function under `name`; re-registering a name with another function
    raises ValueError."""

    def decorator(function: F) -> F:
        if _METRICS.get(name, function) is not function:
            raise ValueError(f"metric '{name}' is already registered ({_METRICS[name].__qualname__})")
        _METRICS[name] = function
        return function

    return decorator


def get_metric(name: str) -> Callable:
    """The metric function registered under `name`; UnknownMetricError lists the known names."""
    try:
        return _METRICS[name]
    except KeyError:
        raise UnknownMetricError(f"unknown metric '{name}'; known metrics: {', '.join(sorted(_METRICS))}") from None


def list_metrics() -> list[str]:
    """The registered metric names, sorted."""
    return sorted(_METRICS)


_BUILTIN = {
    "exact_match": answer.exact_match,
    "f1": answer.f1,
    "recall_at_k": answer.recall_at_k,
    "avg_acc": continual.avg_acc,
    "forgetting": continual.forgetting,
    "forgetting_max": continual.forgetting_max,
    "bwt": continual.bwt,
    "fwt": continual.fwt,
    "fuar": continual.fuar,
    "continual_summary": continual.continual_summary,
    "update_adoption": temporal.update_adoption,
    "confusion_index": temporal.confusion_index,
    "pair_asymmetry": temporal.pair_asymmetry,
    "time_accuracy": temporal.time_accuracy,
    "old_knowledge_retention": temporal.old_knowledge_retention,
    "timestamp_ablation": temporal.timestamp_ablation,
    "timestamp_invariance": temporal.timestamp_invariance,
    "accuracy_per_dimension": dimensions.accuracy_per_dimension,
    "error_share": dimensions.error_share,
    "acc": calibration.mc_accuracy,
    "acc_norm": calibration.mc_accuracy_norm,
    "ece": calibration.ece,
    "brier": calibration.brier,
    "overconfident_error_rate": calibration.overconfident_error_rate,
    "position_consistency": calibration.position_consistency,
    "paired_bootstrap_diff": stats.paired_bootstrap_diff,
    "cohen_kappa": stats.cohen_kappa,
    "flip_rate": stats.flip_rate,
    "paraphrase_gap": stats.paraphrase_gap,
    "release_gate": stats.release_gate,
}
for _name, _function in _BUILTIN.items():
    register_metric(_name)(_function)
