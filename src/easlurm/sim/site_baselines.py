"""What a site does today without easlurm: `slurm`, the best `static-cap`, `slurm` with power saving.

A report compares every policy with three runs a site gets with no new software: Slurm's own schedule
(`slurm`), a site-wide GPU power cap (the sweep `static-cap-50` ... `static-cap-90`, the best of which is
the lowest energy per completed job at a mean JCT within the site's JCT budget, JCT_BUDGET times `slurm`'s)
and Slurm's power saving
(`slurm+power-saving`). Ratios are of the means over seeds; with several seeds each carries a seed-paired
bootstrap interval (the same seed gives every policy the same job stream), and one whose interval holds 1
is "no difference".
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from easlurm import plots
from easlurm.stats import bootstrap_ci
from easlurm.units import format_energy, format_number

SLURM = "slurm"
POWER_SAVING_LABEL = "slurm+power-saving"
#: the caps (% of TDP) of the sweep a plan's `baselines:` and `sim replay --baselines` add
STATIC_CAPS = (50, 60, 70, 80, 90)
#: Slurm's power saving of the baseline: SuspendTime 600 s (the other fields: PowerSaving's defaults)
DEFAULT_POWER_SAVING: tuple[tuple[str, Any], ...] = (("suspend_time_s", 600.0),)
#: the energy and JCT metrics compared
ENERGY, JCT = "energy_per_job_j", "mean_jct_s"
#: fewer seeds than this give a ratio without an interval
MIN_SEEDS = 3
#: the mean JCT a site accepts against `slurm`'s (issue 30's budget): a cap slower than this is no option
JCT_BUDGET = 1.05
_CAP = re.compile(r"^static-cap(?:-(\d+))?$")
#: the energy parts of a run, per completed job in the split table: (metric, header)
PARTS = (
    ("busy_energy_j", "Busy"),
    ("idle_energy_j", "Idle"),
    ("off_energy_j", "Off"),
    ("cycle_energy_j", "Power cycles"),
)


@dataclass(frozen=True)
class BaselineRun:
    """One baseline run a plan or a replay adds: its label, policy and power-saving changes."""

    label: str
    policy: str
    power_saving: tuple[tuple[str, Any], ...] = ()


def baseline_runs(
    caps: Sequence[int] = STATIC_CAPS, power_saving: tuple[tuple[str, Any], ...] = DEFAULT_POWER_SAVING
) -> list[BaselineRun]:
    """`slurm`, the static-cap sweep and `slurm+power-saving`, in that order."""
    runs = [BaselineRun(SLURM, SLURM)]
    runs += [BaselineRun(f"static-cap-{c}", f"static-cap-{c}") for c in caps]
    runs.append(BaselineRun(POWER_SAVING_LABEL, SLURM, power_saving))
    return runs


def parts(label: str) -> list[str]:
    """The labels of a row (`zeus = hades` when identical rows were merged)."""
    return [p.strip() for p in str(label).split(" = ")]


def cap_of(label: str) -> int | None:
    """The cap (% of TDP) of a `static-cap[-NN]` row, None for any other."""
    for p in parts(label):
        m = _CAP.match(p)
        if m:
            return int(m.group(1)) if m.group(1) else 70
    return None


def find(labels: Sequence[str], name: str) -> str | None:
    """The row among `labels` that is `name` (alone or merged with identical rows)."""
    return next((lab for lab in labels if name in parts(lab)), None)


def is_baseline(label: str) -> bool:
    return any(p in (SLURM, POWER_SAVING_LABEL) for p in parts(label)) or cap_of(label) is not None


@dataclass(frozen=True)
class Ratio:
    """mean(a) / mean(b) over the seeds both have, with its seed-paired bootstrap 95% interval."""

    ratio: float | None
    low: float | None = None
    high: float | None = None
    seeds: int = 0

    @property
    def verdict(self) -> str:
        """`lower`, `higher`, `no difference` (the interval holds 1) or `no interval` (too few seeds)."""
        if self.ratio is None:
            return "unknown"
        if self.low is None or self.high is None:
            return "no interval"
        if self.low <= 1.0 <= self.high:
            return "no difference"
        return "lower" if self.high < 1.0 else "higher"

    def text(self) -> str:
        """`0.880 [0.851, 0.912]`, `no difference (1.01 [0.98, 1.04])`, `0.880` without an interval, or
        `0.880 (every seed)` where every seed gave the same ratio."""
        if self.ratio is None:
            return ""
        if self.low is None or self.high is None:
            return f"{self.ratio:.3f}"
        if f"{self.low:.3f}" == f"{self.high:.3f}" and self.verdict != "no difference":
            return f"{self.ratio:.3f} (every seed)"
        body = f"{self.ratio:.3f} [{self.low:.3f}, {self.high:.3f}]"
        return f"no difference ({body})" if self.verdict == "no difference" else body

    def to_dict(self) -> dict[str, Any]:
        return {
            "ratio": self.ratio,
            "ci_low": self.low,
            "ci_high": self.high,
            "seeds": self.seeds,
            "verdict": self.verdict,
        }


def paired_ratio(
    a: Mapping[Any, float], b: Mapping[Any, float], *, n_boot: int = 2000, seed: int = 0
) -> Ratio:
    """The ratio of the means of `a` and `b` over their common seeds; from MIN_SEEDS seeds, the 95%
    percentile interval of the ratio with the seeds resampled in pairs."""
    common = [s for s in a if s in b]
    if not common:
        return Ratio(None)
    x = np.array([a[s] for s in common], dtype=np.float64)
    y = np.array([b[s] for s in common], dtype=np.float64)
    if not y.mean():
        return Ratio(None, seeds=len(common))
    ratio = float(x.mean() / y.mean())
    if len(common) < MIN_SEEDS:
        return Ratio(ratio, seeds=len(common))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(common), size=(n_boot, len(common)))
    den = y[idx].mean(axis=1)
    boot = x[idx].mean(axis=1)[den != 0] / den[den != 0]
    lo, hi = np.quantile(boot, [0.025, 0.975])
    return Ratio(ratio, float(lo), float(hi), len(common))


def per_seed(rows: Sequence[Mapping[str, Any]], label: str, metric: str) -> dict[Any, float]:
    """A label's finite values of `metric`, by seed."""
    out: dict[Any, float] = {}
    for r in rows:
        v = r.get(metric)
        if r.get("label") == label and isinstance(v, int | float) and np.isfinite(v):
            out[r.get("seed")] = float(v)
    return out


