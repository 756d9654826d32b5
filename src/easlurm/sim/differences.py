"""Where and why the policies of one cell differ: the sentence the report writes under each scenario."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from easlurm.stats import MetricSummary
from easlurm.units import format_duration, format_energy, format_number

#: With one seed there is no CI: a gap between policies larger than this share of the larger value
#: is named (as the gap of one run each), a smaller one is read as no difference.
ONE_SEED_GAP = 0.01
#: A job that waited longer than this was queued (as the replay counts queued_jobs).
QUEUED_AFTER_S = 60.0


def _pct(v: float) -> str:
    return f"{format_number(100.0 * v)}%"


def _per_h(v: float) -> str:
    return f"{format_number(v)} jobs/h"


#: (metric, what a person calls it, how its value reads): the outcomes the sentence compares, in order.
COMPARED: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("energy_j", "energy", format_energy),
    ("mean_jct_s", "mean JCT", format_duration),
    ("throughput_jobs_per_h", "throughput", _per_h),
    ("deadline_miss_rate", "deadline misses", _pct),
    ("jain_index", "Jain's index", format_number),
)


@dataclass(frozen=True)
class Gap:
    """The lowest and highest policy on one metric, and whether they are told apart."""

    metric: str
    low: MetricSummary
    high: MetricSummary
    #: True: the 95% CIs do not overlap; with one seed (no CI), the gap exceeds ONE_SEED_GAP.
    apart: bool
    one_seed: bool

    @property
    def size(self) -> float:
        assert self.low.mean is not None and self.high.mean is not None
        return self.high.mean - self.low.mean


def gap(cell: Sequence[MetricSummary], metric: str) -> Gap | None:
    """The gap between the policies with the lowest and highest mean of `metric`; None with fewer than
    two policies that have a value."""
    have = sorted((s for s in cell if s.metric == metric and s.mean is not None), key=lambda s: s.mean or 0.0)
    if len(have) < 2:
        return None
    low, high = have[0], have[-1]
    assert low.mean is not None and high.mean is not None
    if all(s.ci_low is not None and s.ci_high is not None for s in (low, high)):
        assert low.ci_high is not None and high.ci_low is not None
        return Gap(metric, low, high, low.ci_high < high.ci_low, one_seed=False)
    scale = max(abs(low.mean), abs(high.mean))
    return Gap(metric, low, high, scale > 0 and (high.mean - low.mean) / scale > ONE_SEED_GAP, True)


def _value(cell: Sequence[MetricSummary], label: str, metric: str) -> float | None:
    for s in cell:
        if s.metric == metric and s.group[-1] == label:
            return s.mean
    return None


def _energy_driver(cell: Sequence[MetricSummary], g: Gap) -> str:
    """What the runs record behind an energy gap: idle or busy energy, and energy per job."""
    lo, hi = str(g.low.group[-1]), str(g.high.group[-1])
    d_idle = _diff(cell, "idle_energy_j", hi, lo)
    d_busy = _diff(cell, "busy_energy_j", hi, lo)
    done = (_value(cell, hi, "completed_jobs"), _value(cell, lo, "completed_jobs"))
    per_job = (_value(cell, hi, "energy_per_job_j"), _value(cell, lo, "energy_per_job_j"))
    parts = []
    if d_idle is not None and d_busy is not None:
        if abs(d_idle) >= abs(d_busy):
            parts.append(
                f"mostly idle energy ({format_energy(d_idle)} of the {format_energy(g.size)} gap: GPUs powered but unused)"
            )
        else:
            parts.append(f"mostly busy energy ({format_energy(d_busy)} of the {format_energy(g.size)} gap)")
    if None not in per_job:
        parts.append(
            f"energy per job {format_energy(per_job[0] or 0.0)} against {format_energy(per_job[1] or 0.0)}"
        )
    if None not in done and done[0] != done[1]:
        parts.append(f"with {format_number(done[0])} against {format_number(done[1])} jobs completed")
    if d_idle is None or d_busy is None:
        parts.append("the runs record no split into busy and idle energy")
    return ", ".join(parts)


def _jct_driver(cell: Sequence[MetricSummary], g: Gap) -> str:
    """What the runs record behind a JCT gap: how long jobs waited for a start."""
    lo, hi = str(g.low.group[-1]), str(g.high.group[-1])
    waits = (_value(cell, hi, "max_wait_s"), _value(cell, lo, "max_wait_s"))
    queued = (_value(cell, hi, "queued_jobs"), _value(cell, lo, "queued_jobs"))
    if None in waits or None in queued:
        return ""
    return (
        f"waiting for a start: {format_number(queued[0])} jobs queued under {hi} (longest wait "
        f"{format_duration(waits[0])}) against {format_number(queued[1])} under {lo} "
        f"({format_duration(waits[1])})"
    )


def _diff(cell: Sequence[MetricSummary], metric: str, a: str, b: str) -> float | None:
    va, vb = _value(cell, a, metric), _value(cell, b, metric)
    return None if va is None or vb is None else va - vb


def sentence(where: str, cell: Sequence[MetricSummary]) -> str | None:
    """One sentence: which metrics tell the policies of `cell` apart and what drives each gap, or that
    none does and why; None with fewer than two policies. `cell` holds the summaries of one
    (experiment, scenario, load), every label to compare."""
    labels = {s.group[-1] for s in cell}
    if len(labels) < 2:
        return None
    gaps = [g for m, _, _ in COMPARED if (g := gap(cell, m)) is not None]
    one_seed = any(g.one_seed for g in gaps)
    apart = [g for g in gaps if g.apart]
    how = (
        f"one seed, so no CI: gaps above {ONE_SEED_GAP:.0%} are named"
        if one_seed
        else "a difference is named where the 95% CIs do not overlap"
    )
    if not apart:
        queued = [s.mean for s in cell if s.metric == "queued_jobs"]
        if queued and all(q == 0 for q in queued):
            why = (
                f"the cluster is not congested: no job waited more than {QUEUED_AFTER_S:.0f} s under any "
                "policy, so they could differ only in where jobs ran, and that moved no outcome"
            )
        elif not gaps:
            why = "no outcome has values for two policies"
        else:
            why = "every compared outcome (" + ", ".join(n for m, n, _ in COMPARED if gap(cell, m)) + ") is "
            why += "within the noise of the runs" if not one_seed else f"within {ONE_SEED_GAP:.0%}"
        return f"{where}: the policies do not differ ({how}): {why}."
    names = {m: (n, f) for m, n, f in COMPARED}
    clauses = []
    for g in apart:
        name, form = names[g.metric]
        assert g.low.mean is not None and g.high.mean is not None
        text = (
            f"{name} from {form(g.low.mean)} under {g.low.group[-1]} to {form(g.high.mean)} "
            f"under {g.high.group[-1]}"
        )
        driver = {"energy_j": _energy_driver, "mean_jct_s": _jct_driver}.get(g.metric)
        why = driver(cell, g) if driver else ""
        clauses.append(text + (f" ({why})" if why else ""))
    return f"{where}: the policies differ ({how}) in " + "; ".join(clauses) + "."
