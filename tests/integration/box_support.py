"""Shared helpers for integration tests that watch jobs on the local cluster."""

from __future__ import annotations

import time
from typing import Any

from easlurm.slurm.sched_client import SlurmJob, parse_squeue_json


def mine(box: Any, ids: list[str]) -> dict[str, SlurmJob]:
    """The test's own jobs by ID (squeue --json ignores -j in 22.05: filter here)."""
    jobs = parse_squeue_json(box.run(["squeue", "--json"]).stdout)
    return {j.job_id: j for j in jobs if j.job_id in ids}


def wait_for(pred: Any, timeout_s: float, what: str, step_s: float = 0.3) -> None:
    """Poll `pred` until it is true; an AssertionError naming `what` after `timeout_s`."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(step_s)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
