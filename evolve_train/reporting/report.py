"""``write_report(run_dirs, out_dir)``: PNG plots, ``report.md`` and a self-contained ``report.html``.

Contents (the time-slice, within-step and compute parts: ``reporting/timesliced.py``): the forgetting curves (EM per eval set over time steps, a line per run), a heatmap of each run's
checkpoint x eval-set EM matrix, closed- vs open-book EM per split when the ``retrieval`` evaluator ran
(``reporting/retrieval.py``, with its table), the training loss, the metrics of other row groups (e.g. ``paired``) per
step, a per-step EM table per run, the final-checkpoint EM of every run side by side, and for each pair of
runs the paired-bootstrap EM difference with its 95% CI per eval set and pooled (``all``) at the final
checkpoints (``evaluation/compare.py``, the comparison ``evolve-gate`` uses).

The header says when and with which code the report was made; the first tables give each run's dir (relative
to the report), provenance and command (``reporting/header.py``) and the config keys that differ between the
runs; every metric of every other evaluator follows per set with its n and interval (``reporting/metric_tables.py``;
↑/↓ from ``evaluation/metrics/directions.py``).

When some configuration was run with several seeds (``reporting/seeds.py`` groups the runs by their saved
config), the report adds: the configurations, their mean ± 95% t-interval across seeds at the final checkpoint
and per step, forgetting curves with a band per configuration, and the differences between configurations
pooled over seeds; the run-pair table then holds the same-seed pairs of different configurations.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from evolve_train.evaluation.compare import PairedDiff, check_same_columns, compare_pairs
from evolve_train.evaluation.rows import Run, column_key
from evolve_train.reporting import knowledge, plots, plots_field, retrieval, timesliced
from evolve_train.reporting.header import config_section, generated_line, provenance_section, relative
from evolve_train.reporting.metric_tables import metric_sections
from evolve_train.reporting.runs import load_runs
from evolve_train.reporting.seed_sections import (
    configurations_section,
    final_mean_section,
    pooled_section,
    step_mean_section,
    summary_section,
)
from evolve_train.reporting.seeds import (
    PooledDiff,
    RunGroup,
    group_runs,
    has_seed_groups,
    pooled_diffs,
    relabel,
    seed_pair_diffs,
)

GROUPS_PLOTTED = ("paired", "heldout")


def _fmt(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "run"


def step_table(run: Run) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a run's per-step EM table (checkpoints down, eval sets across, n in the header)."""
    columns = run.columns
    header = ["checkpoint"] + [f"{c} (n={run.n(c)})" for c in columns] + ["train s"]
    rows = []
    for k in run.checkpoints:
        seconds = next((r.get("train_seconds") for r in run.split_rows if int(r["checkpoint"]) == k), None)
        rows.append([plots.checkpoint_label(k)] + [_fmt(run.cell(k, c)) for c in columns] + [_fmt(seconds, 1)])
    return header, rows


def final_table(runs: list[Run]) -> tuple[list[str], list[list[str]]]:
    """Each run's final-checkpoint EM per eval set, side by side."""
    columns = list(dict.fromkeys(c for run in runs for c in run.columns))
    columns.sort(key=column_key)
    header = ["run", "checkpoint"] + columns
    rows = [
        [run.label, str(run.final_checkpoint)] + [_fmt(run.cell(run.final_checkpoint, c)) for c in columns]
        for run in runs
    ]
    return header, rows


def continual_table(runs: list[Run]) -> Optional[tuple[list[str], list[list[str]]]]:
    """avg_acc / BWT / FWT per matrix and FUAR at each run's final checkpoint (summary.json ``matrix``)."""
    rows = []
    for run in runs:
        matrix = run.summary.get("matrix") or {}
        final = str(run.final_checkpoint)
        fuar = (matrix.get("fuar") or {}).get(final)
        for kind, entry in (matrix.get("matrices") or {}).items():
            metrics = (entry.get("metrics") or {}).get(final) or {}
            values = [metrics.get(k) for k in ("avg_acc", "bwt", "fwt")] + [fuar]
            if any(value is not None for value in values):  # a run without QA items has an empty matrix
                rows.append([run.label, kind, final] + [_fmt(value) for value in values])
    return (["run", "matrix", "checkpoint", "avg_acc", "bwt", "fwt", "fuar"], rows) if rows else None


