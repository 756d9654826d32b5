"""Whether a GPU's catalogue figures give a plausible response to its minimum power limit."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from easlurm.model.oracle import Placements
from easlurm.model.zoo import get_workload

#: what a compute-bound FP32 step may cost at the board's minimum limit, as a multiple of its time at TDP:
#: a board keeps running at its lowest clocks there (never stalled), and never runs faster than at TDP
MIN_LIMIT_SLOWDOWN = (1.2, 4.0)
#: the lower bound holds only where the minimum limit cuts at least this share of the step's draw at TDP
#: (a P100 draws 162 W on FP32 ResNet-50: its 125 W minimum costs 1.13-1.14x in the Zeus sweep)
DEEP_CUT = 0.25
#: a board may not hold its minimum limit (its lowest clock under a cap costs more: an A40 draws 115-121 W
#: under its 100 W minimum on ResNet-50 in the Zeus sweep), but a draw there above this multiple of the limit
#: means the figures are off: a P0 idle power or TDP too high for that minimum
OVER_MIN_LIMIT = 2.0


@dataclass(frozen=True)
class LimitResponse:
    """FP32 ResNet-50 (batch 128, one GPU) at TDP and at the minimum limit of one GPU type."""

    gpu: str
    min_limit_w: float
    power_at_tdp_w: float
    slowdown: float
    power_at_min_w: float

    @property
    def deep(self) -> bool:
        """The minimum limit cuts at least DEEP_CUT of the draw at TDP."""
        return self.min_limit_w <= (1.0 - DEEP_CUT) * self.power_at_tdp_w

    def problem(self) -> str | None:
        """Why the response is implausible, or None."""
        lo, hi = MIN_LIMIT_SLOWDOWN
        if not math.isfinite(self.slowdown) or self.slowdown > hi:
            return f"{self.slowdown:.2f}x slower at its {self.min_limit_w:g} W minimum limit than at TDP (> {hi:g}x)"
        if not self.power_at_min_w <= OVER_MIN_LIMIT * self.min_limit_w:
            return (
                f"to draw {self.power_at_min_w:.0f} W at its lowest clock under its {self.min_limit_w:g} W minimum "
                f"limit (> {OVER_MIN_LIMIT:g}x that limit)"
            )
        if self.deep and self.slowdown < lo:
            return (
                f"only {self.slowdown:.2f}x slower at its {self.min_limit_w:g} W minimum limit, which cuts "
                f"{self.power_at_tdp_w:.0f} W to {self.min_limit_w:g} W (< {lo:g}x)"
            )
        return None


def limit_responses(oracle: Any, gpus: Iterable[str]) -> list[LimitResponse]:
    """The minimum-limit response of each GPU type under `oracle`'s parameters and catalogue."""
    work = get_workload("resnet50", precision="fp32-strict")
    out = []
    for key in gpus:
        spec = oracle.catalogue.get(key)
        pred = oracle.predict(work, Placements.of(1, 128, key, [math.nan, spec.min_power_limit_w]))
        t_tdp, t_min = (float(x) for x in pred.step_time_s)
        power = (float(w) for w in pred.power_w)
        out.append(LimitResponse(key, spec.min_power_limit_w, next(power), t_min / t_tdp, next(power)))
    return out
