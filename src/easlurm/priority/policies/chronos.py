"""Chronos (thesis Algorithm 5): urgent jobs first by slack, best-effort jobs backfill by runtime."""

from __future__ import annotations

import numpy as np

from easlurm.priority.packing import BatchPacker, Cycle


def urgency(cyc: Cycle) -> tuple[np.ndarray, np.ndarray]:
    """(is urgent with a deadline, deadline in s or inf) per job."""
    urgent = np.array([j.urgent and j.deadline_s is not None for j in cyc.jobs], dtype=bool)
    deadline = np.array(
        [j.deadline_s if j.deadline_s is not None else np.inf for j in cyc.jobs], dtype=np.float64
    )
    return urgent, deadline


class Chronos(BatchPacker):
    """Tier 0: urgent, by slack = D - (now + T); tier 1: T - W_age * age. Rigid unless malleable=True."""

    name = "chronos"
    objective = "time"
    limits = "default"

    def score(self, cyc: Cycle, best: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = self.at(cyc.time_s, best)
        urgent, deadline = urgency(cyc)
        slack = np.where(urgent, deadline, 0.0) - (cyc.snapshot.time_s + np.where(urgent, t, 0.0))
        perf = t - self.aging_weight * cyc.age_s
        return np.where(urgent, 0.0, 1.0), np.where(urgent, slack, perf)
