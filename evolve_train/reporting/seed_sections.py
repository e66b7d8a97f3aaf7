"""The report's sections for configurations run with several seeds (see ``reporting/seeds.py``): the
configurations, a summary of what a recipe comparison reads (retention, acquisition, update adoption, held-out
loss, FLOPs), their mean ± 95% CI across seeds at the final checkpoint and per step, and the paired
differences between configurations pooled over seeds. Each section is ``(title, intro, (header, rows))``."""

from __future__ import annotations

from typing import Optional

from evolve_train.evaluation.rows import column_key
from evolve_train.reporting.plots import checkpoint_label
from evolve_train.reporting.seeds import NON_RESULT_KEYS, PooledDiff, RunGroup, t_interval

Section = tuple[str, str, tuple[list[str], list[list[str]]]]
T_NOTE = (
    "mean ± half-width of the 95% Student t-interval across seeds (t with n − 1 degrees of freedom, "
    "n = seeds; a single seed shows its value alone)"
)


def _columns(groups: list[RunGroup]) -> list[str]:
    return sorted({c for g in groups for c in g.columns}, key=column_key)


def configurations_section(groups: list[RunGroup]) -> Section:
    ignored = ", ".join(f"`{k}`" for k in NON_RESULT_KEYS)
    intro = (
        f"Runs whose saved configs (`.hydra/config.yaml`) differ only in keys that do not change results "
        f"({ignored}) are one configuration; names show the overrides that differ between configurations."
    )
    rows = [
        [g.name, str(len(g.seeds)), ", ".join(map(str, g.seeds)), ", ".join(r.label for r in g.runs)] for g in groups
    ]
    return "Configurations (runs grouped by seed)", intro, (["configuration", "seeds", "seed values", "runs"], rows)


def final_mean_section(groups: list[RunGroup]) -> Section:
    columns = _columns(groups)
    rows = []
    for group in groups:
        final = group.final_checkpoint()
        rows.append([group.name, str(len(group.runs)), str(final)] + [group.stats(final, c).text() for c in columns])
    intro = f"EM at the final checkpoint per configuration: {T_NOTE}. Outdated: lower is better."
    return (
        "Final checkpoint across seeds (mean ± 95% CI)",
        intro,
        (["configuration", "seeds", "checkpoint"] + columns, rows),
    )


def _acquired(run, kind: str) -> Optional[float]:
    """Mean over the run's later steps k of EM on ``<kind>_k`` at checkpoint k (what step k taught)."""
    values = [run.cell(k, f"{kind}_{k}") for k in run.checkpoints if k >= 1]
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


HELDOUT_GENERAL = "heldout_general"
"""``set_name`` of the ``heldout`` row of the shipped general text (``eval.heldout_text: [general]``)."""


def _group_value(run, group: str, key: str, checkpoint: int) -> Optional[float]:
    rows = [
        r
        for r in run.group_rows(group)
        if int(r["checkpoint"]) == checkpoint
        and r.get(key) is not None
        and r.get("set_name") in ("all", HELDOUT_GENERAL, None)
    ]
    return float(rows[0][key]) if rows else None


def _train_flops(run) -> Optional[float]:
    per_step = {int(r["checkpoint"]): r.get("train_flops") for r in run.split_rows if int(r["checkpoint"]) >= 0}
    values = [v for v in per_step.values() if v is not None]
    return float(sum(values)) if values else None


SUMMARY = (
    ("Unchanged@last", lambda run, k: run.cell(k, "unchanged")),
    ("New_k@k", lambda run, k: _acquired(run, "new")),
    ("Updated_k@k", lambda run, k: _acquired(run, "updated")),
    ("Outdated_k@k", lambda run, k: _acquired(run, "outdated")),
    ("update adoption@last", lambda run, k: _group_value(run, "paired", "update_adoption", k)),
    ("held-out loss@last (nats)", lambda run, k: _group_value(run, "heldout", "loss", k)),
    ("train FLOPs", lambda run, k: _train_flops(run)),
)
"""The summary's columns: (title, run x final checkpoint -> value)."""


def summary_section(groups: list[RunGroup]) -> Section:
    """Per configuration, the figures a recipe comparison reads, each as mean ± 95% t half-width over seeds:
    retention (Unchanged at the last checkpoint), acquisition (New_k / Updated_k at checkpoint k, averaged over
    the later steps), Outdated_k at k, update adoption and held-out loss at the last checkpoint, and the training
    FLOPs of all steps."""
    rows = []
    for group in groups:
        final = group.final_checkpoint()
        cells = []
        for title, value in SUMMARY:
            stats = t_interval([value(run, final) for run in group.runs])
            cells.append(_flops_text(stats) if title == "train FLOPs" else stats.text())
        rows.append([group.name, str(len(group.runs)), str(final)] + cells)
    intro = (
        f"What a recipe comparison reads, per configuration: {T_NOTE}. New_k@k, Updated_k@k and Outdated_k@k "
        "are averaged over the later steps k (each at its own checkpoint k; Outdated: lower is better); update "
        "adoption is the `paired` row over all temporal sets (docs/metrics.md#4-paired-temporal-metrics); held-out loss is the `heldout` "
        "row of the shipped general text (nats per token; perplexity = exp); FLOPs: docs/metrics.md#11-compute, all steps."
    )
    return (
        "Summary across seeds (mean ± 95% CI)",
        intro,
        (["configuration", "seeds", "checkpoint"] + [title for title, _ in SUMMARY], rows),
    )


def _flops_text(stats) -> str:
    if stats.mean is None:
        return "-"
    if stats.low is None:
        return f"{stats.mean:.3g}"
    return f"{stats.mean:.3g} ± {(stats.high - stats.low) / 2:.2g}"


def step_mean_section(group: RunGroup) -> Section:
    columns = sorted(group.columns, key=column_key)
    rows = [[checkpoint_label(k)] + [group.stats(k, c).text() for c in columns] for k in group.checkpoints]
    return (
        f"Per-step EM across seeds: {group.name}",
        f"{len(group.runs)} seed(s): {T_NOTE}.",
        (["checkpoint"] + columns, rows),
    )


def pooled_section(pooled: list[PooledDiff], B: int) -> Section:
    intro = (
        "EM(a) − EM(b) pooled over seeds: for each seed both configurations ran, the paired difference on the "
        f"same questions at the final checkpoints (the comparison of `evolve-gate`, B={B} bootstrap resamples "
        "per seed); then the mean over seeds and its 95% Student t-interval with n − 1 degrees of freedom "
        "(seeds are the replicates). With one shared seed: that seed's paired bootstrap over items. `all` "
        "pools Unchanged, New and Updated; on Outdated a negative diff favours a."
    )
    header = ["config a", "config b", "eval set", "seeds", "diff (a − b)", "95% CI", "CI excludes 0", "how"]
    rows = []
    for d in pooled:
        interval = "-" if d.ci_low is None else f"[{d.ci_low:+.3f}, {d.ci_high:+.3f}]"
        rows.append(
            [
                d.group_a,
                d.group_b,
                d.column,
                ", ".join(map(str, d.seeds)),
                f"{d.diff:+.3f}",
                interval,
                "yes" if d.significant else "no",
                d.how,
            ]
        )
    return "Paired differences between configurations, pooled over seeds (95% CI)", intro, (header, rows)


__all__ = ["configurations_section", "final_mean_section", "pooled_section", "step_mean_section", "summary_section"]
