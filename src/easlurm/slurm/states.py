"""Slurm job states shared by everything that waits for, or reads, the end of a job."""

from __future__ import annotations

#: States after which no hook of the job runs any more (COMPLETING is not one: its agents still publish).
FINAL_JOB_STATES = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
    }
)
