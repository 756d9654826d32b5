"""Themis (thesis Algorithm 4): fastest placement, ranked by the user's historical GPU-seconds."""

from __future__ import annotations

from typing import Any

import numpy as np

from easlurm.priority.packing import BatchPacker, Cycle


def share_factor(cyc: Cycle, fair_share: bool) -> np.ndarray:
    """Divisor of the score from C_U (GPU-s). The thesis divides by C_U + 1, which favours heavy users
    (what its Figure 5.7 shows); `fair_share` multiplies instead, favouring users who consumed little."""
    c = cyc.user_share()
    if fair_share:
        mean = float(c.mean()) if len(c) and c.mean() > 0 else 1.0
        return 1.0 / (1.0 + c / mean)
    return c + 1.0


class Themis(BatchPacker):
    """score = min T / (C_U + 1) as in the thesis; `fair_share=True` for the textbook direction."""

    name = "themis"
    objective = "time"
    limits = "default"
    uses_history = True

    def __init__(self, *, fair_share: bool = False, **params: Any) -> None:
        super().__init__(**params)
        self.fair_share = bool(fair_share)

    def score(self, cyc: Cycle, best: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = self.at(cyc.time_s, best)
        return np.zeros(len(best)), t / share_factor(cyc, self.fair_share)
