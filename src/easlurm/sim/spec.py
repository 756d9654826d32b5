"""The spec of one simulation run: plain data, importable without SimPy (campaign plans build many)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SimSpec:
    """Everything that determines one run; equal specs give equal results."""

    policy: str
    scenario: str = "B"
    seed: int = 0
    load_jobs_per_h: float | None = None
    hours: float = 10.0
    power_budget_w: float | None = None
    cluster: str | None = None
    noise_sigma: float = 0.10
    checkpoint_interval_s: float | None = None
    policy_params: tuple[tuple[str, Any], ...] = ()
    #: changes to the cluster's power saving (model/node_power.py PowerSaving fields; `suspend_time_s:
    #: none` turns it off); empty: the cluster's own
    power_saving: tuple[tuple[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["policy_params"] = dict(self.policy_params)
        d["power_saving"] = dict(self.power_saving)
        return d
