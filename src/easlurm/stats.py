"""Campaign statistics: per-group mean, seeded bootstrap 95% CI, Mann-Whitney U between policies."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: What identifies a group of seeds: one experiment cell (scenario, policy label and load).
GROUP_KEYS = ("experiment", "scenario", "load_jobs_per_h", "label")


@dataclass(frozen=True)
class MetricSummary:
    """One metric over the seeds of one group; the CI is None with fewer than two values."""

    group: tuple[Any, ...]
    metric: str
    n: int
    mean: float | None
    std: float | None
    ci_low: float | None
    ci_high: float | None

    def as_dict(self) -> dict[str, Any]:
        d = dict(zip(GROUP_KEYS, self.group))
        d.update(metric=self.metric, n=self.n, mean=self.mean, std=self.std)
        d.update(ci_low=self.ci_low, ci_high=self.ci_high)
        return d


@dataclass(frozen=True)
class PairTest:
    """A two-sided Mann-Whitney U test of one metric between two policy labels of the same cell."""

    cell: tuple[Any, ...]  # GROUP_KEYS without the label
    metric: str
    label_a: str
    label_b: str
    n_a: int
    n_b: int
    u: float
    p_value: float
    #: Wilcoxon signed-rank p on seed-paired values (same seed = same job stream), None when unpaired.
    p_paired: float | None = None
    median_diff: float | None = None

    def as_dict(self) -> dict[str, Any]:
        d = dict(zip(GROUP_KEYS[:-1], self.cell))
        d.update(metric=self.metric, label_a=self.label_a, label_b=self.label_b, n_a=self.n_a, n_b=self.n_b)
        d.update(u=self.u, p_value=self.p_value, p_paired=self.p_paired, median_diff=self.median_diff)
        return d


def finite(values: Sequence[Any]) -> np.ndarray:
    """The values that are present and finite (missing metrics are skipped, never read as 0)."""
    arr = np.array([v for v in values if v is not None], dtype=np.float64)
    return arr[np.isfinite(arr)]


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    *,
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile bootstrap CI of the mean, vectorised; the same seed gives the same interval."""
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        return None
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def group_rows(
    rows: Sequence[Mapping[str, Any]], keys: Sequence[str] = GROUP_KEYS
) -> dict[tuple[Any, ...], list[Mapping[str, Any]]]:
    """Rows by group key, groups in first-seen (plan) order."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row.get(k) for k in keys), []).append(row)
    return groups


def summarize(
    rows: Sequence[Mapping[str, Any]],
    metrics: Sequence[str],
    *,
    n_boot: int = 2000,
    seed: int = 0,
) -> list[MetricSummary]:
    """Mean, std and bootstrap CI of each metric in each group (experiment, scenario, load, label)."""
    out = []
    for group, members in group_rows(rows).items():
        for metric in metrics:
            x = finite([r.get(metric) for r in members])
            if x.size == 0:
                out.append(MetricSummary(group, metric, 0, None, None, None, None))
                continue
            ci = bootstrap_ci(x, n_boot=n_boot, seed=seed)
            std = float(x.std(ddof=1)) if x.size > 1 else None
            out.append(
                MetricSummary(group, metric, int(x.size), float(x.mean()), std, *(ci if ci else (None, None)))
            )
    return out


def pairwise_mann_whitney(rows: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> list[PairTest]:
    """Mann-Whitney U between each pair of labels in each cell, for each metric (two-sided).

    Policies of one cell see the same job stream for the same seed, so a seed-paired Wilcoxon test is
    added where both labels have values for the same seeds: it detects smaller differences."""
    from scipy.stats import mannwhitneyu

    out = []
    by_cell = group_rows(rows, GROUP_KEYS[:-1])
    for cell, members in by_cell.items():
        labels = list(dict.fromkeys(str(r.get("label")) for r in members))
        for metric in metrics:
            by_seed = {lab: _by_seed(members, lab, metric) for lab in labels}
            samples = {lab: np.array(list(v.values()), dtype=np.float64) for lab, v in by_seed.items()}
            for a, b in itertools.combinations(labels, 2):
                xa, xb = samples[a], samples[b]
                if xa.size == 0 or xb.size == 0:
                    continue
                if np.all(xa == xa[0]) and np.all(xb == xa[0]):
                    u, p = xa.size * xb.size / 2.0, 1.0  # identical samples: no evidence of a difference
                else:
                    res = mannwhitneyu(xa, xb, alternative="two-sided")
                    u, p = float(res.statistic), float(res.pvalue)
                p_paired, median = _paired(by_seed[a], by_seed[b])
                out.append(PairTest(cell, metric, a, b, int(xa.size), int(xb.size), u, p, p_paired, median))
    return out


def _by_seed(members: Sequence[Mapping[str, Any]], label: str, metric: str) -> dict[Any, float]:
    """A label's finite values keyed by seed (rows without a seed get their position)."""
    out: dict[Any, float] = {}
    for i, r in enumerate(m for m in members if m.get("label") == label):
        v = r.get(metric)
        if v is not None and math.isfinite(float(v)):
            out[r.get("seed", ("row", i))] = float(v)
    return out


def _paired(a: Mapping[Any, float], b: Mapping[Any, float]) -> tuple[float | None, float | None]:
    """(Wilcoxon signed-rank p, median of a - b) over the seeds both have; None with fewer than 2."""
    from scipy.stats import wilcoxon

    common = [s for s in a if s in b]
    if len(common) < 2:
        return None, None
    d = np.array([a[s] - b[s] for s in common])
    median = float(np.median(d))
    if np.all(d == 0):
        return 1.0, median
    # exact for small samples without ties or zeros; otherwise the normal approximation, never scipy's
    # permutation fallback (a thousand times slower, and campaigns run thousands of tests)
    nz = np.abs(d[d != 0])
    exact = nz.size == d.size and np.unique(nz).size == nz.size and d.size <= 50
    return float(wilcoxon(d, method="exact" if exact else "approx").pvalue), median


def mean_of(summaries: Sequence[MetricSummary], metric: str, **where: Any) -> MetricSummary | None:
    """The summary of `metric` whose group matches `where` (keys from GROUP_KEYS; absent keys match all)."""
    idx = {k: i for i, k in enumerate(GROUP_KEYS)}
    for s in summaries:
        if s.metric != metric:
            continue
        if all(_same(s.group[idx[k]], v) for k, v in where.items()):
            return s
    return None


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, int | float):
        return math.isclose(a, b)
    return bool(a == b)