TEMPORAL = (("paired", "update_adoption"), ("paired", "confusion_index"), ("ablation", "timestamp_reliance"))
"""The temporal headline metrics the report shows with their 95 % bootstrap intervals (``<name>_ci`` in the rows)."""


def _with_ci(body: dict, name: str) -> str:
    value, ci = body.get(name), body.get(f"{name}_ci")
    if value is None:
        return "–"
    return f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else _fmt(value)


def temporal_table(runs: list[Run]) -> Optional[tuple[list[str], list[list[str]]]]:
    """Update adoption, confusion index and timestamp reliance over all temporal sets at each run's final
    checkpoint, each with its 95 % bootstrap interval (summary.json ``groups``)."""
    rows = []
    for run in runs:
        groups = run.summary.get("groups") or {}
        bodies = {g: (groups.get(g) or {}).get(str(run.final_checkpoint)) or {} for g, _ in TEMPORAL}
        if any(bodies.values()):
            rows.append(
                [
                    run.label,
                    str(run.final_checkpoint),
                    str(bodies["paired"].get("n_pairs", "–")),
                    str(bodies["ablation"].get("n", "–")),
                ]
                + [_with_ci(bodies[g], name) for g, name in TEMPORAL]
            )
    header = ["run", "checkpoint", "pairs", "dated questions"] + [f"{name} [95% CI]" for _, name in TEMPORAL]
    return (header, rows) if rows else None


def diff_table(diffs: list[PairedDiff]) -> tuple[list[str], list[list[str]]]:
    header = ["run a", "run b", "eval set", "n", "EM a", "EM b", "diff (a − b)", "95% CI", "CI excludes 0", "kappa"]
    rows = [
        [
            d.run_a,
            d.run_b,
            d.column,
            str(d.n),
            _fmt(d.em_a),
            _fmt(d.em_b),
            f"{d.diff:+.3f}",
            f"[{d.ci_low:+.3f}, {d.ci_high:+.3f}]",
            "yes" if d.significant else "no",
            _fmt(d.kappa),
        ]
        for d in diffs
    ]
    return header, rows


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    def line(cells):
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(header), "|" + "---|" * len(header)] + [line(r) for r in rows])


_NUMERIC = re.compile(r"^[-+\[]?[-+]?\d|^-$")
_NUM = " class='num'"


def html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td{_NUM if _NUMERIC.match(c) else ''}>{html.escape(c)}</td>" for c in row) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def make_plots(runs: list[Run], out_dir: Path, groups: Optional[list[RunGroup]] = None) -> dict:
    """Write every PNG; returns {"figures": [(title, file name)], "series": what each plot drew}.
    ``groups`` (configurations with several seeds): the forgetting curves with a band per configuration first."""
    figures, series = [], {}
    if groups:
        series["bands"] = plots.plot_seed_bands(groups, out_dir / "forgetting_bands.png")
        figures.append(
            (
                "EM per eval set over time steps: mean across seeds per configuration, band = 95% CI",
                "forgetting_bands.png",
            )
        )
    if any(run.has_qa for run in runs):  # runs of corpora only have no EM to draw
        series["forgetting"] = plots.plot_forgetting_curves(runs, out_dir / "forgetting_curves.png")
        figures.append(("EM per eval set over time steps (forgetting curves)", "forgetting_curves.png"))
    if retrieval.has_open_book(runs):
        series["open_book"] = retrieval.plot_open_book(runs, out_dir / "open_book.png")
        figures.append(("Closed-book vs open-book EM per split (retrieval)", "open_book.png"))
    for run in (run for run in runs if run.has_qa):
        name = f"matrix_{_slug(run.label)}.png"
        series[f"matrix/{run.label}"] = plots.plot_matrix_heatmap(run, out_dir / name)
        figures.append((f"EM matrix: {run.label}", name))
    for group in GROUPS_PLOTTED:
        if any(run.group_rows(group) for run in runs):
            name = f"{group}_metrics.png"
            series[group] = plots.plot_group_metrics(runs, group, out_dir / name)
            if series[group]:
                figures.append((f"{group} metrics per time step", name))
    tradeoff = plots.plot_perplexity_vs_updated(runs, out_dir / "perplexity_vs_updated.png")
    if tradeoff:
        series["perplexity_vs_updated"] = tradeoff
        figures.append(("Held-out perplexity against Updated EM (the trade-off per run)", "perplexity_vs_updated.png"))
    loss = plots.plot_training_loss(runs, out_dir / "training_loss.png")
    if loss:
        series["loss"] = loss
        figures.append(("Training loss", "training_loss.png"))
    _timesliced_plots(runs, out_dir, figures, series)
    plots_field.add_plots(runs, out_dir, figures, series)  # lm-eval curves, year-resolved heatmaps
    return {"figures": figures, "series": series}


