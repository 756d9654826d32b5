"""The oracle's what-if for a finished job: the same work on another placement, as a change in time and energy.

Pure: an oracle, the job's declared workload and its placement in, `WhatIf` lines out. A line's change
is the oracle's ratio between the new and the job's own placement, both predicted (so the oracle's bias
cancels); applied to the measured GPU energy and elapsed time it gives the absolute figures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from easlurm.energy.spec import ProfileSpec
from easlurm.errors import EaslurmError
from easlurm.units import format_duration, format_energy

#: Per-GPU power limits tried, as fractions of the GPU's TDP (rounded to 25 W, kept inside its range).
LIMIT_FRACTIONS = (0.6, 0.75, 0.9)
#: Extra uncertainty of a regime the calibration did not cover, as multiples of its MAPE.
_EXTRAPOLATION_FACTOR = {"calibrated": 1.0, "extrapolated": 2.0, "far": 3.0}


@dataclass(frozen=True)
class Placement:
    """Where the work runs: GPU type (catalogue key), GPU count, global batch, per-GPU limit (None = TDP)."""

    gpu: str
    n_gpus: int
    batch: int
    power_limit_w: float | None = None
    #: "time-slice": the GPU is shared with another job like this one (gres/shard)
    sharing: str | None = None
    #: nodes the GPUs span (sacct's NNodes); the all-reduce crosses the network when more than one
    n_nodes: int = 1


@dataclass(frozen=True)
class WhatIf:
    """One alternative: what changes, by how much, and how sure the oracle is there."""

    label: str
    placement: Placement
    #: predicted step time and GPU energy per step on the new placement (all its GPUs)
    step_time_s: float
    energy_per_step_j: float
    time_change: float  # relative, e.g. +0.03 = 3 % longer
    energy_change: float  # relative GPU energy for the same work
    #: the measured figures scaled by the change (None when the job's own were unknown)
    elapsed_s: float | None
    gpu_energy_j: float | None
    confidence: str  # calibrated, extrapolated or far
    uncertainty: float | None  # relative, from the calibration's MAPE

    def line(self) -> str:
        """ "at a 300 W limit: -14 % energy, +3 % time (±5 %, calibrated)"."""
        sure = "" if self.uncertainty is None else f"±{100 * self.uncertainty:.0f} %, "
        return (
            f"{self.label}: {100 * self.energy_change:+.0f} % energy, {100 * self.time_change:+.0f} % time "
            f"({sure}{self.confidence})"
        )

    def to_dict(self) -> dict[str, Any]:
        p = self.placement
        return {
            "label": self.label,
            "gpu": p.gpu,
            "n_gpus": p.n_gpus,
            "batch": p.batch,
            "power_limit_w": p.power_limit_w,
            "sharing": p.sharing,
            "n_nodes": p.n_nodes,
            "step_time_s": self.step_time_s,
            "energy_per_step_j": self.energy_per_step_j,
            "time_change": self.time_change,
            "energy_change": self.energy_change,
            "elapsed_s": self.elapsed_s,
            "gpu_energy_j": self.gpu_energy_j,
            "confidence": self.confidence,
            "uncertainty": self.uncertainty,
        }


def confidence(oracle: Any, model: str, placement: Placement, base: Placement) -> tuple[str, float | None]:
    """How sure the oracle is on a placement: 'calibrated' when its calibration data holds this GPU and
    model and the placement keeps to the regime it was fitted on (no limit, no sharing, the job's GPU
    count); 'extrapolated' for one step outside; 'far' for more. The uncertainty is the calibration's
    time/power MAPE scaled by that distance (None without calibration figures)."""
    meta = getattr(oracle.params, "meta", {}) or {}
    data = str(meta.get("data", "")).lower()
    spec = oracle.catalogue.get(placement.gpu)
    gpu_words = {spec.key, *(a.lower() for a in spec.aliases), spec.name.lower()}
    steps_out = 0
    steps_out += 0 if any(w and w.replace("-", " ") in data.replace("-", " ") for w in gpu_words) else 1
    steps_out += 0 if model.lower() in data else 1
    steps_out += placement.power_limit_w is not None
    steps_out += placement.sharing is not None
    steps_out += placement.n_gpus != base.n_gpus
    level = "calibrated" if steps_out == 0 else "extrapolated" if steps_out == 1 else "far"
    mapes = [meta.get(k) for k in ("mape_time_pct", "mape_power_pct")]
    known = [float(m) for m in mapes if isinstance(m, (int, float))]
    if not known:
        return level, None
    return level, math.sqrt(sum(m * m for m in known)) / 100.0 * _EXTRAPOLATION_FACTOR[level]


def alternatives(
    oracle: Any, base: Placement, cluster_gpus: Sequence[str], max_gpus: int | None = None
) -> list[tuple[str, Placement]]:
    """The placements to compare with the job's own: packed on the fewest nodes (a job that ran spread),
    half and twice the GPUs, power limits, each other GPU type of the cluster (on as many nodes as it
    ran), and sharing the GPU (one-GPU jobs). A job that shared its GPU (gres/shard)
    is compared with running alone on a whole GPU of its type and of each other type."""
    out: list[tuple[str, Placement]] = []
    m = base.n_nodes
    if base.sharing is not None:
        out.append(("alone on a whole GPU", Placement(base.gpu, 1, base.batch)))
        out.extend(
            (f"alone on 1 x {other}", Placement(other, 1, base.batch))
            for other in dict.fromkeys(cluster_gpus)
            if other != base.gpu
        )
        return out
    spec = oracle.catalogue.get(base.gpu)
    fewest = -(-base.n_gpus // spec.gpus_per_node)
    if m > fewest:
        where = f"{fewest} node{'s' if fewest > 1 else ''}"
        out.append((f"packed on {where}", Placement(base.gpu, base.n_gpus, base.batch, n_nodes=fewest)))
    if base.n_gpus > 1 and base.n_gpus % 2 == 0:
        half = base.n_gpus // 2
        out.append(
            (
                f"on {half} GPU{'s' if half > 1 else ''}",
                Placement(base.gpu, half, base.batch, n_nodes=min(m, half)),
            )
        )
    if max_gpus is None or 2 * base.n_gpus <= max_gpus:
        out.append(
            (f"on {2 * base.n_gpus} GPUs", Placement(base.gpu, 2 * base.n_gpus, base.batch, n_nodes=m))
        )
    limits = []
    for frac in LIMIT_FRACTIONS:
        w = round(spec.tdp_w * frac / 25.0) * 25.0
        if spec.min_power_limit_w <= w < spec.tdp_w and w not in limits:
            limits.append(w)
    out.extend(
        (f"at a {w:g} W limit", Placement(base.gpu, base.n_gpus, base.batch, power_limit_w=w, n_nodes=m))
        for w in limits
    )
    for other in dict.fromkeys(cluster_gpus):
        if other != base.gpu:
            out.append((f"on {base.n_gpus} x {other}", Placement(other, base.n_gpus, base.batch, n_nodes=m)))
    if base.n_gpus == 1:
        out.append(("sharing its GPU", Placement(base.gpu, 1, base.batch, sharing="time-slice")))
    return out


def _predict(oracle: Any, workload: Any, p: Placement) -> tuple[float, float] | None:
    """(step time s, GPU energy per step J) of the work on `p`; None where it does not fit."""
    from easlurm.model.oracle import Placements  # here: numpy; seff imports this module for every card

    limit = math.nan if p.power_limit_w is None else p.power_limit_w
    if p.sharing is None:
        # one node: the oracle's fewest (0); several: as recorded, at least the fewest its GPUs need
        fewest = -(-p.n_gpus // oracle.catalogue.get(p.gpu).gpus_per_node)
        m = 0 if p.n_nodes <= 1 else max(min(p.n_nodes, p.n_gpus), fewest)
        pred = oracle.predict(workload, Placements.of([p.n_gpus], [p.batch], [p.gpu], [limit], [m]))
        if pred.feasible is not None and not bool(pred.feasible[0]):
            return None
        t, e = float(pred.step_time_s[0]), float(pred.energy_j[0])
        return (t, e) if math.isfinite(t) and math.isfinite(e) else None
    from easlurm.model.colocation import GpuFacts, Sharing, corun, predict_solo  # here: numpy, as above

    solo = predict_solo(oracle, workload, p.batch, p.gpu)
    if solo is None:
        return None
    run = corun(
        solo, solo, GpuFacts.of(oracle.catalogue.get(p.gpu), oracle.params), Sharing(p.sharing), oracle.params
    )
    if not run.feasible:
        return None
    t = solo.step_time_s / run.speed[0]
    return t, run.job_power_w(0) * t


def what_ifs(
    oracle: Any,
    spec: ProfileSpec,
    base: Placement,
    cluster_gpus: Sequence[str] = (),
    elapsed_s: float | None = None,
    gpu_energy_j: float | None = None,
    max_gpus: int | None = None,
) -> list[WhatIf]:
    """Every alternative the oracle can predict for the SPEC's model; [] when the job's own placement
    does not fit. Raises the oracle's errors (unknown model or GPU) for the caller to report."""
    if spec.model is None:
        return []
    from easlurm.model.sharding import declared_workload  # here: numpy (easlurm.model), a declared model only

    workload = declared_workload(spec.model, spec.precision, spec.shard, spec.ckpt)
    own = _predict(oracle, workload, base)
    if own is None:
        return []
    t0, e0 = own
    out = []
    for label, p in alternatives(oracle, base, cluster_gpus, max_gpus):
        try:
            got = _predict(oracle, workload, p)
        except EaslurmError:
            continue
        if got is None:
            continue
        t, e = got
        level, unc = confidence(oracle, spec.model, p, base)
        out.append(
            WhatIf(
                label=label,
                placement=p,
                step_time_s=t,
                energy_per_step_j=e,
                time_change=t / t0 - 1.0,
                energy_change=e / e0 - 1.0,
                elapsed_s=None if elapsed_s is None else elapsed_s * t / t0,
                gpu_energy_j=None if gpu_energy_j is None else gpu_energy_j * e / e0,
                confidence=level,
                uncertainty=unc,
            )
        )
    return out


