"""Which year does a checkpoint know? Knowledge-cutoff estimates with bootstrap intervals
(docs/metrics.md#14-knowledge-cutoff). numpy only.

Two kinds of evidence:

* **A loss matrix over time slices** (:func:`slice_cutoff`): per row (a checkpoint or a model) a loss per slice,
  slices in time order. The cutoff slice is the one before the largest increase of loss between consecutive
  slices, taken on the loss minus a reference row's loss when a reference is given (e.g. the last checkpoint
  or the most recent model: what is left is what the row has not learned), on the raw loss without one.
  :func:`slice_cutoff` picks the rule: the largest jump (:func:`jump_cutoff`, the default, :data:`DEFAULT_RULE`)
  or the hinge (:func:`hinge_cutoff`: a free level up to the cutoff slice, a linear rise over slice time after
  it, fitted to every slice by weighted least squares; found when it beats no change by BIC).
  :func:`pooled_jump_cutoff` takes several domains of one model at once (the sum of standardised jumps).
* **Dated answers** (:func:`answer_year` and :func:`current_value_year`): per fact and prompt, the start year
  of the value the model gave and whether it is the fact's current value.

Intervals are percentile intervals (2.5th / 97.5th, docs/metrics.md#8-statistics-and-hygiene) of a bootstrap:
over documents when per-document losses are given (paired with the reference's documents when both rows score
the same documents), else a normal draw per cell from the slice's standard error over its items (the
aggregate form of the same bootstrap), over facts for dated answers.

"No cutoff found" (``estimate`` None, with ``reason``) for the largest jump when the change does not stand out:
the one-sided lower bootstrap bound of the change at the chosen position, Bonferroni-corrected for having
picked the largest of ``m`` candidate positions (quantile 0.025 / m), is not above ``min_change`` (0). Without
any noise estimate the point change must be above ``min_change``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Iterable, Optional, Sequence

import numpy as np

from evolve_train.data.evidence import DatedAnswer, Label, LossMatrix, LossRow  # noqa: F401  (re-exported)


JUMP = "loss_jump"
JUMP_REFERENCE = "loss_jump_vs_reference"
HINGE = "loss_hinge"
HINGE_REFERENCE = "loss_hinge_vs_reference"
RULES = ("hinge", "jump")
DEFAULT_RULE = "jump"
"""The rule :func:`slice_cutoff` uses when none is named (docs/results/knowledge_cutoff.md says why)."""
MIN_HINGE_SLICES = 4
"""Below this many slices the hinge leaves no residual to compare and the largest-jump rule decides."""
ANSWER_MODE = "answered_year_mode"
CURRENT_STEP = "current_value_step"
RESOLVED = "undated_share_argmax"

OVER_DOCUMENTS = "documents"
OVER_DOCUMENTS_PAIRED = "documents (paired with the reference)"
OVER_ITEMS = "slice items (normal draw from each slice's standard error)"
OVER_FACTS = "facts"
OVER_NOTHING = "none (no per-document losses or standard errors)"


@dataclass(frozen=True)
class CutoffEstimate:
    """One knowledge-cutoff estimate. ``estimate`` None means no cutoff found (``reason`` says why)."""

    estimate: Optional[Label]
    """The cutoff slice's label, or the year."""
    lo: Optional[Label]
    hi: Optional[Label]
    """The 95 % bootstrap interval of the estimate (None without a bootstrap or without an estimate)."""
    method: str
    n: int
    """Evidence: documents (or items) over all slices, or facts."""
    reason: str
    change: Optional[float] = None
    """The loss jump (or the drop in the share of current values) at the chosen position."""
    change_lo: Optional[float] = None
    """Its Bonferroni-corrected one-sided lower bootstrap bound (the rule above)."""
    before: Optional[Label] = None
    after: Optional[Label] = None
    """The two slices (years) between which the change is (the mode year as ``before`` for the mode), set
    also when no cutoff is found: the position that was tested."""
    over: str = OVER_NOTHING
    """What the bootstrap resampled."""
    criterion: Optional[float] = None
    """The hinge rule's BIC margin over no change (> 0: a cutoff); None for the other rules."""

    @property
    def found(self) -> bool:
        return self.estimate is not None