def _timesliced_plots(runs: list[Run], out_dir: Path, figures: list, series: dict) -> None:
    """Slice NLL heatmaps, the within-step curves and retention against FLOPs (``reporting/timesliced.py``)."""
    for run in runs:
        name = f"slices_{_slug(run.label)}.png"
        drawn = timesliced.plot_slice_heatmap(run, out_dir / name)
        if drawn is not None:
            series[f"slices/{run.label}"] = drawn
            title = f"Held-out slice NLL P[i][j] (docs/metrics.md#9-time-sliced-perplexity): {run.label}"
            figures.append((title, name))
    within = timesliced.plot_within_step(runs, out_dir / "within_step.png")
    if within:
        series["within_step"] = within
        figures.append(("Within-step probe: EM per split set during training (stability gap)", "within_step.png"))
    retention = timesliced.plot_retention_vs_flops(runs, out_dir / "retention_vs_flops.png")
    if retention:
        series["retention_vs_flops"] = retention
        figures.append(("Retention against cumulative training FLOPs", "retention_vs_flops.png"))


@dataclass
class Findings:
    """What a report shows, computed before anything is written (errors first)."""

    runs: list[Run]
    groups: list[RunGroup]
    diffs: Optional[list[PairedDiff]]
    """Paired differences of run pairs: every pair, or with seed groups the same-seed pairs of configurations."""
    pooled: Optional[list[PooledDiff]]
    """With seed groups: the differences between configurations pooled over seeds."""
    B: int

    @property
    def seeded(self) -> bool:
        return has_seed_groups(self.groups)

    @property
    def headline(self) -> str:
        runs = f"{len(self.runs)} run(s)" + (f" in {len(self.groups)} configuration(s)." if self.seeded else ".")
        return f"{runs} {generated_line()}"


def diff_section(findings: Findings, note: Optional[str]):
    intro = (
        f"Paired bootstrap (B={findings.B}, docs/metrics.md#8-statistics-and-hygiene) of EM(a) − EM(b) over the same questions at the "
        "final checkpoints, from the per-item prediction files; `all` pools the items of Unchanged, New and "
        "Updated (the comparison `evolve-gate --baseline` checks). On Outdated sets (stale answers) a "
        "negative diff favours a. kappa: Cohen's kappa of the two runs' per-question outcomes."
    )
    title = "Paired differences (95% CI)"
    if findings.seeded:
        title = "Paired differences per seed (95% CI)"
        intro += " Runs of different configurations with the same seed (the inputs of the pooled table)."
    if note:
        intro += f" Note: {note}."
    if len(findings.runs) < 2:
        intro += " (Only one run: nothing to compare.)"
    return title, intro, diff_table(findings.diffs)


