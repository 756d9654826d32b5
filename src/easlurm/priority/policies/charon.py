"""Charon (thesis Algorithm 8): Zeus's order, but a job starts only if the projected power stays in budget."""

from __future__ import annotations

from typing import Any

import numpy as np

from easlurm.errors import ConfigError
from easlurm.priority.packing import Cycle
from easlurm.priority.policies.zeus import Zeus
from easlurm.priority.snapshot import Decision


class Charon(Zeus):
    """Projected power starts at the cluster's current power (running jobs + idle GPUs) and grows by
    each start's predicted power minus the idle draw of the GPUs it takes. No budget: behaves as Zeus.
    `power_margin` pads predictions (0 in the thesis): with a noisy oracle the budget is otherwise
    exceeded whenever a start's power was under-predicted."""

    name = "charon"

    def __init__(self, *, power_margin: float = 0.0, **params: Any) -> None:
        super().__init__(**params)
        if power_margin < 0:
            raise ConfigError("charon: power_margin must be >= 0")
        self.power_margin = float(power_margin)

    def budget_w(self, cyc: Cycle) -> float | None:
        b = cyc.snapshot.power_budget_w
        return self.power_budget_w if b is None else b

    def allocate(self, cyc: Cycle, order: list[int], best: np.ndarray) -> Decision:
        budget = self.budget_w(cyc)
        if budget is None:
            return super().allocate(cyc, order, best)
        projected = cyc.snapshot.power_w
        starts, hold = [], []
        for j in order:
            pos = int(best[j])
            k = int(cyc.n_gpus[pos])
            node = cyc.pick_node(int(cyc.code[pos]), k)
            if node < 0:
                continue
            delta = float(cyc.power_w[pos]) * (1.0 + self.power_margin) - k * float(cyc.node_idle_w[node])
            if projected + delta > budget:
                hold.append(cyc.jobs[j].job_id)
                continue
            starts.append(cyc.start(pos, node))
            projected += delta
        return Decision(starts=tuple(starts), hold=tuple(hold))
