"""The policy's ranking of the waiting jobs, in words: each job's best placement and predictions, its score's
terms (predicted EDP or time, aging, fairness, deadline slack) and the term that put it behind the job
ranked before it."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from easlurm.priority.packing import Cycle
from easlurm.priority.policies.aurachronos import AuraChronos
from easlurm.priority.policies.chronos import Chronos, urgency
from easlurm.priority.policies.hades import Hades
from easlurm.priority.policies.pollux import Pollux
from easlurm.priority.policies.slurm_baseline import SlurmBaseline
from easlurm.priority.policies.themis import Themis, share_factor
from easlurm.priority.policies.zeus import Zeus
from easlurm.priority.snapshot import ClusterSnapshot
from easlurm.units import format_duration, format_edp

#: (name, contribution to the score: log-scale for products; lower ranks first)
Term = tuple[str, float]


@dataclass
class JobView:
    """One job as the policy saw it: its chosen placement (the best one as if GPUs were free when it does
    not start now), the oracle's predictions for its remaining work, its rank and score in words, and why
    each of the cycle's actions on it was taken (by action kind)."""

    job_id: str
    placement: str = ""
    power_w: float | None = None
    energy_j: float | None = None
    time_s: float | None = None
    rank: int | None = None
    score: str = ""
    #: power it adds to the cluster's when it starts (its prediction less the idle draw of its GPUs)
    adds_w: float | None = None
    why: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Ranked:
    """The policy's ranking of every declared pending job as if GPUs were free (`order`, job ids), and
    each job's view, made on demand (a queue of 10,000 jobs is explained only where the cycle acts)."""

    def __init__(
        self, policy: Any = None, cyc: Cycle | None = None, best: Any = None, order: list[int] | None = None
    ) -> None:
        self.policy, self.cyc = policy, cyc
        self.best = np.asarray(best if best is not None else [], dtype=np.int64)
        ranked = order or []
        self.order = [cyc.jobs[j].job_id for j in ranked] if cyc is not None else []
        self._ranked = ranked
        self._rank = {j: i for i, j in enumerate(ranked)}
        self._index = {job.job_id: j for j, job in enumerate(cyc.jobs)} if cyc is not None else {}
        self._terms = _Terms(policy, cyc, self.best) if cyc is not None and ranked else None

    def view(self, job_id: str) -> JobView | None:
        """The job's view (None: not a pending job the policy saw)."""
        j = self._index.get(job_id)
        if j is None or self.cyc is None:
            return None
        out = option_view(self.cyc, int(self.best[j]), job_id)
        i = self._rank.get(j)
        if i is not None and self._terms is not None:
            out.rank = i + 1
            ahead = self._ranked[i - 1] if i > 0 else None
            out.score = f"rank {i + 1} of {len(self._ranked)}: {self._terms.words(j, ahead)}"
        return out

    def least_adds_w(self) -> float | None:
        """The least power any waiting job's best placement adds above the idle draw of its GPUs."""
        cyc = self.cyc
        if cyc is None or not len(self.best) or (self.best < 0).all():
            return None
        pos = self.best[self.best >= 0]
        idle = np.zeros(int(max(cyc.code.max(initial=0), cyc.node_code.max(initial=0))) + 1)
        idle[cyc.node_code] = cyc.node_idle_w
        adds = cyc.power_w[pos] - cyc.n_gpus[pos] * idle[cyc.code[pos]]
        adds = adds[np.isfinite(adds) & (adds > 0)]
        return float(adds.min()) if len(adds) else None


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def rank_view(policy: Any, snapshot: ClusterSnapshot, oracle: Any) -> Ranked:
    """The policy's placement and score hooks on every pending job as if GPUs were free: the order Slurm
    should start the jobs that cannot start now in, and each job's predictions. A policy without a per-job
    score (AuraChronos ranks inside its own packing) ranks nothing; its jobs get their minimum-EDP
    placement's predictions."""
    if not snapshot.pending or not hasattr(policy, "cycle"):
        return Ranked()
    try:
        cyc = policy.cycle(snapshot, oracle)
    except NotImplementedError:
        return Ranked()
    cyc.feasible = np.ones_like(cyc.feasible) if cyc.spread is None else ~cyc.spread
    scored = all(hasattr(policy, a) for a in ("placements", "score", "order"))
    try:
        best = policy.placements(cyc) if scored else cyc.best(cyc.edp)
        order = policy.order(best, *policy.score(cyc, best)) if scored else []
    except NotImplementedError:
        best, order = cyc.best(cyc.edp), []
    return Ranked(policy, cyc, best, order)