def build_sections(findings: Findings, note: Optional[str], out_dir: Path = Path(".")):
    """(top, head, tail): (title, intro text, table) sections shared by the Markdown and HTML writers. With seed
    groups, ``top`` holds the runs and the across-seed tables (the band figure follows them); then ``head``,
    the other figures and ``tail`` (per-step tables). Without, ``top`` is empty and the runs open ``head``."""
    runs = findings.runs
    top = [provenance_section(runs, out_dir)]
    if (differences := config_section(runs)) is not None:
        top.append(differences)
    if findings.seeded:
        top += [
            configurations_section(findings.groups),
            final_mean_section(findings.groups),
            summary_section(findings.groups),
        ]
        if findings.pooled is not None:
            top.append(pooled_section(findings.pooled, findings.B))
    top, head = (top, []) if findings.seeded else ([], top)
    if any(run.has_qa for run in runs):  # QA sections only where some run was asked questions
        head.append(
            (
                "Final checkpoint",
                "EM of each run at its last checkpoint (Outdated: lower is better).",
                final_table(runs),
            )
        )
    for title, intro, table in (
        (
            "Continual-learning metrics",
            "docs/metrics.md#3-continual-learning-matrix at each run's final checkpoint.",
            continual_table(runs),
        ),
        (
            "Temporal metrics",
            "docs/metrics.md#4-paired-temporal-metrics, docs/metrics.md#5-timestamp-ablation over all temporal sets at each run's final checkpoint, with 95 % "
            "bootstrap intervals (pairs / questions resampled; reliance = true − shuffled, paired).",
            temporal_table(runs),
        ),
        ("Retrieval (open-book)", retrieval.open_book_intro(runs), retrieval.open_book_table(runs)),
        (
            "Time-sliced aggregates",
            "docs/metrics.md#9-time-sliced-perplexity (after TiC-LM): means of the train-step × eval-slice matrix "
            "over j < i (backward), j = i (in_dist) and j > i (forward); slice NLL in nats per loss token with "
            "95 % bootstrap intervals over the slices' examples and the perplexity exp(NLL); EM of the §3 "
            "matrices; regret = run − oracle over shared cells when `eval.oracle_run` was set.",
            timesliced.aggregates_table(runs),
        ),
        (
            "Knowledge year",
            "docs/metrics.md#14-knowledge-cutoff per checkpoint, where the run has the evidence: the year whose "
            "values the undated `year_resolved` answers pick most, with its 95 % bootstrap interval over facts; "
            "the cutoff slice of the held-out slice NLL against the last checkpoint (named by its time step), "
            "with its paired bootstrap interval over the slices' examples; or no cutoff found, with why.",
            knowledge.knowledge_table(runs),
        ),
        (
            "Compute",
            "docs/metrics.md#11-compute per trained step: real input tokens, loss tokens, optimizer steps, wall "
            "seconds, the training FLOPs estimate (4·N + 2·N_trainable)·T (= 6·N·T for full fine-tuning) and "
            "its running sum; the checkpoint's evaluation tokens (input positions) and seconds apart.",
            timesliced.compute_table(runs),
        ),
    ):
        if table:
            head.append((title, intro, table))
    head += metric_sections(runs)
    if findings.diffs is not None and any(run.has_qa for run in runs):
        head.append(diff_section(findings, note))
    tail = [step_mean_section(g) for g in findings.groups if findings.seeded and g.config is not None]
    tail += [
        (f"Per-step EM: {run.label}", f"`{relative(run.path, out_dir)}`", step_table(run)) for run in runs if run.has_qa
    ]
    return top, head, tail


def _ordered(figures, sections):
    """Comparison tables first (with seed groups: the across-seed tables and the band figure before them), then
    the figures, then the per-step tables."""
    top, head, tail = sections
    lead = figures[:1] if top else []
    return (
        [("table", s) for s in top]
        + [("figure", f) for f in lead]
        + [("table", s) for s in head]
        + [("figure", f) for f in figures[len(lead) :]]
        + [("table", s) for s in tail]
    )


