"""The report's open-book part (rows of group ``retrieval``, docs/metrics.md#10-open-book-evaluation): closed vs open EM per split over
checkpoints (one panel per split kind and one over Unchanged + New + Updated), and a table per eval set and
checkpoint with 95 % intervals.

Per panel and run: ``closed`` (EM of the checkpoint, closed book), ``open`` (the checkpoint with the passages
of its store), ``initial + retrieval`` (the model before training asked at step i's store, drawn at i: the
retriever-only arm) and ``recall@k`` (a gold alias in the retrieved passages: what a perfect reader could
reach). Split kinds with one set per step (New_k, Updated_k, Outdated_k) are pooled over the sets a checkpoint
is asked, weighted by their questions.
"""

from __future__ import annotations

from typing import Optional

from evolve_train.evaluation.rows import ALL, SPLIT_ORDER, Run, checkpoint_label, column_key

GROUP = "retrieval"
PANELS = (*SPLIT_ORDER, ALL)
ARMS = (
    ("closed", "em", "-", "o"),
    ("open", "em_open", "--", "s"),
    ("initial + retrieval", "em_open", ":", "^"),
    ("recall@k", "recall@k", "-.", "x"),
)
"""(label, row metric, line style, marker) of each line drawn per run."""


def open_book_rows(run: Run) -> list[dict]:
    """The run's open-book rows of split sets (not the paired ones)."""
    return [r for r in run.group_rows(GROUP) if r.get("set") in PANELS]


def has_open_book(runs: list[Run]) -> bool:
    return any(open_book_rows(run) for run in runs)


def pooled(rows: list[dict], kind: str, metric: str) -> Optional[float]:
    """Item-weighted mean of ``metric`` over the rows of split ``kind`` (``all``: its own row)."""
    chosen = [r for r in rows if r.get("set") == kind and r.get(metric) is not None and r.get("n")]
    total = sum(r["n"] for r in chosen)
    return sum(r[metric] * r["n"] for r in chosen) / total if total else None


def arm_series(run: Run, kind: str, arm: str, metric: str) -> tuple[list[int], list[float]]:
    """(x, y) of one line: trained checkpoints at their own store, or the initial model at each store."""
    rows = open_book_rows(run)
    initial = arm == "initial + retrieval"
    keys = sorted({r["store"] for r in rows if (r["checkpoint"] < 0) == initial})
    points = []
    for key in keys:
        at = [r for r in rows if r["store"] == key and (r["checkpoint"] < 0) == initial]
        value = pooled(at, kind, metric)
        if value is not None:
            points.append((key, value))
    return [x for x, _ in points], [y for _, y in points]


def scope_of(runs: list[Run]) -> str:
    return next((str(r.get("scope")) for run in runs for r in open_book_rows(run)), "all")


def plot_open_book(runs: list[Run], path) -> dict:
    """Closed vs open EM per split over checkpoints; returns ``{panel: {line label: (xs, ys)}}`` as drawn."""
    from evolve_train.reporting.plots import _read_back, _save, checkpoint_label, plt

    kinds = [k for k in PANELS if any(pooled(open_book_rows(run), k, "em_open") is not None for run in runs)]
    cols = 3
    nrows = (len(kinds) + 1 + cols - 1) // cols  # one more cell: the legend
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.3 * nrows), squeeze=False)
    cells = [ax for row in axes for ax in row]
    panels = {}
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, kind in zip(cells, kinds):
        for n, run in enumerate(runs):
            for label, metric, style, marker in ARMS:
                xs, ys = arm_series(run, kind, label, metric)
                if xs:
                    name = label if len(runs) == 1 else f"{run.label} {label}"
                    ax.plot(
                        xs,
                        ys,
                        linestyle=style,
                        marker=marker,
                        color=colors[n % len(colors)],
                        label=name,
                        alpha=0.55 if label == "recall@k" else 1.0,
                    )
        ticks = sorted({int(x) for line in ax.get_lines() for x in line.get_xdata()})
        ax.set_xticks(ticks, [checkpoint_label(k) for k in ticks])
        hint = " (stale answer: lower is better)" if kind == "outdated" else ""
        ax.set_title(("Unchanged + New + Updated" if kind == ALL else kind) + hint, fontsize=10)
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("checkpoint i (store: steps <= i)" if scope_of(runs) == "all" else "checkpoint i (store: step i)")
        ax.set_ylabel("EM")
        ax.grid(alpha=0.3)
        panels[kind] = ax
    for ax in cells[len(kinds) :]:
        ax.axis("off")
    if kinds and len(cells) > len(kinds):
        lines = panels[kinds[0]].get_lines()
        cells[len(kinds)].legend(
            lines,
            [line.get_label() for line in lines],
            loc="center",
            fontsize=9,
            title="initial + retrieval: the model before\ntraining at the store of step i",
            title_fontsize=8,
        )
    fig.suptitle("Closed-book vs open-book EM per split (BM25 over the snapshots seen so far)")
    fig.tight_layout()
    drawn = _read_back(panels)
    _save(fig, path)
    return drawn


