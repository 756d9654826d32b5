"""Pollux (thesis Algorithm 3): fastest placement, shortest job first, with aging against starvation."""

from __future__ import annotations

import numpy as np

from easlurm.priority.packing import BatchPacker, Cycle


class Pollux(BatchPacker):
    """score = min T - W_age * age (seconds); rigid when built with malleable=False."""

    name = "pollux"
    objective = "time"
    limits = "default"

    def score(self, cyc: Cycle, best: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = self.at(cyc.time_s, best)
        return np.zeros(len(best)), t - self.aging_weight * cyc.age_s
