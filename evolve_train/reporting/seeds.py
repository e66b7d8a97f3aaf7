"""Seeds in the report: runs that differ only by seed form a configuration; mean and 95% CI across seeds;
paired differences between configurations pooled over seeds.

**Grouping.** A run's configuration is its saved Hydra config (``<run_dir>/.hydra/config.yaml``) without
the keys that do not change results (:data:`NON_RESULT_KEYS`: ``seed``, ``hydra.*`` and the keys a run may
change on resume, ``training/identity.py: MAY_DIFFER_ON_RESUME`` — ``logger.*``, ``run_dir``, ``resume``,
``eval.batch_size``, ``trainer.num_threads``, cache locations, ...), interpolations resolved where they can be. Runs with equal
configurations are one group. A run without a saved config (``train(cfg)`` called from Python) is a
group of its own, labelled as before.

**Names.** A group is named by the command-line overrides (``.hydra/overrides.yaml``, the same keys
removed) that differ between the groups, e.g. ``method=lora`` or ``method=lora,trainer.lr=0.001``; when
overrides do not tell the groups apart, by the differing config values; a lone group by its method.

**Across seeds.** Per eval set and checkpoint: the mean of the seeds' EM and the 95% Student
t-interval ``mean ± t(0.975, n − 1) · s / √n`` (``s``: sample standard deviation over the n seeds; none
when n = 1).

**Between configurations.** For groups A and B and every seed both ran, the paired difference
EM(A, seed) − EM(B, seed) over the same questions (:func:`evolve_train.evaluation.compare.paired_diffs`, the
comparison of ``evolve-gate``), per eval set and ``all``; then the mean over those seeds and its t-interval
with n − 1 degrees of freedom (seeds are the replicates; the items' sampling noise is inside each seed's
difference). With a single shared seed, that seed's paired bootstrap over items is shown instead.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any, Optional

from evolve_train.evaluation.compare import PairedDiff, paired_diffs
from evolve_train.evaluation.rows import Run
from evolve_train.training.identity import MAY_DIFFER_ON_RESUME

NON_RESULT_KEYS = ("seed", "hydra", *MAY_DIFFER_ON_RESUME)
"""Config keys (and their subtrees) that never change a run's results: ignored when grouping seeds (the seed,
Hydra's own settings, and the keys a run may change on resume: ``training/identity.py``)."""
MAX_NAME_KEYS = 4


