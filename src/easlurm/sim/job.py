"""A submitted training job: its request plus what a recorded trace knows of it."""

from __future__ import annotations

from dataclasses import dataclass

from easlurm.priority.snapshot import JobRequest


@dataclass(frozen=True)
class JobSpec(JobRequest):
    """One job as submitted to the simulator: the request (shared with the policy's queue) and, for a
    replayed trace, its partition and recorded start and end."""

    partition: str | None = None
    recorded_start_s: float | None = None
    recorded_end_s: float | None = None
