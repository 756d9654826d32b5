"""The thesis's evaluation scenarios (5.5): workload settings, loads, policies compared, power budget."""

from __future__ import annotations

from dataclasses import dataclass, field

from easlurm.errors import ConfigError
from easlurm.sim.cluster import ClusterSpec
from easlurm.sim.workload import JobTemplate, WorkloadSettings

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
    #: the scenario's own cluster (None: the default one, or the run's --cluster)
    cluster: ClusterSpec | None = None

    @property
    def load_jobs_per_h(self) -> float:
        """The default load (the first one listed)."""
        return self.loads_jobs_per_h[0]


#: small-batch, launch-bound one-GPU jobs (265-400 W of a 700 W H100 alone): sharing should help
SMALL_SHAREABLE: tuple[JobTemplate, ...] = (
    JobTemplate("bert-base", "bf16", (8, 16), (1,), shareable=True),
    JobTemplate("distilbert", "bf16", (8, 16), (1,), shareable=True),
    JobTemplate("vit-b16", "bf16", (8, 16), (1,), shareable=True),
    JobTemplate("resnet50", "bf16", (8, 16), (1,), shareable=True),
)
#: large-batch jobs that saturate a GPU's compute or HBM: sharing should not happen
LARGE_SHAREABLE: tuple[JobTemplate, ...] = (
    JobTemplate("gpt2", "bf16", (16, 32), (1,), shareable=True),
    JobTemplate("vit-l16", "bf16", (128, 256), (1,), shareable=True),
    JobTemplate("resnet50", "fp32-strict", (128, 256), (1,), shareable=True),
    JobTemplate("bert-large", "bf16", (128, 256), (1,), shareable=True),
)
#: two nodes of four H100 whose GPUs may be time-sliced between two jobs (Slurm gres/shard)
SHARED_H100 = ClusterSpec.uniform(2, 4, "h100-sxm", sharing="time-slice")

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
    "coloc-small": Scenario(
        "coloc-small",
        "Co-location of small launch-bound jobs (8 time-sliced H100, 5-30 min jobs, 40 jobs/h)",
        ("zeus", "zeus-share"),
        workload=WorkloadSettings(
            load_jobs_per_h=40.0,
            runtime_min_s=300.0,
            runtime_max_s=1800.0,
            templates=SMALL_SHAREABLE,
            reference_gpu="h100-sxm",
            reference_gpus=1,
        ),
        loads_jobs_per_h=(40.0,),
        cluster=SHARED_H100,
    ),
    "coloc-large": Scenario(
        "coloc-large",
        "Co-location offered to large GPU-saturating one-GPU jobs (8 time-sliced H100, 10-60 min jobs, 16 jobs/h)",
        ("zeus", "zeus-share"),
        workload=WorkloadSettings(
            load_jobs_per_h=16.0,
            runtime_min_s=600.0,
            runtime_max_s=3600.0,
            templates=LARGE_SHAREABLE,
            reference_gpu="h100-sxm",
            reference_gpus=1,
        ),
        loads_jobs_per_h=(16.0,),
        cluster=SHARED_H100,
    ),
}


def get_scenario(name: str) -> Scenario:
    for key, sc in SCENARIOS.items():
        if key.lower() == name.lower():
            return sc
    raise ConfigError(f"unknown scenario {name!r} (known: {', '.join(SCENARIOS)})")