def _interval(draws: Sequence[int]) -> tuple[int, int]:
    """2.5th / 97.5th percentiles of the draws, as :func:`~.stats.bootstrap_ci_bounds` takes them."""
    ordered = sorted(int(d) for d in draws)
    return ordered[int(len(ordered) * 0.025)], ordered[int(len(ordered) * 0.975) - 1]


def _lower_bound(draws: np.ndarray, m: int) -> float:
    """One-sided lower bootstrap bound at 0.025 / m (Bonferroni over ``m`` candidate positions)."""
    ordered = np.sort(draws)
    return float(ordered[int(len(ordered) * 0.025 / max(m, 1))])


def _gap(row: LossRow, reference: Optional[LossRow]) -> np.ndarray:
    return row.means - reference.means if reference is not None else row.means.copy()


def _paired(row: LossRow, reference: Optional[LossRow]) -> bool:
    if reference is None or reference.docs is None:
        return False
    return all(len(a) == len(b) for a, b in zip(row.docs, reference.docs))


def _document_draws(row: LossRow, reference: Optional[LossRow], B: int, rng) -> np.ndarray:
    """B × slices gaps recomputed from resampled documents (the same draw for both rows when paired)."""
    paired = _paired(row, reference)
    out = np.empty((B, len(row.docs)))
    for j, docs in enumerate(row.docs):
        picks = rng.integers(0, len(docs), size=(B, len(docs)))
        out[:, j] = docs[picks].mean(axis=1)
        if reference is not None:
            ref = reference.docs[j]
            ref_picks = picks if paired else rng.integers(0, len(ref), size=(B, len(ref)))
            out[:, j] -= ref[ref_picks].mean(axis=1)
    return out


def _stderr_draws(row: LossRow, reference: Optional[LossRow], B: int, rng) -> np.ndarray:
    """B × slices gaps with each cell drawn from N(mean, stderr²), rows independent (conservative for a gap
    over the same items, whose common difficulty would cancel)."""
    out = row.means + rng.standard_normal((B, len(row.means))) * row.stderr
    if reference is not None:
        out -= reference.means + rng.standard_normal((B, len(reference.means))) * reference.stderr
    return out


def _draws(row: LossRow, reference: Optional[LossRow], B: int, seed: int) -> tuple[Optional[np.ndarray], str]:
    rng = np.random.default_rng(seed)
    if row.docs is not None and (reference is None or reference.docs is not None):
        over = OVER_DOCUMENTS_PAIRED if _paired(row, reference) else OVER_DOCUMENTS
        return _document_draws(row, reference, B, rng), over
    if row.stderr is not None and (reference is None or reference.stderr is not None):
        return _stderr_draws(row, reference, B, rng), OVER_ITEMS
    return None, OVER_NOTHING


def _check_shape(row: LossRow, slices: Sequence[Label], reference: Optional[LossRow]) -> None:
    if len(slices) != len(row.means) or (reference is not None and len(reference.means) != len(slices)):
        raise ValueError(f"{len(slices)} slices but rows of {len(row.means)} values")


def slice_cutoff(
    row: LossRow,
    slices: Sequence[Label],
    reference: Optional[LossRow] = None,
    B: int = 2000,
    seed: int = 0,
    min_change: float = 0.0,
    rule: Optional[str] = None,
) -> CutoffEstimate:
    """The cutoff slice of ``row`` by ``rule`` (``"hinge"``: :func:`hinge_cutoff`; ``"jump"``:
    :func:`jump_cutoff`; None: :data:`DEFAULT_RULE`)."""
    rule = rule or DEFAULT_RULE
    if rule not in RULES:
        raise ValueError(f"rule {rule!r} is not one of {RULES}")
    if rule == "hinge":
        return hinge_cutoff(row, slices, reference, B=B, seed=seed)
    return jump_cutoff(row, slices, reference, B=B, seed=seed, min_change=min_change)


