"""Charon-PL: Charon that also picks each job's GPU power limit, so more work fits under the same budget."""

from __future__ import annotations

from typing import Any

import numpy as np

from easlurm.errors import ConfigError
from easlurm.priority.packing import INF, Cycle
from easlurm.priority.policies.charon import Charon
from easlurm.priority.snapshot import Decision


class CharonPL(Charon):
    """Options include power limits (fractions of TDP, at least the GPU's minimum limit). In Zeus's
    order, each job takes its minimum-EDP option among those that fit the free GPUs AND the power left
    in the budget, instead of waiting when its unconstrained best placement does not fit.

    With `guaranteed` (default) a start is budgeted at its GPUs' power limit (TDP when unlimited),
    a bound the hardware enforces, so the budget holds even when predictions are wrong; otherwise
    at the predicted power, as Charon does."""

    name = "charon-pl"

    def __init__(
        self,
        *,
        limit_fractions: tuple[float, ...] = (0.5, 0.6, 0.7, 0.8, 0.9),
        guaranteed: bool = True,
        **params: Any,
    ):
        super().__init__(**params)
        self.guaranteed = bool(guaranteed)
        if any(not 0.0 < f <= 1.0 for f in limit_fractions):
            raise ConfigError("charon-pl: limit_fractions must lie in (0, 1]")
        self.limit_fractions = tuple(float(f) for f in limit_fractions)

    def allocate(self, cyc: Cycle, order: list[int], best: np.ndarray) -> Decision:
        budget = self.budget_w(cyc)
        if budget is None:
            return super().allocate(cyc, order, best)
        projected = cyc.snapshot.power_w
        bounds = np.searchsorted(cyc.job_of, np.arange(len(cyc.jobs) + 1))
        edp = cyc.edp
        idle_by_code = np.zeros(len(cyc.cache.type_names))
        idle_by_code[cyc.node_code] = cyc.node_idle_w
        power = cyc.power_w
        if self.guaranteed:
            tdp_by_code = np.zeros(len(cyc.cache.type_names))
            tdp_by_code[cyc.node_code] = [n.tdp_w for n in cyc.snapshot.nodes]
            per_gpu = np.where(np.isnan(cyc.limit_w), tdp_by_code[cyc.code], cyc.limit_w)
            power = np.maximum(cyc.n_gpus * per_gpu, cyc.power_w)
        accept = self.spread_ok(cyc, edp)
        starts, hold = [], []
        for j in order:
            lo, hi = int(bounds[j]), int(bounds[j + 1])
            k, code = cyc.n_gpus[lo:hi], cyc.code[lo:hi]
            fits = cyc.fits(slice(lo, hi)) & accept[lo:hi]
            if not fits.any():
                continue
            delta = power[lo:hi] - k * idle_by_code[code]
            ok = fits & (projected + delta <= budget)
            if not ok.any():
                hold.append(cyc.jobs[j].job_id)
                continue
            pos = lo + int(np.argmin(np.where(ok, edp[lo:hi], INF)))
            place = cyc.place(pos)
            assert place is not None  # the option fits now
            starts.append(cyc.start(pos, place))
            projected += float(delta[pos - lo])
            if not any(cyc.node_free):
                break
        return Decision(starts=tuple(starts), hold=tuple(hold))
