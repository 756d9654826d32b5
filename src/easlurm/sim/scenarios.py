"""The thesis's evaluation scenarios (5.5): workload settings, loads, policies compared, power budget."""

from __future__ import annotations

from dataclasses import dataclass, field

from easlurm.errors import ConfigError
from easlurm.sim.workload import WorkloadSettings

#: thesis base arrival rate: lambda = 0.005 jobs/s
BASE_LOAD_JOBS_PER_H = 0.005 * 3600.0


@dataclass(frozen=True)
class Scenario:
    """One experiment: what is compared, on which workload, at which loads (jobs/h)."""

    name: str
    title: str
    policies: tuple[str, ...]
    workload: WorkloadSettings = field(default_factory=WorkloadSettings)
    loads_jobs_per_h: tuple[float, ...] = (BASE_LOAD_JOBS_PER_H,)
    power_budget_w: float | None = None
    hours: float = 10.0

    @property
    def load_jobs_per_h(self) -> float:
        """The default load (the first one listed)."""
        return self.loads_jobs_per_h[0]


SCENARIOS: dict[str, Scenario] = {
    "A": Scenario(
        "A",
        "Malleable vs rigid (Pollux, Themis)",
        ("pollux", "pollux-rigid", "themis", "themis-rigid"),
    ),
    "B": Scenario(
        "B",
        "Energy at equal throughput (Zeus vs Pollux)",
        ("pollux", "zeus", "hades", "themis", "chronos-malleable"),
    ),
    "C": Scenario(
        "C",
        "SLA compliance with preemption (10% urgent, deadline 3.5x fastest runtime)",
        ("pollux", "zeus", "chronos", "chronos-malleable", "aurachronos"),
    ),
    "D": Scenario(
        "D",
        "Load sensitivity (lambda 0.001 .. 0.007 jobs/s)",
        ("pollux", "zeus", "hades", "themis", "aurachronos"),
        loads_jobs_per_h=tuple(
            round(x * 3600.0, 1) for x in (0.005, 0.001, 0.002, 0.003, 0.004, 0.006, 0.007)
        ),
    ),
    "E": Scenario(
        "E",
        "Fairness under imbalanced load (one user submits 50% of jobs)",
        ("themis", "hades", "pollux", "zeus"),
        workload=WorkloadSettings(majority_share=0.5),
    ),
    "charon-budget": Scenario(
        "charon-budget",
        "Scheduling under a 4500 W cluster power budget",
        ("charon", "charon-pl", "zeus", "pollux"),
        power_budget_w=4500.0,
    ),
}


def get_scenario(name: str) -> Scenario:
    for key, sc in SCENARIOS.items():
        if key.lower() == name.lower():
            return sc
    raise ConfigError(f"unknown scenario {name!r} (known: {', '.join(SCENARIOS)})")
