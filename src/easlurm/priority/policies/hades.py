"""Hades (thesis Algorithm 9): minimum-EDP placement, ranked by EDP modulated by the user's share."""

from __future__ import annotations

from typing import Any

import numpy as np

from easlurm.priority.packing import BatchPacker, Cycle
from easlurm.priority.policies.themis import share_factor


class Hades(BatchPacker):
    """score = min EDP / (C_U + 1) as in the thesis; `fair_share=True` for the textbook direction."""

    name = "hades"
    objective = "edp"
    limits = "bounded"
    uses_history = True

    def __init__(self, *, fair_share: bool = False, **params: Any) -> None:
        super().__init__(**params)
        self.fair_share = bool(fair_share)

    def score(self, cyc: Cycle, best: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        edp = self.at(cyc.edp, best)
        return np.zeros(len(best)), edp / share_factor(cyc, self.fair_share)