def per_job(rows: Sequence[Mapping[str, Any]], label: str, metric: str) -> dict[Any, float]:
    """A label's `metric` (J) per completed job, by seed; a part absent from a run (no power saving: no
    off energy) is 0 where the run has an energy."""
    out: dict[Any, float] = {}
    for r in rows:
        jobs = r.get("completed_jobs")
        if r.get("label") != label or not jobs or r.get("energy_j") is None:
            continue
        v = r.get(metric)
        out[r.get("seed")] = (float(v) if isinstance(v, int | float) and np.isfinite(v) else 0.0) / jobs
    return out


def _mean(values: Mapping[Any, float]) -> float | None:
    return float(np.mean(list(values.values()))) if values else None


@dataclass
class CellComparison:
    """One cell (experiment, scenario, load) against the site's baselines."""

    labels: list[str]
    slurm: str | None
    caps: list[tuple[int, str]]  # (cap %, row label), by cap
    best_cap: str | None
    power_saving: str | None
    #: per label: {against label: (energy ratio, JCT ratio)}
    ratios: dict[str, dict[str, tuple[Ratio, Ratio]]] = field(default_factory=dict)
    means: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)

    @property
    def against(self) -> list[tuple[str, str]]:
        """(header, label) of each baseline present."""
        out = []
        if self.slurm:
            out.append(("slurm", self.slurm))
        if self.best_cap:
            out.append((f"best static cap ({self.best_cap})", self.best_cap))
        if self.power_saving:
            out.append(("slurm + power saving", self.power_saving))
        return out