def _cell(row: Optional[dict], metric: str) -> str:
    if row is None or row.get(metric) is None:
        return "–"
    ci = row.get(f"{metric}_ci")
    sign = "+" if metric == "gap" else ""
    return f"{row[metric]:{sign}.3f}" + (f" [{ci[0]:{sign}.3f}, {ci[1]:{sign}.3f}]" if ci else "")


def open_book_table(runs: list[Run]) -> Optional[tuple[list[str], list[list[str]]]]:
    """Per run, checkpoint and eval set: closed EM, open EM, their paired gap, recall@k (each with its 95 %
    interval) and the model before training at the same store; None without open-book rows."""
    out = []
    for run in runs:
        rows = open_book_rows(run)
        trained = sorted(
            (r for r in rows if r["checkpoint"] >= 0),
            key=lambda r: (r["checkpoint"], r["set_name"] == ALL, column_key(r["set_name"])),
        )
        initial = {(r["store"], r["set_name"]): r for r in rows if r["checkpoint"] < 0}
        for r in trained:
            base = initial.get((r["store"], r["set_name"]))
            out.append(
                [
                    run.label,
                    str(r["checkpoint"]),
                    str(r["set_name"]),
                    str(r.get("n")),
                    _cell(r, "em"),
                    _cell(r, "em_open"),
                    _cell(r, "gap"),
                    _cell(r, "recall@k"),
                    _cell(base, "em_open"),
                ]
            )
        for (store, name), base in sorted(
            initial.items(), key=lambda kv: (kv[0][0], kv[0][1] == ALL, column_key(kv[0][1]))
        ):
            if not any(r["store"] == store for r in trained):  # no trained checkpoint at this store
                out.append(
                    [
                        run.label,
                        f"{checkpoint_label(-1)} @ {store}",
                        str(name),
                        str(base.get("n")),
                        _cell(base, "em"),
                        "–",
                        "–",
                        _cell(base, "recall@k"),
                        _cell(base, "em_open"),
                    ]
                )
    header = [
        "run",
        "checkpoint",
        "eval set",
        "n",
        "closed EM [95% CI]",
        "open EM [95% CI]",
        "open − closed [95% CI]",
        "recall@k [95% CI]",
        "initial + retrieval EM [95% CI]",
    ]
    return (header, out) if out else None


def open_book_intro(runs: list[Run]) -> str:
    rows = [r for run in runs for r in open_book_rows(run)]
    scope, k = scope_of(runs), (rows[0].get("k") if rows else "?")
    return (
        f"docs/metrics.md#10-open-book-evaluation: BM25 top {k} passages (scope `{scope}`: the store of checkpoint i holds steps "
        f"{'<= i' if scope == 'all' else 'i only'}) before the question; open − closed is the paired "
        "bootstrap difference over the same questions; `initial + retrieval` is the model before any training "
        "at the same store (the retriever-only arm). Outdated: lower is better. 95 % bootstrap intervals "
        "over questions."
    )
