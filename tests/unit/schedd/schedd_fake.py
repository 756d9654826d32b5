"""An in-memory SchedClient for the daemon's unit tests: jobs and nodes in lists, every command recorded."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from easlurm.errors import SlurmError
from easlurm.slurm.sched_client import UPDATABLE_FIELDS, SchedClient, SlurmJob, SlurmNode


def job(job_id: str, state: str = "PENDING", **kw: Any) -> SlurmJob:
    base: dict[str, Any] = {
        "job_id": job_id,
        "name": f"j{job_id}",
        "user": "alice",
        "state": state,
        "reason": "Priority" if state == "PENDING" else "None",
        "partition": "all",
        "nodes": "",
        "node_count": 1,
        "submit_s": 1000.0,
        "start_s": None,
        "eligible_s": 1000.0,
        "priority": 1000,
        "gpus_per_node": 1,
        "gpu_type": None,
        "requeue": True,
    }
    base.update(kw)
    return SlurmJob(**base)


def node(name: str, gpu_type: str, used: int = 0, total: int = 8) -> SlurmNode:
    return SlurmNode(name, "mixed" if used else "idle", (), (gpu_type, "all"), gpu_type, total, used)


class FakeSchedClient(SchedClient):
    """`fail` makes every read raise SlurmError (Slurm unreachable)."""

    def __init__(self, jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode], now_s: float = 10_000.0) -> None:
        self._jobs = {j.job_id: j for j in jobs}
        self._nodes = list(nodes)
        self.now_s = now_s
        self.calls: list[tuple[str, str, dict[str, str]]] = []
        self.fail = False
        self.factors: dict[str, tuple[int, int]] = {}

    def _check(self) -> None:
        if self.fail:
            raise SlurmError("squeue failed: Unable to contact slurm controller (connect failure)")

    def jobs(self) -> list[SlurmJob]:
        self._check()
        return list(self._jobs.values())

    def nodes(self) -> list[SlurmNode]:
        self._check()
        return list(self._nodes)

    def site_factors(self) -> dict[str, tuple[int, int]]:
        self._check()
        return dict(self.factors)

    def user_gpu_s(self, since_s: float) -> dict[str, float]:
        self._check()
        return {"alice": 3600.0}

    def update_job(self, job_id: str, fields: Mapping[str, str]) -> None:
        assert all(k in UPDATABLE_FIELDS for k in fields)
        self.calls.append(("update", job_id, dict(fields)))
        j = self._jobs[job_id]
        changes: dict[str, Any] = {}
        if "AdminComment" in fields:
            changes["admin_comment"] = fields["AdminComment"]
        if "StartTime" in fields:
            later = fields["StartTime"] != "now"
            changes["reason"] = "BeginTime" if later else "Priority"
        if "SiteFactor" in fields:
            self.factors[job_id] = (j.priority + int(fields["SiteFactor"]), int(fields["SiteFactor"]))
        self._jobs[job_id] = dataclasses.replace(j, **changes)

    def requeue(self, job_id: str) -> None:
        self.calls.append(("requeue", job_id, {}))
        j = self._jobs[job_id]
        self._jobs[job_id] = dataclasses.replace(
            j, state="PENDING", reason="BeginTime", restarts=j.restarts + 1
        )

    def state_save_location(self) -> str | None:
        return None

    def put(self, j: SlurmJob) -> None:
        self._jobs[j.job_id] = j

    def get(self, job_id: str) -> SlurmJob:
        return self._jobs[job_id]

    # the base SlurmClient part is not used by the daemon
    def sacct(self, selection: Sequence[str], fields: Sequence[str]) -> list[dict[str, str]]:
        raise NotImplementedError

    def sacct_json(self, selection: Sequence[str]) -> dict[str, Any]:
        raise NotImplementedError

    def sacct_fields(self) -> tuple[str, ...]:
        raise NotImplementedError

    def show_job(self, job_id: int) -> dict[str, str]:
        raise NotImplementedError

    def set_admin_comment(self, job_id: int, text: str) -> None:
        raise NotImplementedError

    def set_admin_comment_db(self, job_id: int, text: str) -> None:
        raise NotImplementedError