def jump_cutoff(
    row: LossRow,
    slices: Sequence[Label],
    reference: Optional[LossRow] = None,
    B: int = 2000,
    seed: int = 0,
    min_change: float = 0.0,
) -> CutoffEstimate:
    """The cutoff slice of ``row``: the slice before the largest consecutive increase of its loss (minus the
    reference's loss when given), with the interval and the rule of the module docstring."""
    method = JUMP_REFERENCE if reference is not None else JUMP
    n = row.n + (reference.n if reference is not None else 0)
    _check_shape(row, slices, reference)
    gap = _gap(row, reference)
    if len(slices) < 2 or not np.all(np.isfinite(gap)):
        return CutoffEstimate(None, None, None, method, n, "fewer than two slices with a finite loss")
    jumps = np.diff(gap)
    j = int(np.argmax(jumps))
    before, after, m = slices[j], slices[j + 1], len(jumps)
    draws, over = _draws(row, reference, B, seed)
    if draws is None:
        found = jumps[j] > min_change
        reason = "" if found else f"the largest jump {jumps[j]:.4g} is not above {min_change:g} (no noise estimate)"
        estimate = before if found else None
        return CutoffEstimate(estimate, None, None, method, n, reason, float(jumps[j]), None, before, after, over)
    boot_jumps = np.diff(draws, axis=1)
    low = _lower_bound(boot_jumps[:, j], m)
    if not low > min_change:
        reason = (
            f"the largest jump ({before} -> {after}: {jumps[j]:.4g}) has a lower bound {low:.4g} "
            f"<= {min_change:g}: no jump stands out from the bootstrap noise"
        )
        return CutoffEstimate(None, None, None, method, n, reason, float(jumps[j]), low, before, after, over)
    positions = np.argmax(boot_jumps, axis=1)
    lo, hi = _interval(positions.tolist())
    return CutoffEstimate(before, slices[lo], slices[hi], method, n, "", float(jumps[j]), low, before, after, over)


def pooled_jump_cutoff(
    evidence: Sequence[tuple[LossRow, Optional[LossRow]]],
    slices: Sequence[Label],
    B: int = 2000,
    seed: int = 0,
) -> CutoffEstimate:
    """One cutoff slice from several domains of evidence about one model (each a row, with its reference or
    None, over the same ``slices``): the slice before the largest sum over domains of the consecutive jumps,
    each jump divided by its bootstrap standard deviation (a domain whose slices are noisy weighs less; a
    domain where every slice differs in difficulty adds the same to every position). ``change`` is that sum
    (in standard deviations); the no-cutoff rule and the interval are :func:`jump_cutoff`'s on the sum."""
    if not evidence:
        raise ValueError("pooling needs at least one (row, reference) pair")
    refs = [ref is not None for _, ref in evidence]
    if any(refs) and not all(refs):
        raise ValueError("pool rows that all have a reference or none: a raw loss and a gap do not add up")
    method = (JUMP_REFERENCE if refs[0] else JUMP) + "_pooled"
    n = sum(row.n + (ref.n if ref is not None else 0) for row, ref in evidence)
    if len(slices) < 2 or B < 2:
        return CutoffEstimate(None, None, None, method, n, "fewer than two slices, or fewer than two resamples")
    total, boot_total, over = np.zeros(len(slices) - 1), np.zeros((B, len(slices) - 1)), OVER_NOTHING
    for d, (row, ref) in enumerate(evidence):
        _check_shape(row, slices, ref)
        draws, over = _draws(row, ref, B, seed + d)
        if draws is None:
            raise ValueError(f"{row.name}: pooling needs a noise estimate (per-document losses or standard errors)")
        boot_jumps = np.diff(draws, axis=1)
        sd = boot_jumps.std(axis=0, ddof=1)
        total += np.diff(_gap(row, ref)) / sd
        boot_total += boot_jumps / sd
    if not np.all(np.isfinite(total)):
        return CutoffEstimate(None, None, None, method, n, "a slice without a finite loss or spread", over=over)
    j = int(np.argmax(total))
    before, after = slices[j], slices[j + 1]
    low = _lower_bound(boot_total[:, j], len(total))
    if not low > 0:
        reason = f"the largest pooled jump ({before} -> {after}: {total[j]:.3g} sd) has a lower bound {low:.3g} <= 0"
        return CutoffEstimate(None, None, None, method, n, reason, float(total[j]), low, before, after, over)
    lo, hi = _interval(np.argmax(boot_total, axis=1).tolist())
    return CutoffEstimate(before, slices[lo], slices[hi], method, n, "", float(total[j]), low, before, after, over)


def slice_times(slices: Sequence[Label]) -> np.ndarray:
    """Each slice's time in years: ``YYYYMM`` -> y + (m - 1) / 12, ``YYYY`` -> y, a number as given; the
    positions 0, 1, ... when any label is none of these."""
    out = []
    for label in slices:
        text = str(label).strip()
        if isinstance(label, (int, float, np.integer, np.floating)) and not isinstance(label, bool):
            out.append(float(label))
        elif text.isdigit() and len(text) == 6 and 1 <= int(text[4:]) <= 12:
            out.append(int(text[:4]) + (int(text[4:]) - 1) / 12)
        elif text.isdigit() and len(text) == 4:
            out.append(float(text))
        else:
            return np.arange(len(slices), dtype=float)
    return np.asarray(out, dtype=float)


