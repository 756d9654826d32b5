"""Charon (thesis Algorithm 8): Zeus's order, but a job starts only if the projected power stays in budget."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from easlurm.errors import ConfigError
from easlurm.priority.packing import INF, Cycle
from easlurm.priority.policies.zeus import Zeus
from easlurm.priority.snapshot import ClusterSnapshot, Decision, NodeState, RunningJob, StartJob


class Charon(Zeus):
    """Projected power starts at the cluster's current power (running jobs + idle GPUs) and grows by
    each start's predicted power minus the idle draw of the GPUs it takes. No budget: behaves as Zeus.

    `power_margin` pads predictions (0 in the thesis). With `adaptive` (the default; the thesis's
    Charon is `adaptive=False`, registered as "charon-thesis") the policy also uses what it observes:
    the margin grows to what the running jobs' measured power says about the oracle's error
    (`learned_margin`), and when the measured power is over the budget the most recent starts are shed
    (requeued; never an urgent or non-requeueable job) before anything new starts. With `fit_budget`
    (the default with `adaptive`) a job whose minimum-EDP placement would exceed the power left takes
    its minimum-EDP option that fits (fewer GPUs, often of another type) instead of waiting while the
    budget leaves that capacity idle; the thesis's Charon holds it. The power a start
    really draws is only known once it runs, so a budget can only hold under noisy predictions if the
    scheduler corrects after the fact."""

    name = "charon"
    #: under a budget, limits are a lever against the budget, not a slowdown to bound (charon-pl)
    limits = "free"

    def __init__(
        self,
        *,
        power_margin: float = 0.0,
        adaptive: bool = True,
        margin_z: float = 2.0,
        margin_min_samples: int = 3,
        fit_budget: bool | None = None,
        **params: Any,
    ) -> None:
        super().__init__(**params)
        if power_margin < 0:
            raise ConfigError("charon: power_margin must be >= 0")
        if margin_z < 0:
            raise ConfigError("charon: margin_z must be >= 0")
        if margin_min_samples < 1:
            raise ConfigError("charon: margin_min_samples must be >= 1")
        self.power_margin = float(power_margin)
        self.adaptive = bool(adaptive)
        self.margin_z = float(margin_z)
        self.margin_min_samples = int(margin_min_samples)
        self.fit_budget = self.adaptive if fit_budget is None else bool(fit_budget)

    def budget_w(self, cyc: Cycle) -> float | None:
        return self.snapshot_budget_w(cyc.snapshot)

    def snapshot_budget_w(self, snapshot: ClusterSnapshot) -> float | None:
        b = snapshot.power_budget_w
        return self.power_budget_w if b is None else b

    def decide(self, snapshot: ClusterSnapshot, oracle: Any) -> Decision:
        shed = self.shed(snapshot)
        if shed:
            return Decision(preempt=shed, hold=tuple(p.job_id for p in snapshot.pending))
        return super().decide(snapshot, oracle)

    def margin(self, snapshot: ClusterSnapshot) -> float:
        """Fraction added to each start's predicted power."""
        if not self.adaptive:
            return self.power_margin
        return max(
            self.power_margin, learned_margin(snapshot.running, self.margin_z, self.margin_min_samples)
        )

    def shed(self, snapshot: ClusterSnapshot) -> tuple[str, ...]:
        """Most recent starts to requeue until the measured power is back in budget (the last resort)."""
        budget = self.snapshot_budget_w(snapshot)
        if not self.adaptive or budget is None:
            return ()
        over = snapshot.power_w - budget
        if over <= 1e-6:
            return ()
        idle = {n.name: n.idle_power_w for n in snapshot.nodes}
        victims = []
        for r in sorted(snapshot.running, key=lambda r: (-r.start_s, r.job_id)):
            if r.urgent:
                continue
            victims.append(r.job_id)
            over -= r.power_w - r.n_gpus * idle.get(r.node, 0.0)
            if over <= 1e-6:
                break
        return tuple(victims)

    def allocate(self, cyc: Cycle, order: list[int], best: np.ndarray) -> Decision:
        budget = self.budget_w(cyc)
        if budget is None:
            return super().allocate(cyc, order, best)
        projected = cyc.snapshot.power_w
        pad = 1.0 + self.margin(cyc.snapshot)
        bounds = np.searchsorted(cyc.job_of, np.arange(len(cyc.jobs) + 1))
        idle_by_code = np.zeros(len(cyc.cache.type_names))
        idle_by_code[cyc.node_code] = cyc.node_idle_w
        accept = self.spread_ok(cyc, cyc.edp)
        starts, hold = [], []
        for j in order:
            job = cyc.jobs[j]
            seen = job.observed_power_ratio if self.adaptive else None
            pos = int(best[j])
            if cyc.place(pos) is None:
                continue
            k = int(cyc.n_gpus[pos])
            delta = float(cyc.power_w[pos]) * max(pad, seen or 0.0) - k * float(idle_by_code[cyc.code[pos]])
            if projected + delta > budget and self.fit_budget:  # rather a smaller placement than none
                pad_j = max(pad, seen or 0.0)
                pos, delta = fitting(
                    cyc, int(bounds[j]), int(bounds[j + 1]), idle_by_code, budget - projected, pad_j, accept
                )
            if pos < 0 or projected + delta > budget:
                hold.append(job.job_id)
                continue
            k = int(cyc.n_gpus[pos])
            place = cyc.place(pos)
            assert place is not None  # the option fits now
            node = place[0][0]
            idle_w = sum(g * float(cyc.node_idle_w[i]) for i, g in place)
            start = cyc.start(pos, place)
            if self.adaptive:
                cap = self.cap_w(cyc.snapshot.nodes[node], k, budget - projected + idle_w, start)
                if cap is None and job.urgent:  # cannot be shed later: only a guaranteed bound will do
                    cyc.release(start)
                    hold.append(job.job_id)
                    continue
                if cap is not None and cap < cyc.snapshot.nodes[node].tdp_w:
                    start = dataclasses.replace(start, power_limit_w=cap)
            starts.append(start)
            projected += delta
        return Decision(starts=tuple(starts), hold=tuple(hold))

    @staticmethod
    def cap_w(node: NodeState, k: int, headroom_w: float, start: StartJob) -> float | None:
        """The per-GPU power limit that keeps a start within the headroom whatever it really draws
        (the GPU's own limit if tighter); None when that would be below the GPU's minimum limit."""
        cap = min(headroom_w / k, node.tdp_w)
        if start.power_limit_w is not None:
            cap = min(cap, start.power_limit_w)
        floor = node.min_power_limit_w or 0.0
        return cap if cap >= floor else None