def option_view(cyc: Cycle, pos: int, job_id: str) -> JobView:
    """A job's view on one option of the cycle (its position in the flat arrays; -1: none)."""
    if pos < 0:
        return JobView(job_id, placement="no placement on these nodes")
    k, code = int(cyc.n_gpus[pos]), int(cyc.code[pos])
    text = f"{k}x{cyc.cache.type_names[code]}"
    limit = float(cyc.limit_w[pos])
    if math.isfinite(limit):
        text += f",{limit:g}W"
    power, time_s = float(cyc.power_w[pos]), float(cyc.time_s[pos])
    idle = cyc.node_idle_w[cyc.node_code == code]
    idle_w = float(idle[0]) if len(idle) else 0.0
    return JobView(
        job_id,
        placement=text,
        power_w=_finite(power),
        energy_j=_finite(power * time_s),
        time_s=_finite(time_s),
        adds_w=_finite(power - k * idle_w),
    )


class _Terms:
    """A policy's score terms for every job (arrays), written out per job on demand."""

    def __init__(self, policy: Any, cyc: Cycle, best: np.ndarray) -> None:
        self.policy, self.cyc = policy, cyc
        self.w = float(getattr(policy, "aging_weight", 0.0))
        self.age = cyc.age_s
        self.t = policy.at(cyc.time_s, best)
        self.edp = policy.at(cyc.edp, best)
        self.urgent, self.deadline = urgency(cyc)
        self.fair = bool(getattr(policy, "fair_share", False))
        self.share = share_factor(cyc, self.fair) if isinstance(policy, Hades | Themis) else None

    def words(self, j: int, ahead: int | None) -> str:
        """Job j's score in words and, against the job ranked just before it, the term that put it behind."""
        text, parts = self.terms(j)
        if ahead is not None and parts:
            theirs = self.terms(ahead)[1]
            if theirs:
                gap, name = max((p[1] - q[1], p[0]) for p, q in zip(parts, theirs, strict=False))
                if gap > 0:
                    text += f"; behind job {self.cyc.jobs[ahead].job_id} by its {name}"
        job = self.cyc.jobs[j]
        if job.urgent and not isinstance(self.policy, Chronos | AuraChronos):
            name = getattr(self.policy, "name", "this policy")
            text += f"; urgent, but {name} does not rank by urgency (chronos and aurachronos do)"
        return text

    def terms(self, j: int) -> tuple[str, list[Term]]:
        """Job j's score written out, and each term's contribution (lower ranks first)."""
        p, w, age, t, edp = self.policy, self.w, self.age[j], self.t[j], self.edp[j]
        waited = format_duration(age)
        if isinstance(p, SlurmBaseline):
            return "Slurm's multifactor priority (age, size, fair share)", []
        if isinstance(p, Chronos | AuraChronos) and self.urgent[j]:
            slack = self.deadline[j] - (self.cyc.snapshot.time_s + t)
            return f"urgent, deadline slack {format_duration(slack)} (urgent jobs first)", []
        if isinstance(p, Pollux | Chronos):
            text = f"predicted time {format_duration(t)} less aging {w:g} x waited {waited}"
            return text, [("predicted time", t), ("wait (aging)", -w * age)]
        if isinstance(p, Hades | Themis) and self.share is not None:
            what, v = ("EDP", edp) if isinstance(p, Hades) else ("time", t)
            shown = format_edp(v) if what == "EDP" else format_duration(v)
            c_u = "1 / (1 + user GPU-s / mean)" if self.fair else "user GPU-s + 1"
            text = f"predicted {what} {shown} / fairness ({c_u} = {self.share[j]:.3g})"
            return text, [(f"predicted {what}", _log(v)), ("user share (fairness)", -_log(self.share[j]))]
        if isinstance(p, Zeus):
            text = f"predicted EDP {format_edp(edp)} / aging (1 + {w:g} x waited {waited})"
            return text, [("predicted EDP", _log(edp)), ("wait (aging)", -_log(1.0 + w * age))]
        return f"{getattr(p, 'name', 'policy')} score", []


def _log(value: float) -> float:
    return math.log(value) if value > 0 and math.isfinite(value) else math.inf
