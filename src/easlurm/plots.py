"""PNG plots of campaign results (matplotlib's Figure API on Agg: no pyplot state, no display)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from easlurm.errors import EaslurmError
from easlurm.stats import MetricSummary

_DPI = 110

#: What a report says, in place of its plots, where matplotlib (the `plots` extra) is missing.
PLOTS_MISSING = "Plots left out: matplotlib is not installed (pip install 'easlurm[plots]')."


def available() -> bool:
    """Whether matplotlib can be imported: without it reports are written without plots."""
    try:
        import matplotlib.figure  # noqa: F401
    except ImportError:
        return False
    return True


def _figure(width: float = 7.0, height: float = 4.5) -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # plots are an optional extra
        raise EaslurmError("plots need matplotlib: pip install 'easlurm[plots]'") from exc
    return Figure(figsize=(width, height), layout="constrained")


def _save(fig: Any, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=_DPI)
    return out


def _err(s: MetricSummary) -> tuple[float, float]:
    """Distances from the mean to the CI bounds (0 when the CI is unknown)."""
    if s.mean is None or s.ci_low is None or s.ci_high is None:
        return 0.0, 0.0
    return max(s.mean - s.ci_low, 0.0), max(s.ci_high - s.mean, 0.0)


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats (higher throughput x and lower energy y), by x."""
    front = []
    for i, (x, y) in enumerate(points):
        dominated = any(
            (x2 >= x and y2 <= y) and (x2 > x or y2 < y) for j, (x2, y2) in enumerate(points) if j != i
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def same_point_labels(
    points: Sequence[tuple[float, float]], labels: Sequence[str]
) -> dict[tuple[float, float], list[str]]:
    """Labels grouped by point (equal to 4 significant digits), so identical results share one annotation."""
    groups: dict[tuple[float, float], list[str]] = {}
    keys: dict[tuple[str, str], tuple[float, float]] = {}
    for (x, y), label in zip(points, labels):
        key = (f"{x:.4g}", f"{y:.4g}")
        groups.setdefault(keys.setdefault(key, (x, y)), []).append(label)
    return groups


#: The smallest half-span of a Pareto axis, relative to its values: a gap below the runs' noise (a few
#: 0.01 % between policies) must not fill the whole axis and look like a result.
MIN_REL_HALF_SPAN = 0.02


def axis_limits(lo: float, hi: float, rel: float = MIN_REL_HALF_SPAN) -> tuple[float, float]:
    """Limits around [lo, hi] spanning at least +-`rel` of the larger magnitude (5 % margin otherwise),
    so that a tiny difference stays visibly tiny; +-1 around zero values."""
    center, half = (lo + hi) / 2.0, (hi - lo) / 2.0 * 1.05
    half = max(half, rel * max(abs(lo), abs(hi)))
    if half <= 0.0:
        half = 1.0
    return center - half, center + half


def plot_pareto(
    throughput: Sequence[MetricSummary], energy: Sequence[MetricSummary], out: Path, title: str
) -> Path | None:
    """Throughput (jobs/h) against energy (MJ; the summaries are in J) per policy, 95% CI bars, the Pareto
    front dashed; each axis spans at least +-2 % of its values (`axis_limits`)."""
    pairs = [(t, e) for t, e in zip(throughput, energy) if t.mean is not None and e.mean is not None]
    if not pairs:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    points = [(float(t.mean or 0.0), float(e.mean or 0.0) * 1e-6) for t, e in pairs]
    for (t, e), (x, y) in zip(pairs, points):
        xerr, yerr = np.array([_err(t)]).T, np.array([_err(e)]).T * 1e-6
        ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="o", capsize=3, label=str(t.group[-1]))
    for (x, y), names in same_point_labels(points, [str(t.group[-1]) for t, _ in pairs]).items():
        ax.annotate(", ".join(names), (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    front = pareto_front(points)
    if len(front) > 1:
        ax.plot(
            [points[i][0] for i in front], [points[i][1] for i in front], "k--", lw=1, label="Pareto front"
        )
    # the extent of every point with its CI bar, widened to the minimum span
    xs = [v for (t, _), (x, _) in zip(pairs, points) for v in (x - _err(t)[0], x + _err(t)[1])]
    ys = [v for (_, e), (_, y) in zip(pairs, points) for v in (y - _err(e)[0] * 1e-6, y + _err(e)[1] * 1e-6)]
    ax.set_xlim(*axis_limits(min(xs), max(xs)))
    ax.set_ylim(*axis_limits(min(ys), max(ys)))
    ax.set_xlabel("throughput (jobs/h)")
    ax.set_ylabel("energy (MJ)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, out)


def plot_bars(
    summaries: Sequence[MetricSummary], out: Path, title: str, ylabel: str, scale: float = 1.0
) -> Path | None:
    """One bar per policy label with its 95% CI (deadline misses, Jain's index...)."""
    present = [s for s in summaries if s.mean is not None]
    if not present:
        return None
    fig = _figure(max(5.0, 0.9 * len(present) + 2.0), 4.0)
    ax = fig.add_subplot()
    x = np.arange(len(present))
    means = np.array([float(s.mean or 0.0) for s in present]) * scale
    err = np.array([_err(s) for s in present]).T * scale
    bars = ax.bar(x, means, yerr=err, capsize=4, color="tab:blue", alpha=0.8)
    ax.bar_label(bars, fmt="%.3g", fontsize=8, padding=2)
    ax.set_xticks(x, [str(s.group[-1]) for s in present], rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, out)


def plot_stacked_bars(
    labels: Sequence[str], series: Mapping[str, Sequence[float]], out: Path, title: str, ylabel: str
) -> Path | None:
    """One stacked bar per label, one colour per series (parts of a whole, e.g. energy by cause)."""
    if not labels:
        return None
    fig = _figure(max(5.0, 0.8 * len(labels) + 2.5), 4.0)
    ax = fig.add_subplot()
    x = np.arange(len(labels))
    bottom = np.zeros(len(labels))
    for name, values in series.items():
        v = np.asarray(values, dtype=float)
        ax.bar(x, v, bottom=bottom, label=name, alpha=0.85)
        bottom += v
    ax.set_xticks(x, [str(lb) for lb in labels], rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, out)


def plot_vs_load(
    series: Mapping[str, Sequence[MetricSummary]], out: Path, title: str, ylabel: str, scale: float = 1.0
) -> Path | None:
    """A metric against the arrival rate, one line per policy label with its CI band."""
    fig = _figure()
    ax = fig.add_subplot()
    drawn = False
    for label, summaries in series.items():
        pts = sorted(
            (float(s.group[2]), s) for s in summaries if s.mean is not None and s.group[2] is not None
        )
        if not pts:
            continue
        x = np.array([p[0] for p in pts])
        y = np.array([float(p[1].mean or 0.0) for p in pts]) * scale
        lo = np.array([p[1].ci_low if p[1].ci_low is not None else p[1].mean for p in pts], float) * scale
        hi = np.array([p[1].ci_high if p[1].ci_high is not None else p[1].mean for p in pts], float) * scale
        ax.plot(x, y, "o-", label=label)
        ax.fill_between(x, lo, hi, alpha=0.15)
        drawn = True
    if not drawn:
        return None
    ax.set_xlabel("arrival rate (jobs/h)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, out)


def plot_power(
    series: Mapping[str, tuple[np.ndarray, np.ndarray]],
    out: Path,
    title: str,
    budget_w: float | None = None,
) -> Path | None:
    """Cluster power over time (one seed), one panel per policy so the curves stay readable, with the
    budget as a dotted line and the share of time above it in each panel's title."""
    drawn = {k: v for k, v in series.items() if len(v[0]) > 0}
    if not drawn:
        return None
    fig = _figure(8.0, 1.0 + 1.35 * len(drawn))
    axes = fig.subplots(len(drawn), 1, sharex=True, sharey=True, squeeze=False)[:, 0]
    for ax, (label, (t_s, p_w)) in zip(axes, drawn.items()):
        t: npt.NDArray[np.float64] = np.asarray(t_s, dtype=np.float64)
        p: npt.NDArray[np.float64] = np.asarray(p_w, dtype=np.float64)
        name = label
        if budget_w is not None:
            ax.axhline(budget_w, color="k", ls=":", lw=1.5)
            dt = np.diff(t)
            over = float(dt[p[:-1] > budget_w + 1e-6].sum() / dt.sum()) if dt.sum() > 0 else 0.0
            name = f"{label}: {100 * over:.0f}% of the time above {budget_w:.0f} W"
        t, p = _envelope(t, p)
        ax.step(t / 3600.0, p, where="post", lw=0.8, color="tab:blue")
        ax.set_title(name, fontsize=8, loc="left")
        ax.grid(alpha=0.3)
        ax.set_ylabel("W", fontsize=8)
    axes[-1].set_xlabel("simulated time (h)")
    fig.suptitle(title)
    return _save(fig, out)


def _envelope(
    t: npt.NDArray[np.float64], p: npt.NDArray[np.float64], max_points: int = 4000
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """A long step series reduced to per-bin maxima (peaks stay visible); short ones are left alone."""
    if t.size <= max_points:
        return t, p
    edges = np.linspace(t[0], t[-1], max_points // 2 + 1)
    idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, edges.size - 2)
    peak = np.full(edges.size - 1, -np.inf)
    np.maximum.at(peak, idx, p)
    low = np.full(edges.size - 1, np.inf)
    np.minimum.at(low, idx, p)
    keep = np.isfinite(peak)
    starts, peak, low = edges[:-1][keep], peak[keep], low[keep]
    half = np.diff(edges)[0] / 2
    return np.column_stack([starts, starts + half]).ravel(), np.column_stack([peak, low]).ravel()


def top_users(shares: Mapping[str, Mapping[str, float]], top: int = 10) -> dict[str, dict[str, float]]:
    """Per label, the shares of the `top` largest users (sorted) plus "others" for the rest."""
    users = sorted({u for s in shares.values() for u in s})
    if len(users) <= top:
        return {lab: {u: float(s.get(u, 0.0)) for u in users} for lab, s in shares.items()}
    biggest = sorted(users, key=lambda u: (-max(s.get(u, 0.0) for s in shares.values()), u))[:top]
    keep = set(biggest)
    out: dict[str, dict[str, float]] = {}
    for lab, s in shares.items():
        row = {u: float(s.get(u, 0.0)) for u in biggest}
        row[f"others ({len(users) - top})"] = float(sum(v for u, v in s.items() if u not in keep))
        out[lab] = row
    return out


def plot_user_shares(
    shares: Mapping[str, Mapping[str, float]], out: Path, title: str, top: int = 10
) -> Path | None:
    """Per-user share of GPU-seconds, grouped bars per policy label (allocation fairness).

    Past `top` users the largest `top` (by their largest share) are drawn and the rest summed as
    "others", so the bars and the legend stay readable at 90 users."""
    shares = top_users(shares, top)
    users = list(dict.fromkeys(u for s in shares.values() for u in s))
    if not users:
        return None
    labels = list(shares)
    fig = _figure(max(6.0, 1.2 * len(labels) + 2.0), 4.0)
    ax = fig.add_subplot()
    width = 0.8 / len(users)
    x = np.arange(len(labels))
    for k, user in enumerate(users):
        ax.bar(
            x + k * width - 0.4 + width / 2, [shares[lab].get(user, 0.0) for lab in labels], width, label=user
        )
    ax.set_xticks(x, labels, rotation=30, ha="right")
    ax.set_ylabel("share of GPU-seconds")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, ncol=min(len(users), 5))
    return _save(fig, out)


def plot_tradeoff(
    points: Mapping[str, tuple[tuple[float, float, float], tuple[float, float, float]]],
    sweep: Sequence[str],
    out: Path,
    title: str,
    marked: Mapping[str, str | None] | None = None,
) -> Path | None:
    """Energy per job (MJ; points in J) against mean JCT (s), one point per label with its seeds' 95% CI
    bars (points: label -> ((jct, low, high), (energy, low, high))); the `sweep` labels (a static-cap
    sweep, in order) joined as a curve, and the `marked` labels (name -> label) drawn apart."""
    if not points:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    marks = {lab: name for name, lab in (marked or {}).items() if lab in points}
    curve = [lab for lab in sweep if lab in points]
    if len(curve) > 1:
        ax.plot(
            [points[lab][0][0] for lab in curve],
            [points[lab][1][0] * 1e-6 for lab in curve],
            "-",
            color="0.5",
            lw=1,
            label="static-cap sweep",
        )
    styles = iter(("*", "D", "s", "P", "X"))
    xs, ys = [], []
    for lab, ((x, xlo, xhi), (y, ylo, yhi)) in points.items():
        xerr = np.array([[max(x - xlo, 0.0)], [max(xhi - x, 0.0)]])
        yerr = np.array([[max(y - ylo, 0.0)], [max(yhi - y, 0.0)]]) * 1e-6
        if lab in marks:
            fmt, size, name = next(styles, "o"), 11, f"{marks[lab]} ({lab})" if marks[lab] != lab else lab
        elif lab in curve:
            fmt, size, name = "o", 5, None
        else:
            fmt, size, name = "o", 7, lab
        extra = {"color": "0.45"} if lab in curve and lab not in marks else {}
        ax.errorbar(x, y * 1e-6, xerr=xerr, yerr=yerr, fmt=fmt, ms=size, capsize=3, label=name, **extra)
        if lab in curve and lab not in marks:
            ax.annotate(
                lab.replace("static-cap-", "cap "),
                (x, y * 1e-6),
                textcoords="offset points",
                xytext=(4, -10),
                fontsize=7,
                color="0.35",
            )
        xs += [xlo, xhi]
        ys += [ylo * 1e-6, yhi * 1e-6]
    ax.set_xlim(*axis_limits(min(xs), max(xs)))
    ax.set_ylim(*axis_limits(min(ys), max(ys)))
    ax.set_xlabel("mean JCT (s)")
    ax.set_ylabel("energy per completed job (MJ)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, out)
