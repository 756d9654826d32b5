"""`slurm` in the simulator: a job list with time limits is backfilled as Slurm would."""

from __future__ import annotations

from typing import Any

from easlurm.sim.cluster import ClusterSpec
from easlurm.sim.jobs_yaml import jobs_from_doc
from easlurm.sim.runner import simulate

JOBS: dict[str, Any] = {
    "jobs": [
        {
            "id": "first",
            "submit": 0,
            "model": "resnet50",
            "steps": 2000,
            "batch": 256,
            "gpus": 4,
            "time_limit": "1h",
        },
        {
            "id": "top",
            "submit": 1,
            "model": "resnet50",
            "steps": 500,
            "batch": 256,
            "gpus": 8,
            "time_limit": "1h",
        },
        {
            "id": "long",
            "submit": 2,
            "model": "resnet50",
            "steps": 100,
            "batch": 256,
            "gpus": 1,
            "time_limit": "2h",
        },
        {
            "id": "short",
            "submit": 3,
            "model": "resnet50",
            "steps": 100,
            "batch": 256,
            "gpus": 1,
            "time_limit": "10min",
        },
    ]
}


def test_a_short_job_backfills_and_a_long_one_waits_for_the_reserved_top_job() -> None:
    """The 8-GPU top job waits for `first`; of the 1-GPU jobs that fit the 4 idle GPUs meanwhile, the
    short one starts at once (its limit ends before the top job's reservation), the long one (its
    limit would delay the reservation) only after the top job has started."""
    jobs = jobs_from_doc(JOBS, "jobs.yaml")
    res = simulate(ClusterSpec.uniform(1, 8, "a100-40gb"), jobs, "slurm", noise_sigma=0.0)
    start = {r["job_id"]: r["start_s"] for r in res.to_dict()["jobs"]}
    assert start["first"] == 0.0 and start["short"] < 60.0
    assert start["top"] > start["short"] and start["long"] >= start["top"]
