"""Zeus (thesis Algorithm 6): minimum energy-delay-product placement, ranked by EDP with aging."""

from __future__ import annotations

import numpy as np

from easlurm.priority.packing import BatchPacker, Cycle


class Zeus(BatchPacker):
    """score = min EDP / (1 + W_age * age)."""

    name = "zeus"
    objective = "edp"
    limits = "bounded"

    def score(self, cyc: Cycle, best: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        edp = self.at(cyc.edp, best)
        return np.zeros(len(best)), edp / (1.0 + self.aging_weight * cyc.age_s)
