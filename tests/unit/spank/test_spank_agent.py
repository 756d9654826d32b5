"""The node agent: its step context, profiling (failures recorded, never raised), the plugin's stop
protocol, the process as the plugin runs it, the step cgroup, and GPUs shared with other jobs; no Slurm,
GPU or root needed (profiler and client are injected)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from agent_fakes import BrokenProfiler, FakeClient, FakeProfiler, ctx, run_node
from agent_fakes import spool as spool

from easlurm.accounting.agent import (
    NodeAgent,
    StepContext,
    leave_step_cgroup,
    node_name_from_list,
    watch_stop,
)
from easlurm.accounting.step_record import StepRecord
from easlurm.errors import EaslurmError

REPO = Path(__file__).resolve().parents[3]


def test_profiler_gets_only_the_step_gpus_and_spec(spool: Path) -> None:
    FakeProfiler.instances.clear()
    run_node(ctx(spool, nnodes=1, spec="gpu,interval=250ms", gpus=["3", "5"]), FakeClient())
    kw = FakeProfiler.instances[-1].kwargs
    assert kw["gpus"] == ["3", "5"] and kw["devices"] == "gpu" and kw["interval_s"] == pytest.approx(0.25)
    run_node(ctx(spool, nnodes=1, step="1", gpus=None), FakeClient())
    assert FakeProfiler.instances[-1].kwargs["gpus"] == []  # no GRES: no GPU is measured


def test_profiler_failure_is_flagged_not_raised(spool: Path) -> None:
    client = FakeClient()
    step = run_node(ctx(spool, nnodes=1), client, factory=BrokenProfiler)
    assert step is not None and step.partial
    assert "NVML exploded" in (step.nodes[0].error or "")
    assert step.total_energy_j is None
    assert client.published


@pytest.mark.parametrize("bad", [{"step": "../x"}, {"step": "extern"}, {"node_id": 2}, {"node_name": "a b"}])
def test_context_rejects_bad_ids(spool: Path, bad: dict[str, Any]) -> None:
    args: dict[str, Any] = {"node_id": 0, "nnodes": 2, "step": "0"}
    args.update(bad)
    with pytest.raises(EaslurmError):
        StepContext(job_id=1, spool=spool, **args)


def test_stop_line_carries_the_stop_time(spool: Path) -> None:
    agent = NodeAgent(ctx(spool, nnodes=1))
    watch_stop(io.BytesIO(b"noise\nstop 1700000000.5\n"), agent)
    assert agent.wait(0) and agent.stop_time == pytest.approx(1700000000.5)
    other = NodeAgent(ctx(spool, nnodes=1))
    watch_stop(io.BytesIO(b""), other)  # plugin gone: EOF alone stops
    assert other.wait(0) and other.stop_time is None


def test_node_name_from_the_step_node_list() -> None:
    assert node_name_from_list("h100-[1-2]", 1) == "h100-2"
    assert node_name_from_list("h100-[1-2]", 5) is None
    assert node_name_from_list(None, 0) is None


def test_agent_process_end_to_end_with_fake_nvml(spool: Path) -> None:
    """The agent as the plugin runs it: argv, stop line on stdin, fake NVML at 250 W per GPU."""
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": f"{REPO / 'src'}:{REPO / 'tests' / 'fakes'}",
        "EASLURM_PROFILER__NVML_MODULE": "easlurm_fakes.fake_nvml",
        "EASLURM_PROFILER__POWERCAP_ROOT": str(spool / "no-powercap"),
        "EASLURM_FAKE_NVML_COUNT": "4",
        "EASLURM_FAKE_NVML_POWER_W": "250",
        "SLURM_CONF": "/nonexistent/slurm.conf",  # scontrol then takes ~60 s to fail
        "EASLURM_SPANK__LATE_LIMIT_S": "4",  # so this bounds the publication attempt
        "HOME": str(spool),
    }
    argv = [
        sys.executable,
        "-m",
        "easlurm.accounting.agent",
        "--job",
        "7",
        "--step",
        "3",
        "--nnodes",
        "1",
        "--node-id",
        "0",
        "--gid",
        str(os.getgid()),
        "--spool",
        str(spool),
        "--timeout-ms",
        "3000",
        "--step-start",
        str(time.time()),
        "--spec=gpu,interval=50ms",
        "--gpus",
        "1,2",
        "--nodelist",
        "a100-[1-2]",
    ]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    time.sleep(2.0)
    assert proc.stdin is not None
    proc.stdin.write(f"stop {time.time()}\n".encode())
    proc.stdin.close()
    proc.wait(timeout=30)
    assert proc.stderr is not None
    err = proc.stderr.read()
    step = StepRecord.from_dict(json.loads((spool / "7" / "step-3.json").read_text()))
    # slurmctld is unreachable here: the failed publication (it reads the field first, to keep what a
    # site has there) is in the agent's log next to its record
    assert "cannot read AdminComment" in (spool / "7" / "3" / "node-0.log").read_text()
    node = step.nodes[0]
    assert node.host == "a100-1"
    assert sorted(d.name for d in node.devices) == ["gpu1", "gpu2"]
    assert node.duration_s is not None
    for dev in node.devices:
        assert dev.energy_j is not None and dev.mean_power_w == pytest.approx(250.0, rel=0.01)
        # the device's window (first to last counter read) covers most of the step, however loaded the
        # machine is when the agent starts, and its energy is the fake's power over that window
        assert (
            dev.duration_s is not None and 0.7 * node.duration_s <= dev.duration_s <= node.duration_s + 0.05
        )
        assert dev.energy_j == pytest.approx(250.0 * dev.duration_s, rel=0.01)
    assert step.gpu_energy_j == pytest.approx(sum(d.energy_j or 0.0 for d in node.devices))
    assert b"cannot read AdminComment" in err  # no Slurm here: logged on stderr for the plugin


def test_agent_leaves_the_step_cgroup_v2_that_proctrack_kills(tmp_path: Path) -> None:
    """cgroup v2 + proctrack/cgroup: the agent moves itself to slurmstepd's `system` leaf (a fake
    cgroupfs here: the same paths, cgroup.procs takes a pid)."""
    scope = "/system.slice/slurmstepd.scope"
    root = tmp_path / "cgroup"
    (root / scope.lstrip("/") / "system").mkdir(parents=True)
    (root / scope.lstrip("/") / "system" / "cgroup.procs").write_text("")
    proc = tmp_path / "proc-cgroup"
    proc.write_text(f"0::{scope}/job_42/step_0/slurm\n")
    moved = leave_step_cgroup(42, proc, root)
    assert moved == root / scope.lstrip("/") / "system"
    assert (moved / "cgroup.procs").read_text().strip() == str(os.getpid())
    proc.write_text(f"0::{scope}/job_7/step_batch/slurm\n")  # another job's cgroup is never touched
    assert leave_step_cgroup(42, proc, root) is None
    proc.write_text("12:freezer:/slurm/uid_0/job_42/step_0\n0::/\n")  # v1: proctrack spares the agent
    assert leave_step_cgroup(42, proc, root) is None
    proc.write_text(f"0::{scope}/job_42/step_0/slurm\n")
    assert leave_step_cgroup(42, proc, tmp_path / "nowhere") is None  # cannot move: stays, logged


class StubWatcher:
    """Stands in for easlurm.energy.gpu_share.ShareWatcher: GPU 1 was shared, a third of it ours."""

    fail = False

    def __init__(
        self, gpus: list[int], own_root: int | None, module: str, since: float | None = None
    ) -> None:
        self.gpus = gpus
        self.since = since  # the step's start: the watcher's split covers the lead-in from there

    def start(self) -> bool:
        return True

    def stop(self) -> dict[int, Any]:
        from easlurm.energy.gpu_share import GpuShare

        if self.fail:
            raise RuntimeError("NVML went away")
        return {1: GpuShare(1, total_j=900.0, own_j=300.0, others={"job7"}, by_utilisation_j=900.0)}


def test_a_shared_gpu_is_apportioned_in_the_record(spool: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU 1 shared with job 7: the record keeps a third of it, flagged; GPU 0 (not shared) stays whole."""
    import easlurm.energy.gpu_share as gpu_share

    monkeypatch.setattr(gpu_share, "ShareWatcher", StubWatcher)
    step = run_node(ctx(spool, nnodes=1, shards=2), FakeClient())
    assert step is not None and not step.partial
    devs = {d.name: d for d in step.nodes[0].devices}
    assert devs["gpu0"].energy_j == pytest.approx(600.0) and devs["gpu0"].apportioned is None
    assert devs["gpu1"].energy_j == pytest.approx(200.0) and devs["gpu1"].apportioned == "utilisation"
    assert devs["gpu1"].whole_gpu_energy_j == pytest.approx(600.0)
    assert step.apportioned_devices == ["gpu1:utilisation"]
    StubWatcher.fail = True
    try:
        step = run_node(ctx(spool, nnodes=1, step="1"), FakeClient())
    finally:
        StubWatcher.fail = False
    assert step is not None and not step.partial and step.gpu_energy_j == pytest.approx(1200.0)


def test_only_a_step_on_shards_watches_its_gpus(spool: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step with whole GPUs (no gres/shard) never meets another job there: no watcher, no NVML calls
    for it, its GPUs' energy whole."""
    import easlurm.energy.gpu_share as gpu_share

    started: list[list[int]] = []

    class Recording(StubWatcher):
        def start(self) -> bool:
            started.append(self.gpus)
            return True

    monkeypatch.setattr(gpu_share, "ShareWatcher", Recording)
    step = run_node(ctx(spool, nnodes=1), FakeClient())
    assert step is not None and started == [] and step.apportioned_devices == []
    step = run_node(ctx(spool, nnodes=1, step="1", shards=1), FakeClient())
    assert step is not None and started == [[0, 1]] and step.apportioned_devices == ["gpu1:utilisation"]