def _gap_stderr(row: LossRow, reference: Optional[LossRow]) -> Optional[np.ndarray]:
    """The standard error of each slice's gap (None without a noise estimate)."""
    if row.docs is not None and (reference is None or reference.docs is not None):
        if _paired(row, reference):
            diffs = [a - b for a, b in zip(row.docs, reference.docs)]
            return np.array([d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else np.nan for d in diffs])
        parts = [
            [d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else np.nan for d in r.docs] for r in (row, reference) if r
        ]
        return np.sqrt(np.sum(np.square(parts), axis=0))
    if row.stderr is not None and (reference is None or reference.stderr is not None):
        return np.sqrt(row.stderr**2 + (reference.stderr**2 if reference is not None else 0.0))
    return None


def _weights(se: Optional[np.ndarray], J: int) -> np.ndarray:
    """1 / se² scaled to mean 1 (1 everywhere without usable standard errors)."""
    if se is None or not np.all(np.isfinite(se)) or not np.all(se > 0):
        return np.ones(J)
    w = 1.0 / se**2
    return w / w.mean()


def hinge_fits(gaps: np.ndarray, times: np.ndarray, w: np.ndarray, step: bool = False) -> np.ndarray:
    """Weighted RSS of the hinge at each candidate k = 0 .. J-2 for each row of ``gaps`` (draws × J): inf
    where its slope is not above 0 (or, with ``step``, the step below 0)."""
    gaps = np.atleast_2d(gaps)
    root = np.sqrt(w)
    y = (gaps * root).T
    out = np.full((gaps.shape[0], len(times) - 1), np.inf)
    for k in range(len(times) - 1):
        columns = [np.ones_like(times), np.maximum(0.0, times - times[k])]
        if step:
            columns.insert(1, (times > times[k]).astype(float))
        X = np.stack(columns, axis=1) * root[:, None]
        coef = np.linalg.lstsq(X, y, rcond=None)[0]
        rss = np.sum((y - X @ coef) ** 2, axis=0)
        ok = coef[-1] > 1e-12
        if step:
            ok &= coef[1] >= 0
        out[ok, k] = rss[ok]
    return out


def _null_rss(gaps: np.ndarray, w: np.ndarray) -> np.ndarray:
    gaps = np.atleast_2d(gaps)
    mean = (gaps * w).sum(axis=1, keepdims=True) / w.sum()
    return ((gaps - mean) ** 2 * w).sum(axis=1)


def hinge_cutoff(
    row: LossRow,
    slices: Sequence[Label],
    reference: Optional[LossRow] = None,
    B: int = 2000,
    seed: int = 0,
    weighted: bool = True,
    times: Optional[Sequence[float]] = None,
    step: bool = False,
    test: bool = True,
) -> CutoffEstimate:
    """The cutoff slice of ``row`` by the hinge rule (docs/metrics.md#14-knowledge-cutoff): the last slice of a
    free level before a linear rise of the gap, fitted over every slice; found when it beats no change by BIC.
    ``weighted``, ``times`` (default :func:`slice_times`), ``step`` (a step plus the hinge) and ``test`` (False:
    no no-cutoff rule) give the variants measured beside it."""
    _check_shape(row, slices, reference)
    if len(slices) < MIN_HINGE_SLICES:
        return jump_cutoff(row, slices, reference, B=B, seed=seed)
    method = HINGE_REFERENCE if reference is not None else HINGE
    n = row.n + (reference.n if reference is not None else 0)
    gap = _gap(row, reference)
    if not np.all(np.isfinite(gap)):
        return CutoffEstimate(None, None, None, method, n, "a slice without a finite loss")
    t = slice_times(slices) if times is None else np.asarray(times, dtype=float)
    w = _weights(_gap_stderr(row, reference) if weighted else None, len(gap))
    rss = hinge_fits(gap, t, w, step)[0]
    null = float(_null_rss(gap, w)[0])
    draws, over = _draws(row, reference, B, seed)
    if not np.isfinite(rss).any() or null <= 1e-24 * max(1.0, float(np.sum(gap**2))):
        reason = "the gap is constant or never rises after a slice: no hinge"
        return CutoffEstimate(None, None, None, method, n, reason, over=over, criterion=None)
    k = int(np.argmin(rss))
    J, p = len(gap), 4 if step else 3
    margin = J * np.log(null / max(float(rss[k]), null * 1e-12)) - (p - 1) * np.log(J)
    slope = float(
        np.linalg.lstsq(
            np.stack([np.ones(J), np.maximum(0.0, t - t[k])], axis=1) * np.sqrt(w)[:, None],
            gap * np.sqrt(w),
            rcond=None,
        )[0][1]
    )
    before, after = slices[k], slices[k + 1]
    if test and not margin > 0:
        reason = f"the hinge after {before} does not beat no change by BIC (margin {margin:.3g} <= 0)"
        return CutoffEstimate(None, None, None, method, n, reason, slope, None, before, after, over, margin)
    lo = hi = None
    if draws is not None:
        boot = hinge_fits(draws, t, w, step)
        picks = np.argmin(boot, axis=1)[np.isfinite(boot).any(axis=1)]
        if len(picks):
            a, b = _interval(picks.tolist())
            lo, hi = slices[a], slices[b]
    return CutoffEstimate(before, lo, hi, method, n, "", slope, None, before, after, over, margin)


