"""Metrics registered by name, lm-evaluation-harness style: `register_metric(name)` and `get_metric(name)`.

Each built-in metric is registered with a :class:`MetricInfo` (its unit, a one-line meaning, the section of
docs/metrics.md that defines it, the row keys it writes); :data:`ROW_KEYS` describes the keys of rows and printed
tables that no registered function writes under its own name. ``scripts/metrics_doc.py`` renders both, with the
direction of each key (``directions.py``), as docs/metrics_glossary.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, TypeVar

from evolve_train.evaluation.metrics import answer, calibration, continual, dimensions, stats, temporal

F = TypeVar("F", bound=Callable)
_METRICS: dict[str, Callable] = {}


@dataclass(frozen=True)
class MetricInfo:
    """What a reader of a row needs about a metric: its unit, what it means, where docs/metrics.md defines it."""

    unit: str
    """E.g. ``share of questions in [0, 1]``, ``nats per token``."""
    meaning: str
    """One line: what the value says."""
    section: str
    """The heading anchor of its definition in docs/metrics.md (``3-continual-learning-matrix``)."""
    keys: tuple[str, ...] = ()
    """The row keys it is reported under, when they are not the registered name (``exact_match`` -> ``em``)."""


_INFO: dict[str, MetricInfo] = {}


class UnknownMetricError(LookupError):
    """No metric is registered under the requested name; the message lists the known names."""


def register_metric(name: str, info: Optional[MetricInfo] = None) -> Callable[[F], F]:
    """Decorator registering a metric function under `name` (with its :class:`MetricInfo`, for the glossary);
    re-registering a name with another function raises ValueError."""

    def decorator(function: F) -> F:
        if _METRICS.get(name, function) is not function:
            raise ValueError(f"metric '{name}' is already registered ({_METRICS[name].__qualname__})")
        _METRICS[name] = function
        if info is not None:
            _INFO[name] = info
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


def metric_info(name: str) -> Optional[MetricInfo]:
    """The :class:`MetricInfo` a metric was registered with (None: registered without one)."""
    return _INFO.get(name)


ANSWER, SPLITS, MATRIX, PAIRED = (
    "1-answer-matching",
    "2-evolvingqa-splits",
    "3-continual-learning-matrix",
    ("4-paired-temporal-metrics"),
)
ABLATION, DIMS, CHOICE, STATS = (
    "5-timestamp-ablation",
    "6-the-five-dimensions",
    "7-multiple-choice-and-confidence",
    "8-statistics-and-hygiene",
)
SLICES, OPEN_BOOK, YEARS, HELDOUT = (
    "9-time-sliced-perplexity",
    "10-open-book-evaluation",
    "12-year-resolved-answers",
    "13-held-out-perplexity-and-gradient-norms",
)
SHARE = "share of questions in [0, 1]"
EM_DIFF = "difference of EM, in [-1, 1]"

_BUILTIN: dict[str, tuple[Callable, MetricInfo]] = {
    "exact_match": (
        answer.exact_match,
        MetricInfo(
            SHARE, "the normalized prediction equals one of the gold aliases (mean over questions)", ANSWER, ("em",)
        ),
    ),
    "f1": (
        answer.f1,
        MetricInfo(SHARE + " (mean token F1)", "token overlap with the best-matching gold alias", ANSWER),
    ),
    "recall_at_k": (
        answer.recall_at_k,
        MetricInfo(SHARE, "some gold alias occurs in the k passages retrieved for the question", OPEN_BOOK),
    ),
    "avg_acc": (
        continual.avg_acc,
        MetricInfo(
            "EM in [0, 1]", "mean EM of checkpoint i over the sets of steps 0..i (what it knows so far)", MATRIX
        ),
    ),
    "forgetting": (
        continual.forgetting,
        MetricInfo(EM_DIFF, "EM on step j's set right after step j minus EM at checkpoint i", MATRIX),
    ),
    "forgetting_max": (
        continual.forgetting_max,
        MetricInfo(EM_DIFF, "the highest EM on step j's set before checkpoint i minus EM at checkpoint i", MATRIX),
    ),
    "bwt": (
        continual.bwt,
        MetricInfo(EM_DIFF, "backward transfer: mean change on earlier steps' sets since each was learned", MATRIX),
    ),
    "fwt": (
        continual.fwt,
        MetricInfo(
            EM_DIFF, "forward transfer: EM on step i's set before training on it, minus the initial model's", MATRIX
        ),
    ),
    "fuar": (
        continual.fuar,
        MetricInfo(
            "ratio >= 0 (null when nothing was gained)",
            "forgotten Unchanged EM per EM gained on Updated and New between checkpoints i-1 and i (CKL)",
            MATRIX,
        ),
    ),
    "continual_summary": (
        continual.continual_summary,
        MetricInfo(
            "per checkpoint: the units of its keys", "avg_acc, bwt, fwt and forgetting of every checkpoint", MATRIX
        ),
    ),
    "update_adoption": (
        temporal.update_adoption,
        MetricInfo(
            "share of pairs in [0, 1]",
            "both questions of a changed fact right: old date old answer, new date new",
            PAIRED,
        ),
    ),
    "confusion_index": (
        temporal.confusion_index,
        MetricInfo("share of pair questions in [0, 1]", "a question answered with the other date's answer", PAIRED),
    ),
    "pair_asymmetry": (
        temporal.pair_asymmetry,
        MetricInfo("share of pairs in [0, 1]", "pairs with exactly one of the two questions right", PAIRED),
    ),
    "time_accuracy": (
        temporal.time_accuracy,
        MetricInfo("EM in [0, 1] per time slice", "EM over the dated questions whose date falls in each slice", PAIRED),
    ),
    "old_knowledge_retention": (
        temporal.old_knowledge_retention,
        MetricInfo("EM in [0, 1]", "EM on questions about knowledge that never changed (stable items)", PAIRED),
    ),
    "timestamp_ablation": (
        temporal.timestamp_ablation,
        MetricInfo(
            "EM in [0, 1]; timestamp_reliance in [-1, 1]",
            "EM with the true date, a shuffled date and no date, and true minus shuffled",
            ABLATION,
            ("true", "shuffled", "none", "timestamp_reliance"),
        ),
    ),
    "timestamp_invariance": (
        temporal.timestamp_invariance,
        MetricInfo(
            SHARE, "the answer stays the same when the date is replaced by others (high: ignores time)", ABLATION
        ),
    ),
    "accuracy_per_dimension": (
        dimensions.accuracy_per_dimension,
        MetricInfo("EM in [0, 1] per dimension", "EM on the questions of each of EvolveBench's five dimensions", DIMS),
    ),
    "error_share": (
        dimensions.error_share,
        MetricInfo(
            "share of wrong answers in [0, 1]", "the part of all wrong answers that falls in each dimension", DIMS
        ),
    ),
    "acc": (
        calibration.mc_accuracy,
        MetricInfo(
            SHARE, "multiple choice: the option with the highest summed log-probability is the gold one", CHOICE
        ),
    ),
    "acc_norm": (
        calibration.mc_accuracy_norm,
        MetricInfo(SHARE, "as acc, each option's log-probability divided by its length in UTF-8 bytes", CHOICE),
    ),
    "ece": (
        calibration.ece,
        MetricInfo(
            "calibration error in [0, 1]", "gap between confidence and accuracy over 10 confidence bins", CHOICE
        ),
    ),
    "brier": (
        calibration.brier,
        MetricInfo(
            "squared error in [0, 2]", "squared distance of the option probabilities from the one-hot gold", CHOICE
        ),
    ),
    "overconfident_error_rate": (
        calibration.overconfident_error_rate,
        MetricInfo("share of wrong answers in [0, 1]", "wrong answers given with confidence >= tau (0.8)", CHOICE),
    ),
    "position_consistency": (
        calibration.position_consistency,
        MetricInfo(SHARE, "the same option text is chosen under every rotation of the option order", CHOICE),
    ),
    "paired_bootstrap_diff": (
        stats.paired_bootstrap_diff,
        MetricInfo(
            "difference of means, with a 95 % interval",
            "one run's score minus another's on the same questions (diff, ci_low, ci_high)",
            STATS,
            ("diff", "ci_low", "ci_high"),
        ),
    ),
    "cohen_kappa": (
        stats.cohen_kappa,
        MetricInfo("agreement in [-1, 1]", "agreement of two labelings beyond chance (1: identical)", STATS),
    ),
    "flip_rate": (
        stats.flip_rate,
        MetricInfo(SHARE, "the answer changes across equivalent prompt templates", STATS),
    ),
    "paraphrase_gap": (
        stats.paraphrase_gap,
        MetricInfo(EM_DIFF, "EM on the trained wording minus EM on reworded questions (memorised surface form)", STATS),
    ),
    "release_gate": (
        stats.release_gate,
        MetricInfo(
            "pass or fail, with each check", "thresholds on flip rate, paraphrase gap, paired CI, slice floors", STATS
        ),
    ),
}
for _name, (_function, _info) in _BUILTIN.items():
    register_metric(_name, _info)(_function)

ROW_KEYS: dict[str, MetricInfo] = {
    "n": MetricInfo("count", "questions (pairs, tokens...) a value is computed over; `null` metrics when 0", SPLITS),
    "n_*": MetricInfo(
        "count", "a count of what the suffix names: n_pairs (pairs of §4), n_documents, n_skipped", PAIRED
    ),
    "*_ci": MetricInfo(
        "[low, high]", "95 % bootstrap interval of the metric it follows (brackets in printed tables)", STATS
    ),
    "learned": MetricInfo(
        "EM in [0, 1]",
        "the matrix of what each step taught: column 0 Unchanged, column j New_j and Updated_j pooled",
        MATRIX,
    ),
    "mc_acc": MetricInfo(SHARE, "multiple-choice acc of a dimension's questions (dimensions rows)", DIMS),
    "acc_original": MetricInfo(SHARE, "EM on the questions as trained (the paraphrase gap's first term)", STATS),
    "acc_perturbed": MetricInfo(SHARE, "EM on the reworded questions, averaged over the variants", STATS),
    "loss": MetricInfo(
        "nats per predicted token", "mean negative log-likelihood of held-out text (heldout rows)", HELDOUT
    ),
    "perplexity": MetricInfo(
        "perplexity = exp(nats per token)",
        "exp(loss): a uniform guess over the vocabulary scores the vocabulary size; above it is worse than uniform",
        HELDOUT,
    ),
    "heldout_<text>": MetricInfo(
        "perplexity = exp(nats per token)",
        "printed as heldout_general=...: perplexity on that held-out text; above model.vocab_size is worse than uniform",
        HELDOUT,
        ("perplexity",),
    ),
    "nll": MetricInfo("nats per token", "mean negative log-likelihood of a held-out slice of a step's corpus", SLICES),
    "backward": MetricInfo(
        "as its matrix (NLL: nats; EM)", "mean over cells of earlier steps' slices or sets (j < i)", SLICES
    ),
    "in_dist": MetricInfo(
        "as its matrix (NLL: nats; EM)", "mean over the diagonal: each checkpoint on its own step", SLICES
    ),
    "forward": MetricInfo(
        "as its matrix (NLL: nats; EM)", "mean over cells of later steps' slices or sets (j > i)", SLICES
    ),
    "regret_*": MetricInfo(
        "as its aggregate", "the run's aggregate minus an oracle run's (NLL: > 0 is worse than the oracle)", SLICES
    ),
    "em_open": MetricInfo(SHARE, "EM with the retrieved passages before the question (open book)", OPEN_BOOK),
    "f1_open": MetricInfo(SHARE + " (mean token F1)", "token F1 with the retrieved passages (open book)", OPEN_BOOK),
    "share_undated": MetricInfo(
        "share of facts in [0, 1] per year", "undated answers that give that year's value", YEARS
    ),
    "dated_acc": MetricInfo(
        "share of facts in [0, 1] per year", "answers asked as of that year that give its value", YEARS
    ),
    "knowledge_year": MetricInfo(
        "a year", "the year whose values the undated answers pick most (ties: the latest)", YEARS
    ),
    "mean_loss": MetricInfo(
        "nats per answer token", "mean answer loss of the items whose gradients are measured", HELDOUT
    ),
    "mean_grad_norm": MetricInfo(
        "L2 norm of the gradient", "mean over items of the answer loss's gradient norm (a diagnostic)", HELDOUT
    ),
    "median_grad_norm": MetricInfo(
        "L2 norm of the gradient", "median over items of the answer loss's gradient norm (a diagnostic)", HELDOUT
    ),
}
"""Keys of rows and printed tables that no registered metric writes under its own name (``*`` stands for any
part of a key: ``em_ci``, ``regret_backward``), for the glossary."""
