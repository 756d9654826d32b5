"""Stand-ins for the node agent's tests: a profiler, a Slurm client, a spool and a step context."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from easlurm.accounting.agent import NodeAgent, StepContext
from easlurm.accounting.step_record import StepRecord
from easlurm.energy.result import DeviceEnergy, ProfileResult
from easlurm.errors import SlurmError


class FakeProfiler:
    """Stands in for EnergyProfiler: constant power per GPU over a fixed window."""

    instances: list[FakeProfiler] = []  # noqa: RUF012

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.started = False
        FakeProfiler.instances.append(self)

    def start(self) -> None:
        self.started = True

    def stop(self) -> ProfileResult:
        gpus = self.kwargs["gpus"]
        devs = [
            DeviceEnergy(f"gpu{g}", "gpu", 300.0 * 2.0, 300.0, 20, False, "nvml-energy", peak_power_w=300.0)
            for g in gpus
        ]
        devs.append(DeviceEnergy("dram-0", "dram", 10.0, 5.0, 20, True, "dram-model", peak_power_w=5.0))
        return ProfileResult(host="box", start_time=1.7e9, duration_s=2.0, devices=devs)


class BrokenProfiler(FakeProfiler):
    def start(self) -> None:
        raise RuntimeError("NVML exploded")


class FakeClient:
    def __init__(self, finished: bool = False) -> None:
        self.finished = finished
        self.published: list[tuple[str, int, str]] = []
        self.timeout_s = 60.0

    def set_admin_comment(self, job_id: int, text: str) -> None:
        if self.finished:
            raise SlurmError("scontrol failed: Job has already finished")
        self.published.append(("scontrol", job_id, text))

    def set_admin_comment_db(self, job_id: int, text: str) -> None:
        self.published.append(("sacctmgr", job_id, text))

    def show_job(self, job_id: int) -> dict[str, str]:
        return {"JobId": str(job_id), "AdminComment": self.published[-1][2] if self.published else ""}


@pytest.fixture
def spool(tmp_path: Path) -> Path:
    d = tmp_path / "spool"
    d.mkdir(mode=0o755)
    return d


def ctx(spool: Path, node_id: int = 0, nnodes: int = 2, step: str = "0", **kw: Any) -> StepContext:
    base: dict[str, Any] = {"gid": os.getgid(), "timeout_s": 1.0, "spec": "all", "gpus": ["0", "1"]}
    base.update(kw)
    return StepContext(job_id=42, step=step, nnodes=nnodes, node_id=node_id, spool=spool, **base)


def run_node(c: StepContext, client: Any = None, factory: Any = FakeProfiler) -> StepRecord | None:
    agent = NodeAgent(c, client=client, profiler_factory=factory)
    agent.start()
    agent.request_stop(time.time())
    return agent.finish()