def best_static_cap(
    caps: Sequence[tuple[int, str]],
    means: Mapping[str, tuple[float | None, float | None]],
    slurm_jct: float,
    jct_budget: float = JCT_BUDGET,
) -> str | None:
    """The cap row with the lowest mean energy per job among those whose mean JCT is within `jct_budget`
    times slurm's (a cap no slower than slurm within the noise of its seeds is an option a site takes)."""
    ok = [
        (e, cap, lab)
        for cap, lab in caps
        if (e := means[lab][0]) is not None
        and (t := means[lab][1]) is not None
        and t <= jct_budget * slurm_jct
    ]
    return min(ok)[2] if ok else None


def compare(
    rows: Sequence[Mapping[str, Any]],
    exclude: frozenset[str] = frozenset(),
    *,
    n_boot: int = 2000,
    seed: int = 0,
) -> CellComparison:
    """Every label of one cell's rows (but `exclude`, such as a replay's record) against the baselines."""
    labels = [lab for lab in dict.fromkeys(str(r.get("label")) for r in rows) if lab not in exclude]
    means = {lab: (_mean(per_seed(rows, lab, ENERGY)), _mean(per_seed(rows, lab, JCT))) for lab in labels}
    slurm = find(labels, SLURM)
    caps = sorted((c, lab) for lab in labels if (c := cap_of(lab)) is not None)
    slurm_jct = means[slurm][1] if slurm else None
    best = best_static_cap(caps, means, slurm_jct) if slurm_jct is not None else None
    cmp = CellComparison(labels, slurm, caps, best, find(labels, POWER_SAVING_LABEL), means=means)
    for lab in labels:
        cmp.ratios[lab] = {
            base: tuple(  # type: ignore[misc]
                paired_ratio(per_seed(rows, lab, m), per_seed(rows, base, m), n_boot=n_boot, seed=seed)
                for m in (ENERGY, JCT)
            )
            for _, base in cmp.against
        }
    return cmp


def _sweep_sentence(cmp: CellComparison) -> str:
    if not cmp.caps:
        return "No static-cap run here: no best static cap."
    if cmp.slurm is None:
        return "No `slurm` run here, so no static cap can be judged against its mean JCT."
    slurm_jct = cmp.means[cmp.slurm][1]
    if cmp.best_cap is None:
        return (
            f"No static cap qualifies: every cap of the sweep ({', '.join(f'{c} %' for c, _ in cmp.caps)}) "
            f"has a mean JCT above {JCT_BUDGET:g} times `slurm`'s ({_num(slurm_jct)} s)."
        )
    return (
        f"The best static cap is `{cmp.best_cap}`: the least energy per completed job among the caps of the "
        f"sweep ({', '.join(f'{c} %' for c, _ in cmp.caps)}) whose mean JCT is at most {JCT_BUDGET:g} times "
        f"`slurm`'s ({_num(slurm_jct)} s)."
    )


def _num(v: float | None) -> str:
    return format_number(v)