def write_markdown(path: Path, headline: str, figures, sections) -> None:
    parts = ["# evolve-train report", "", headline, ""]
    for kind, item in _ordered(figures, sections):
        if kind == "figure":
            title, name = item
            parts += [f"## {title}", "", f"![{title}]({name})", ""]
        else:
            title, intro, (header, rows) = item
            parts += [f"## {title}", "", intro, "", markdown_table(header, rows), ""]
    path.write_text("\n".join(parts), encoding="utf-8")


CSS = (
    "body{font-family:system-ui,sans-serif;margin:24px;color:#222;background:#fff}"
    "table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #bbb;padding:3px 8px;"
    "text-align:left;font-size:13px}td.num{text-align:right;white-space:nowrap}th{background:#e8eef7}"
    "img{max-width:100%;border:1px solid #ddd;margin:6px 0 18px}h1{color:#1f4e79}"
)


def write_html(path: Path, out_dir: Path, headline: str, figures, sections) -> None:
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>evolve-train report</title>"
        f"<style>{CSS}</style></head><body><h1>evolve-train report</h1><p>{html.escape(headline)}</p>"
    ]
    for kind, item in _ordered(figures, sections):
        if kind == "figure":
            title, name = item
            data = base64.b64encode((out_dir / name).read_bytes()).decode("ascii")
            parts.append(
                f"<h2>{html.escape(title)}</h2><img alt='{html.escape(title)}' src='data:image/png;base64,{data}'>"
            )
        else:
            title, intro, (header, rows) = item
            intro_html = re.sub(r"`([^`]*)`", r"<code>\1</code>", html.escape(intro))
            parts.append(f"<h2>{html.escape(title)}</h2><p>{intro_html}</p>{html_table(header, rows)}")
    parts.append("</body></html>")
    path.write_text("\n".join(parts), encoding="utf-8")


def find(run_dirs: Iterable[Path | str], B: int = 2000, seed: int = 0, ci: bool = True) -> Findings:
    """Load and group the runs and compute every comparison; ReportError before anything is written."""
    runs = load_runs(run_dirs)
    groups = group_runs(runs)
    relabel(groups)
    findings = Findings(runs=runs, groups=groups, diffs=None, pooled=None, B=B)
    if ci and findings.seeded:
        findings.pooled = pooled_diffs(groups, B=B, seed=seed)
        findings.diffs = seed_pair_diffs(findings.pooled)
    elif ci:
        findings.diffs = compare_pairs(runs, B=B, seed=seed)
    return findings


def build_report(
    run_dirs: Iterable[Path | str], out_dir: Path | str, B: int = 2000, seed: int = 0, ci: bool = True
) -> dict:
    """Write the report; returns paths, the plotted series, the paired diffs and, with configurations run with
    several seeds, the groups and pooled diffs (for callers and tests)."""
    findings = find(run_dirs, B=B, seed=seed, ci=ci)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    drawn = make_plots(findings.runs, out_dir, findings.groups if findings.seeded else None)
    sections = build_sections(findings, check_same_columns(findings.runs), out_dir)
    write_markdown(out_dir / "report.md", findings.headline, drawn["figures"], sections)
    write_html(out_dir / "report.html", out_dir, findings.headline, drawn["figures"], sections)
    return {
        "html": out_dir / "report.html",
        "markdown": out_dir / "report.md",
        "runs": findings.runs,
        "groups": findings.groups,
        "diffs": findings.diffs,
        "pooled": findings.pooled,
        "series": drawn["series"],
        "figures": [out_dir / n for _, n in drawn["figures"]],
    }


def write_report(
    run_dirs: Iterable[Path | str], out_dir: Path | str, B: int = 2000, seed: int = 0, ci: bool = True
) -> Path:
    """Compare the runs in ``run_dirs`` (run dirs or sweep dirs) into ``out_dir``; returns ``report.html``.

    Raises ``ReportError`` (naming the dir/file/split) for an incomplete run dir or runs that were evaluated
    on different questions. ``ci=False`` skips the paired bootstrap (runs without prediction files).
    """
    return build_report(run_dirs, out_dir, B=B, seed=seed, ci=ci)["html"]