def _excluded(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in NON_RESULT_KEYS)


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a.b.c": leaf}`` of a nested dict (lists are leaves)."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out.update(flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def saved_config(run_dir: Path) -> Optional[dict[str, Any]]:
    """The run's saved Hydra config, flattened, without :data:`NON_RESULT_KEYS`; None when it has none."""
    path = Path(run_dir) / ".hydra" / "config.yaml"
    if not path.is_file():
        return None
    from omegaconf import OmegaConf

    node = OmegaConf.load(path)
    try:
        plain = OmegaConf.to_container(node, resolve=True)
    except Exception:  # noqa: BLE001  (an interpolation only Hydra's app can resolve: compare it as written)
        plain = OmegaConf.to_container(node, resolve=False)
    return {k: v for k, v in flatten(plain).items() if not _excluded(k)}


def saved_overrides(run_dir: Path) -> Optional[dict[str, str]]:
    """``{key: value}`` of the run's command-line overrides (``.hydra/overrides.yaml``), non-result keys
    removed; None when there is no such file."""
    path = Path(run_dir) / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return None
    import yaml

    out = {}
    for text in yaml.safe_load(path.read_text(encoding="utf-8")) or []:
        key, _, value = str(text).partition("=")
        key = key.lstrip("+~")
        if not _excluded(key):
            out[key] = value
    return out


@dataclass
class SeedStats:
    """Mean and 95% t-interval of one value across seeds (no interval for n < 2)."""

    mean: Optional[float]
    low: Optional[float]
    high: Optional[float]
    n: int

    def text(self, digits: int = 3) -> str:
        if self.mean is None:
            return "-"
        if self.low is None:
            return f"{self.mean:.{digits}f}"
        return f"{self.mean:.{digits}f} ± {(self.high - self.low) / 2:.{digits}f}"


def t_interval(values: list[float]) -> SeedStats:
    """Mean and the 95% Student t-interval (n − 1 degrees of freedom) of ``values`` (None values dropped)."""
    values = [float(v) for v in values if v is not None]
    n = len(values)
    if n == 0:
        return SeedStats(None, None, None, 0)
    mean = sum(values) / n
    if n == 1:
        return SeedStats(mean, None, None, 1)
    from scipy import stats

    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return SeedStats(mean, mean - half, mean + half, n)


@dataclass
class RunGroup:
    """Runs of one configuration (differing only by seed), in seed order."""

    runs: list[Run]
    config: Optional[dict[str, Any]]
    overrides: Optional[dict[str, str]] = None
    name: str = ""

    @property
    def seeds(self) -> list:
        return [run.seed for run in self.runs]

    @property
    def columns(self) -> list[str]:
        return list(dict.fromkeys(c for run in self.runs for c in run.columns))

    @property
    def checkpoints(self) -> list[int]:
        return sorted({k for run in self.runs for k in run.checkpoints})

    def stats(self, checkpoint: int, column: str, metric: str = "em") -> SeedStats:
        return t_interval([run.cell(checkpoint, column, metric) for run in self.runs])

    def final_checkpoint(self) -> int:
        return max(run.final_checkpoint for run in self.runs)

    def by_seed(self) -> dict:
        """seed -> the group's (first) run with that seed."""
        out: dict = {}
        for run in self.runs:
            out.setdefault(run.seed, run)
        return out


def _seed_order(run: Run) -> tuple:
    return (0, run.seed, "") if isinstance(run.seed, int) else (1, 0, str(run.seed))


def group_runs(runs: list[Run]) -> list[RunGroup]:
    """Runs grouped by configuration (see the module docstring), in order of first appearance, named."""
    groups: dict[str, RunGroup] = {}
    for run in runs:
        config = saved_config(run.path)
        key = json.dumps(config, sort_keys=True, default=str) if config is not None else f"run:{run.path}"
        if key not in groups:
            groups[key] = RunGroup(runs=[], config=config, overrides=saved_overrides(run.path))
        groups[key].runs.append(run)
    for group in groups.values():
        group.runs.sort(key=_seed_order)
    named = list(groups.values())
    name_groups(named)
    return named


def _differing(per_group: list[dict[str, Any]]) -> list[str]:
    keys = sorted({k for entries in per_group for k in entries})
    return [k for k in keys if len({json.dumps(e.get(k, "<absent>"), default=str) for e in per_group}) > 1]


def _names(per_group: list[dict[str, Any]]) -> list[str]:
    keys = _differing(per_group)
    names = []
    for entries in per_group:
        shown = [
            f"{k}={entries[k] if isinstance(entries.get(k), str) else json.dumps(entries.get(k))}"
            for k in keys
            if k in entries
        ]
        more = len(shown) - MAX_NAME_KEYS
        names.append(",".join(shown[:MAX_NAME_KEYS]) + (f",+{more} more" if more > 0 else ""))
    return names


def name_groups(groups: list[RunGroup]) -> None:
    """Set each group's name (see the module docstring); unique among the groups."""
    configured = [g for g in groups if g.config is not None]
    for group in groups:
        if group.config is None:
            group.name = group.runs[0].label or str(group.runs[0].path)
    if len(configured) == 1:
        configured[0].name = f"method={configured[0].runs[0].method}"
    elif configured:
        names = []
        if all(g.overrides is not None for g in configured):
            names = _names([g.overrides for g in configured])
        if not names or not all(names) or len(set(names)) < len(names):
            names = _names([g.config for g in configured])
        for group, name in zip(configured, names):
            group.name = name
    taken: dict[str, int] = {}
    for group in groups:
        taken[group.name] = taken.get(group.name, 0) + 1
        if taken[group.name] > 1:
            group.name = f"{group.name} ({taken[group.name]})"


def relabel(groups: list[RunGroup]) -> None:
    """Run labels ``<group>/seed<seed>`` when some group holds several seeds, or when several configurations share
    a method and seed (arms of one method told apart by their overrides, e.g. ``data.mix_ratio=0.25,method=full``,
    rather than by their run dirs); else labels stay as they are."""
    plain = [(run.method, run.seed) for group in groups for run in group.runs]
    if not has_seed_groups(groups) and len(set(plain)) == len(plain):
        return
    for group in groups:
        if group.config is not None:
            for run in group.runs:
                run.label = f"{group.name}/seed{run.seed}"


def has_seed_groups(groups: list[RunGroup]) -> bool:
    """True when at least one configuration was run with more than one seed."""
    return any(len(g.runs) > 1 for g in groups)


@dataclass
class PooledDiff:
    """EM(A) − EM(B) on one eval set (or ``all``), pooled over the seeds both configurations ran."""

    group_a: str
    group_b: str
    column: str
    seeds: list
    diff: float
    ci_low: Optional[float]
    ci_high: Optional[float]
    how: str
    per_seed: list[PairedDiff] = field(default_factory=list)

    @property
    def significant(self) -> bool:
        return self.ci_low is not None and (self.ci_low > 0 or self.ci_high < 0)


def _pool(a: RunGroup, b: RunGroup, column: str, seeds: list, per_seed: list[PairedDiff]) -> PooledDiff:
    if len(per_seed) == 1:
        only = per_seed[0]
        return PooledDiff(
            a.name,
            b.name,
            column,
            seeds,
            only.diff,
            only.ci_low,
            only.ci_high,
            f"1 seed: paired bootstrap over items (B={only.B})",
            per_seed,
        )
    stats = t_interval([d.diff for d in per_seed])
    return PooledDiff(
        a.name,
        b.name,
        column,
        seeds,
        stats.mean,
        stats.low,
        stats.high,
        f"{len(per_seed)} seeds: mean, t-interval (dof {len(per_seed) - 1})",
        per_seed,
    )


def pooled_pair(a: RunGroup, b: RunGroup, B: int = 2000, seed: int = 0) -> list[PooledDiff]:
    """Groups a vs b over their shared seeds, per eval set both evaluated in every seed, then ``all``."""
    runs_a, runs_b = a.by_seed(), b.by_seed()
    seeds = [s for s in runs_a if s in runs_b]
    per_seed = {s: {d.column: d for d in paired_diffs(runs_a[s], runs_b[s], B=B, seed=seed)} for s in seeds}
    if not seeds:
        return []
    columns = [c for c in per_seed[seeds[0]] if all(c in per_seed[s] for s in seeds)]
    return [_pool(a, b, column, seeds, [per_seed[s][column] for s in seeds]) for column in columns]


def pooled_diffs(groups: list[RunGroup], B: int = 2000, seed: int = 0) -> list[PooledDiff]:
    """:func:`pooled_pair` of every pair of groups (the earlier group is ``a``)."""
    return [d for a, b in combinations(groups, 2) for d in pooled_pair(a, b, B=B, seed=seed)]


def seed_pair_diffs(pooled: list[PooledDiff]) -> list[PairedDiff]:
    """The per-seed comparisons behind ``pooled``: per pair of groups, seed by seed, every eval set."""
    out = []
    pairs = list(dict.fromkeys((d.group_a, d.group_b) for d in pooled))
    for pair in pairs:
        rows = [d for d in pooled if (d.group_a, d.group_b) == pair]
        for index in range(len(rows[0].per_seed)):
            out += [d.per_seed[index] for d in rows]
    return out


__all__ = [
    "NON_RESULT_KEYS",
    "PooledDiff",
    "RunGroup",
    "SeedStats",
    "group_runs",
    "has_seed_groups",
    "name_groups",
    "pooled_diffs",
    "pooled_pair",
    "relabel",
    "saved_config",
    "saved_overrides",
    "seed_pair_diffs",
    "t_interval",
]
