"""The spec of one simulation run: plain data, importable without SimPy (campaign plans build many)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from easlurm.inputs import check_work, number

#: the highest load (jobs/h) and the most jobs one simulated run may submit: beyond them a run takes days
#: and its queue does not fit in memory (the thesis's runs submit some 200 jobs)
MAX_LOAD_JOBS_PER_H = 100_000.0
MAX_RUN_JOBS = 10_000_000


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

    def __post_init__(self) -> None:
        """Refuse, before any work, a run that could not finish: hours and load finite and > 0, and the
        jobs they make (load x hours) within MAX_RUN_JOBS."""
        number(self.hours, "hours", 0, None, lo_open=True)
        if self.load_jobs_per_h is not None:
            number(self.load_jobs_per_h, "load (jobs/h)", 0, MAX_LOAD_JOBS_PER_H, lo_open=True)
            check_work(
                self.load_jobs_per_h * self.hours,
                MAX_RUN_JOBS,
                f"a run of {self.hours:g} h at {self.load_jobs_per_h:g} jobs/h: the jobs it submits",
                "lower the load or the hours",
            )

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["policy_params"] = dict(self.policy_params)
        d["power_saving"] = dict(self.power_saving)
        return d