def matrix_cutoffs(
    matrix: LossMatrix, reference: Optional[str] = None, B: int = 2000, seed: int = 0, rule: Optional[str] = None
) -> dict[str, CutoffEstimate]:
    """:func:`slice_cutoff` of every row (the reference row itself included: its gap is 0, so none found)."""
    ref = matrix.row(reference) if reference is not None else None
    return {row.name: slice_cutoff(row, matrix.slices, ref, B=B, seed=seed, rule=rule) for row in matrix.rows}


def _by_fact(answers: Iterable[DatedAnswer]) -> dict[Hashable, list[DatedAnswer]]:
    facts: dict[Hashable, list[DatedAnswer]] = {}
    for answer in answers:
        facts.setdefault(answer.fact, []).append(answer)
    return facts


def _year_weights(facts: list[list[DatedAnswer]], years: list[int]) -> np.ndarray:
    """facts × years: each fact's weight 1 split equally over its answers with a year."""
    index = {y: k for k, y in enumerate(years)}
    out = np.zeros((len(facts), len(years)))
    for f, answers in enumerate(facts):
        dated = [a.year for a in answers if a.year is not None]
        for year in dated:
            out[f, index[year]] += 1.0 / len(dated)
    return out


def _mode_margin(shares: np.ndarray, mode: int) -> np.ndarray:
    """Share of the mode year minus the largest share of any other year (per bootstrap row)."""
    others = np.delete(shares, mode, axis=-1)
    return shares[..., mode] - (others.max(axis=-1) if others.shape[-1] else 0.0)


def answer_year(answers: Iterable[DatedAnswer], B: int = 2000, seed: int = 0) -> CutoffEstimate:
    """The year whose values the model gives most: the mode of the start years of the values given, each fact
    weighing 1 (split over its dated answers); a tie goes to no year. Found when the mode's share minus the
    runner-up's has a lower bound (0.025 / number of other years) above 0 under a bootstrap over facts."""
    facts = [a for a in _by_fact(answers).values() if any(x.year is not None for x in a)]
    if not facts:
        return CutoffEstimate(None, None, None, ANSWER_MODE, 0, "no answer with a dated value", over=OVER_FACTS)
    years = sorted({a.year for f in facts for a in f if a.year is not None})
    weights = _year_weights(facts, years)
    totals = weights.sum(axis=0)
    mode = int(np.argmax(totals))
    if np.sum(totals == totals[mode]) > 1:
        return CutoffEstimate(None, None, None, ANSWER_MODE, len(facts), "a tie between years", over=OVER_FACTS)
    rng = np.random.default_rng(seed)
    boot = weights[rng.integers(0, len(facts), size=(B, len(facts)))].sum(axis=1)
    low = _lower_bound(_mode_margin(boot, mode) / len(facts), max(len(years) - 1, 1))
    margin = float(_mode_margin(totals, mode)) / len(facts)
    if len(years) > 1 and not low > 0:
        reason = f"the mode year {years[mode]} does not stand out (margin {margin:.3g}, lower bound {low:.3g})"
        return CutoffEstimate(
            None, None, None, ANSWER_MODE, len(facts), reason, margin, low, years[mode], over=OVER_FACTS
        )
    lo, hi = _interval([years[k] for k in np.argmax(boot, axis=1)])
    return CutoffEstimate(years[mode], lo, hi, ANSWER_MODE, len(facts), "", margin, low, years[mode], over=OVER_FACTS)