def section(
    doc: Any,
    title: str,
    rows: Sequence[Mapping[str, Any]],
    exclude: frozenset[str] = frozenset(),
    *,
    plot_path: Path | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> tuple[CellComparison, Path | None]:
    """The report's "against what a site does today" part of one cell (a `_Doc` of sim/report.py): each
    policy's ratios to the baselines and the energy split per job beside the JCT; with `plot_path` (and
    matplotlib) the trade-off plot, whose path is returned beside the comparison for the caller to show."""
    cmp = compare(rows, exclude, n_boot=n_boot, seed=seed)
    doc.h(3, f"{title}: against what a site does today")
    if cmp.slurm is None:
        doc.p(
            "No `slurm` run in this cell: add `baselines: true` to the plan (or `--baselines` to `easlurm "
            "sim replay`) to compare every policy with Slurm's own schedule, the best site-wide static "
            "cap and Slurm's power saving."
        )
    else:
        _ratios_part(doc, cmp)
    labels = list(dict.fromkeys(str(r.get("label")) for r in rows))
    _split_part(doc, rows, labels, exclude, n_boot, seed)
    path = None
    if plot_path is not None and plots.available():
        path = plots.plot_tradeoff(
            _points(rows, labels, n_boot, seed),
            [lab for _, lab in cmp.caps],
            plot_path,
            f"{title}: energy per job against mean JCT",
            marked={SLURM: find(labels, SLURM), "slurm + power saving": find(labels, POWER_SAVING_LABEL)},
        )
    return cmp, path


def _ratios_part(doc: Any, cmp: CellComparison) -> None:
    """Which static cap is the best, then each policy's ratios to every baseline (with their intervals
    where there are seeds enough)."""
    seeds = max((r[0].seeds for d in cmp.ratios.values() for r in d.values()), default=0)
    doc.p(
        _sweep_sentence(cmp)
        + " Each cell is the ratio of the policy's mean to the baseline's (energy per completed job, "
        "mean JCT; below 1: less)"
        + (
            ", with the 95% interval of a seed-paired bootstrap; `no difference` where it holds 1."
            if seeds >= MIN_SEEDS
            else f"; with fewer than {MIN_SEEDS} seeds there is no interval (`--seeds 5` gives one)."
        )
    )
    header = ["Policy"]
    for name, _ in cmp.against:
        header += [f"Energy/job vs {name}", f"Mean JCT vs {name}"]
    table = []
    for lab in cmp.labels:
        cells = [lab]
        for _, base in cmp.against:
            e, t = cmp.ratios[lab][base]
            cells += ["1" if lab == base else e.text(), "1" if lab == base else t.text()]
        table.append(cells)
    doc.table(header, table, "No policy to compare.")


def _split_part(
    doc: Any,
    rows: Sequence[Mapping[str, Any]],
    labels: list[str],
    exclude: frozenset[str],
    n_boot: int,
    seed: int,
) -> None:
    """Each label's energy per completed job split into its parts, beside its mean JCT and that JCT's
    ratio to `slurm`'s."""
    split = []
    slurm = find(labels, SLURM)
    for lab in labels:
        total = _mean(per_job(rows, lab, "energy_j"))
        if total is None:
            continue
        cells = [lab, format_energy(total)]
        cells += [format_energy(_mean(per_job(rows, lab, m))) for m, _ in PARTS]
        cycles = _mean(per_seed(rows, lab, "power_cycles"))
        jct = _mean(per_seed(rows, lab, JCT))
        ratio = (
            paired_ratio(per_seed(rows, lab, JCT), per_seed(rows, slurm, JCT), n_boot=n_boot, seed=seed)
            if slurm and lab != slurm and lab not in exclude
            else None
        )
        cells += [_num(cycles) if cycles is not None else "", _num(jct), ratio.text() if ratio else ""]
        split.append(cells)
    doc.p(
        "Energy per completed job, split: busy (the jobs' GPUs), idle (GPUs without a job and the base "
        "power of powered-on nodes), off (powered-down nodes) and power cycles (nodes shutting down or "
        "booting), mean over seeds, beside the mean JCT and its ratio to `slurm`'s."
    )
    doc.table(
        ["Policy", "Energy/job", *(h for _, h in PARTS), "Power-downs", "Mean JCT (s)", "Mean JCT vs slurm"],
        split,
        "No run has an energy.",
    )


def _points(
    rows: Sequence[Mapping[str, Any]], labels: Sequence[str], n_boot: int, seed: int
) -> dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]]:
    """Per label: (mean JCT, its CI low, high) and (energy per job, its CI low, high); no CI: the mean."""
    out = {}
    for lab in labels:
        pts = []
        for m in (JCT, ENERGY):
            v = list(per_seed(rows, lab, m).values())
            if not v:
                break
            mean = float(np.mean(v))
            ci = bootstrap_ci(v, n_boot=n_boot, seed=seed) or (mean, mean)
            pts.append((mean, ci[0], ci[1]))
        if len(pts) == 2:
            out[lab] = (pts[0], pts[1])
    return out