#: A saving under this (or under the line's own uncertainty) is not advice: it is the oracle's noise.
MIN_ADVISED_SAVING = 0.02


@dataclass(frozen=True)
class Advice:
    """The card's headline: the what-if that saves the most GPU energy within the site's slowdown bound
    (`sched.max_slowdown`), or None when none does; `text` says it in words either way."""

    best: WhatIf | None
    max_slowdown: float
    text: str


def advise(whatifs: Sequence[WhatIf], max_slowdown: float) -> Advice | None:
    """The largest energy saving whose time cost stays within `max_slowdown` (a fraction) and exceeds the
    oracle's uncertainty there; None when there are no what-ifs to choose from."""
    if not whatifs:
        return None
    bound = f"the site's {100 * max_slowdown:.0f} % slowdown bound (sched.max_slowdown)"
    fits = [
        w
        for w in whatifs
        if w.time_change <= max_slowdown and -w.energy_change > max(MIN_ADVISED_SAVING, w.uncertainty or 0.0)
    ]
    if not fits:
        return Advice(None, max_slowdown, f"keep this placement: no what-if saves energy within {bound}")
    best = min(fits, key=lambda w: (w.energy_change, w.time_change))
    saved = "" if best.gpu_energy_j is None or best.elapsed_s is None else _absolute(best)
    return Advice(best, max_slowdown, f"{best.line()}{saved}. The largest saving within {bound}")


def _absolute(w: WhatIf) -> str:
    """ ": GPU energy about 4.1 kJ instead of 7.7 kJ, time about 12.6 min instead of 15 min": the measured
    figures and the same scaled by the change."""
    assert w.gpu_energy_j is not None and w.elapsed_s is not None
    was_j, was_s = w.gpu_energy_j / (1.0 + w.energy_change), w.elapsed_s / (1.0 + w.time_change)
    return (
        f": GPU energy about {format_energy(w.gpu_energy_j)} instead of {format_energy(was_j)}, "
        f"time about {format_duration(w.elapsed_s)} instead of {format_duration(was_s)}"
    )