def _latest_argmax(shares: np.ndarray) -> np.ndarray:
    """Per row, the index of the largest share, a tie going to the latest (NaN counts as lowest)."""
    filled = np.nan_to_num(np.atleast_2d(shares), nan=-np.inf)
    return filled.shape[1] - 1 - np.argmax(filled[:, ::-1], axis=1)


def resolved_year(matches: np.ndarray, years: Sequence[Label], B: int = 2000, seed: int = 0) -> CutoffEstimate:
    """The ``knowledge_year`` of ``year_resolved`` (docs/metrics.md#12-year-resolved-answers): ``matches`` is
    facts × years, 1 where a fact's undated answer gives that year's value, 0 where it does not, NaN where the
    fact held no value that year; the year with the highest share (a tie: the latest), its interval by a
    bootstrap over facts. No cutoff found without facts."""
    matches = np.asarray(matches, dtype=float).reshape(-1, len(years))
    if not len(matches) or not np.isfinite(matches).any():
        return CutoffEstimate(None, None, None, RESOLVED, 0, "no fact with two values", over=OVER_FACTS)
    held, hits = np.isfinite(matches).astype(float), np.nan_to_num(matches)

    def argmax(h: np.ndarray, m: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return _latest_argmax(m / h)

    k = int(argmax(held.sum(axis=0), hits.sum(axis=0))[0])
    picks = np.random.default_rng(seed).integers(0, len(matches), size=(B, len(matches)))
    counts = np.stack([np.bincount(row, minlength=len(matches)) for row in picks]) if B else np.zeros((0, 1))
    lo = hi = None
    if B:
        a, b = _interval(argmax(counts @ held, counts @ hits).tolist())
        lo, hi = years[a], years[b]
    share = float(hits[:, k].sum() / held[:, k].sum())
    return CutoffEstimate(years[k], lo, hi, RESOLVED, len(matches), "", share, None, years[k], over=OVER_FACTS)


def _current_outcomes(answers: Iterable[DatedAnswer]) -> tuple[np.ndarray, np.ndarray]:
    """(current value's start year, share of judged answers giving it) per fact with both."""
    years, shares = [], []
    for fact in _by_fact(answers).values():
        judged = [a.current for a in fact if a.current is not None]
        current_years = {a.current_year for a in fact if a.current_year is not None}
        if judged and len(current_years) == 1:
            years.append(current_years.pop())
            shares.append(float(np.mean(judged)))
    return np.asarray(years, dtype=int), np.asarray(shares, dtype=float)


def _step_drops(years: np.ndarray, shares: np.ndarray, cuts: np.ndarray, min_side: int) -> np.ndarray:
    """Per candidate cut c: mean share (years <= c) − mean share (years > c), NaN for a side under min_side."""
    out = np.full(len(cuts), np.nan)
    for k, cut in enumerate(cuts):
        left, right = shares[years <= cut], shares[years > cut]
        if len(left) >= min_side and len(right) >= min_side:
            out[k] = left.mean() - right.mean()
    return out


def _step_fit(years: np.ndarray, shares: np.ndarray, cuts: np.ndarray, min_side: int) -> tuple[int, np.ndarray]:
    """The least-squares single mean shift with the earlier mean higher: the cut maximising
    n_left·n_right/n · drop² over cuts with a positive drop (-1: none)."""
    drops = _step_drops(years, shares, cuts, min_side)
    n_left = np.array([np.sum(years <= c) for c in cuts])
    positive = np.isfinite(drops) & (drops > 0)
    gain = np.where(positive, n_left * (len(years) - n_left) / len(years) * np.nan_to_num(drops) ** 2, -np.inf)
    return (int(np.argmax(gain)) if np.isfinite(gain).any() else -1), drops


def current_value_year(
    answers: Iterable[DatedAnswer], B: int = 2000, seed: int = 0, min_side: int = 3
) -> CutoffEstimate:
    """The last year whose current values the model still gives: facts ordered by the start year of their
    current value, each scored by the share of its judged answers that give it; the cut of the least-squares
    single mean shift (higher before). ``after`` is the first year it stops giving current values. Found when
    the drop's lower bound (0.025 / number of cuts, bootstrap over facts) is above 0."""
    years, shares = _current_outcomes(answers)
    cuts = np.unique(years)[:-1] if len(years) else np.array([], dtype=int)
    cut, drops = _step_fit(years, shares, cuts, min_side)
    if cut < 0:
        reason = "no drop in the share of current values between two years (flat, empty or too few facts)"
        return CutoffEstimate(None, None, None, CURRENT_STEP, len(years), reason, over=OVER_FACTS)
    year, after = int(cuts[cut]), int(np.unique(years)[cut + 1])
    rng = np.random.default_rng(seed)
    boot_drops, boot_cuts = [], []
    for _ in range(B):
        pick = rng.integers(0, len(years), size=len(years))
        k, d = _step_fit(years[pick], shares[pick], cuts, min_side)
        boot_drops.append(d[cut] if np.isfinite(d[cut]) else 0.0)
        if k >= 0:
            boot_cuts.append(int(cuts[k]))
    low = _lower_bound(np.asarray(boot_drops), len(cuts))
    drop = float(drops[cut])
    if not low > 0 or not boot_cuts:
        reason = f"the drop after {year} ({drop:.3g}) has a lower bound {low:.3g} <= 0"
        return CutoffEstimate(None, None, None, CURRENT_STEP, len(years), reason, drop, low, year, after, OVER_FACTS)
    lo, hi = _interval(boot_cuts)
    return CutoffEstimate(year, lo, hi, CURRENT_STEP, len(years), "", drop, low, year, after, OVER_FACTS)


def _document_losses(items, i: int, slices: list[int]) -> Optional[list[np.ndarray]]:
    """Per-document mean NLL per loss token of checkpoint ``i`` on each slice (None when a slice is missing)."""
    row = (items or {}).get(i) or {}
    if any(j not in row for j in slices):
        return None
    out = []
    for j in slices:
        sums, tokens = (np.asarray(a, dtype=float) for a in row[j])
        keep = tokens > 0
        out.append(sums[keep] / tokens[keep])
    return out


def _timesliced_row(values: dict, i: int, slices: list[int], items) -> LossRow:
    docs = _document_losses(items, i, slices)
    return LossRow(str(i), np.array([values[j] for j in slices]), docs=docs)


def timesliced_rows(P, B: int = 2000, seed: int = 0, items=None, rule: Optional[str] = None) -> list[dict]:
    """Per-checkpoint estimate rows from a run's slice NLL matrix ``P[i][j]`` (docs/metrics.md#9-time-sliced-perplexity;
    ``summary.json`` ``timesliced.nll.P``), the last checkpoint as the reference: ``{"checkpoint", "cutoff_slice",
    "lo", "hi", "jump", "method", "reason"}`` (``jump``: the estimate's ``change``). With ``items``
    (``{i: {j: (per-document NLL sums, loss tokens)}}``, the documents in the same order at every checkpoint)
    the estimate is on per-document mean NLL with the paired bootstrap over documents; from ``P`` alone (means
    only) there is no interval. Slices a checkpoint lacks are left out of its row and the reference's."""
    rows = {int(i): {int(j): v for j, v in row.items() if v is not None} for i, row in P.items()}
    if not rows:
        return []
    items = {int(i): {int(j): cell for j, cell in row.items()} for i, row in (items or {}).items()}
    last = max(rows)
    out = []
    for i in sorted(rows):
        slices = sorted(set(rows[i]) & set(rows[last]))
        row, ref = _timesliced_row(rows[i], i, slices, items), _timesliced_row(rows[last], last, slices, items)
        if (row.docs is None) != (ref.docs is None):
            row, ref = LossRow(row.name, row.means), LossRow(ref.name, ref.means)
        est = slice_cutoff(row, slices, ref, B=B, seed=seed, rule=rule)
        if i == last:
            est = CutoffEstimate(None, None, None, est.method, est.n, "the reference itself (the last checkpoint)")
        out.append(
            {
                "checkpoint": i,
                "cutoff_slice": est.estimate,
                "lo": est.lo,
                "hi": est.hi,
                "jump": est.change,
                "method": est.method,
                "reason": est.reason,
            }
        )
    return out