def fitting(
    cyc: Cycle,
    lo: int,
    hi: int,
    idle_by_code: np.ndarray,
    room_w: float,
    pad: float,
    accept: np.ndarray | None = None,
) -> tuple[int, float]:
    """(position, power added) of the minimum-EDP option among positions lo..hi (one job's) that fits
    both the free GPUs and `room_w`, predictions padded by `pad`, among `accept` (all if None);
    (-1, inf) if none."""
    code, k = cyc.code[lo:hi], cyc.n_gpus[lo:hi]
    delta = cyc.power_w[lo:hi] * pad - k * idle_by_code[code]
    ok = cyc.fits(slice(lo, hi)) & (delta <= room_w)
    if accept is not None:
        ok &= accept[lo:hi]
    if not ok.any():
        return -1, INF
    i = int(np.argmin(np.where(ok, cyc.edp[lo:hi], INF)))
    return lo + i, float(delta[i])


def learned_margin(running: tuple[RunningJob, ...], z: float, min_samples: int) -> float:
    """Under-prediction to allow for, from the running jobs' measured / predicted power: mean - 1 plus
    `z` standard deviations (0 with fewer than `min_samples` jobs that carry both)."""
    ratios = np.array(
        [
            r.power_w / r.predicted_power_w
            for r in running
            if r.predicted_power_w and r.predicted_power_w > 0 and math.isfinite(r.power_w)
        ],
        dtype=np.float64,
    )
    if len(ratios) < min_samples:
        return 0.0
    return max(float(ratios.mean() - 1.0 + z * ratios.std(ddof=1)), 0.0)
