"""CPU package and DRAM energy of a node shared by several jobs: split by each job's CPU time, or flagged.

The fakes reproduce the real files: Slurm's cgroup v2 layout (`system.slice/slurmstepd.scope/job_<id>/
cpu.stat`), v1 (`cpu,cpuacct/slurm/uid_<uid>/job_<id>/cpuacct.usage` in ns), /proc/<pid>/{stat,cmdline,
cgroup} with slurmstepd's `slurmstepd: [<job>.<step>]` title, and a RAPL powercap tree.
"""

from __future__ import annotations

import functools
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from easlurm_fakes.powercap import FakePowercap

from easlurm.accounting.agent import NodeAgent, StepContext
from easlurm.accounting.step_record import DeviceRecord, NodeRecord
from easlurm.energy.cpu_share import (
    SHARED_UNKNOWN,
    CpuShare,
    CpuShareWatch,
    CpuTimeReader,
    CpuTimes,
    apportion_node_devices,
    share_between,
)
from easlurm.energy.profiler import EnergyProfiler

TCK = os.sysconf("SC_CLK_TCK")
SCOPE = "system.slice/slurmstepd.scope"


class FakeNode:
    """A fake /proc and /sys/fs/cgroup of one node; `cpu(job, s)` adds CPU time to a job's cgroup."""

    def __init__(self, root: Path, version: int = 2) -> None:
        self.proc = root / "proc"
        self.cgroup = root / "cgroup"
        self.version = version
        self.proc.mkdir(parents=True)
        self.cgroup.mkdir(parents=True)
        self.usage_s: dict[int, float] = {}
        if version == 1:  # as systemd mounts it: one hierarchy for both, with a link per controller
            (self.cgroup / "cpu,cpuacct").mkdir()
            (self.cgroup / "cpuacct").symlink_to("cpu,cpuacct")

    def job_dir(self, job: int) -> Path:
        if self.version == 2:
            return self.cgroup / SCOPE / f"job_{job}"
        return self.cgroup / "cpu,cpuacct" / "slurm" / "uid_1000" / f"job_{job}"

    def cpu(self, job: int, seconds: float) -> None:
        self.usage_s[job] = self.usage_s.get(job, 0.0) + seconds
        d = self.job_dir(job)
        d.mkdir(parents=True, exist_ok=True)
        usec = round(self.usage_s[job] * 1e6)
        if self.version == 2:
            (d / "cpu.stat").write_text(
                f"usage_usec {usec}\nuser_usec {usec * 9 // 10}\nsystem_usec {usec // 10}\n"
                "nr_periods 0\nnr_throttled 0\nthrottled_usec 0\nnr_bursts 0\nburst_usec 0\n"
            )
        else:
            (d / "cpuacct.usage").write_text(f"{usec * 1000}\n")

    def process(
        self, pid: int, ppid: int, argv: list[str], cpu_s: float = 0.0, children_s: float = 0.0, job: int = 0
    ) -> None:
        """A process with utime/stime (its own) and cutime/cstime (reaped children) in clock ticks."""
        d = self.proc / str(pid)
        d.mkdir(exist_ok=True)
        comm = Path(argv[0]).name[:15]
        own, reaped = round(cpu_s * TCK), round(children_s * TCK)
        (d / "stat").write_text(
            f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560 120 0 0 0 "
            f"{own - own // 4} {own // 4} {reaped - reaped // 4} {reaped // 4} 20 0 1 0 1000 12345 67 "
            "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n"
        )
        (d / "cmdline").write_text("\0".join(argv) + "\0")
        if job and self.version == 2:
            (d / "cgroup").write_text(f"0::/{SCOPE}/job_{job}/step_0/slurm\n")
        elif job:
            (d / "cgroup").write_text(
                f"12:cpu,cpuacct:/slurm/uid_1000/job_{job}/step_0\n"
                f"11:memory:/slurm/uid_1000/job_{job}/step_0\n"
                "1:name=systemd:/system.slice/slurmd.service\n0::/system.slice/slurmd.service\n"
            )
        else:
            (d / "cgroup").write_text("0::/init.scope\n")

    def stepd(self, pid: int, job: int, cpu_s: float = 0.0, children_s: float = 0.0) -> None:
        self.process(pid, 1, [f"slurmstepd: [{job}.0]"], cpu_s, children_s, job=job)


def agent_for(node: FakeNode, powercap: Path, tmp: Path, job: int, stepd: int) -> NodeAgent:
    ctx = StepContext(
        job_id=job,
        step="0",
        nnodes=1,
        node_id=0,
        spool=tmp / f"spool-{job}",
        gid=os.getgid(),
        spec="cpu,dram",
        gpus=[],
        stepd_pid=stepd,
    )
    ctx.spool.mkdir(mode=0o755)
    factory = functools.partial(EnergyProfiler, proc_root=node.proc, cgroup_root=node.cgroup)
    settings = {"powercap_root": str(powercap), "sample_log": False, "interval_s": 0.02}
    return NodeAgent(ctx, profiler_factory=factory, profiler_settings=settings)


def by_name(rec: NodeRecord) -> dict[str, DeviceRecord]:
    return {d.name: d for d in rec.devices}


@pytest.fixture
def ticking(tmp_path: Path) -> Any:
    fp = FakePowercap(tmp_path / "powercap", sockets=1, subzones=("core", "dram"))
    fp.start_ticker({"package-0": 60.0, "core-0": 40.0, "dram-0": 6.0}, period_s=0.005)
    yield fp
    fp.stop_ticker()
    fp.close()


@pytest.mark.parametrize("version", [2, 1])
def test_two_jobs_on_one_node_share_its_package_and_dram_energy(
    tmp_path: Path, ticking: FakePowercap, version: int
) -> None:
    """Jobs 5 and 6 run on one node; 5 uses 3 CPU-seconds and 6 one over the same window: 5 is billed
    3/4 of the package (and its sub-domains) and DRAM, 6 the rest, so the two sum to the node's energy;
    each keeps the whole device's energy as context."""
    node = FakeNode(tmp_path / "node", version)
    node.cpu(5, 10.0)  # CPU time from before the window does not count
    node.cpu(6, 2.0)
    node.stepd(100, 5)
    node.stepd(200, 6)
    agents = [
        agent_for(node, ticking.root, tmp_path, 5, 100),
        agent_for(node, ticking.root, tmp_path, 6, 200),
    ]
    for a in agents:
        a.start()
    time.sleep(0.4)
    node.cpu(5, 3.0)
    node.cpu(6, 1.0)
    for a in agents:
        a.request_stop()
    rec5, rec6 = (by_name(a.node_record()) for a in agents)
    for name in ("package-0", "core-0", "dram-0"):
        d5, d6 = rec5[name], rec6[name]
        assert (d5.apportioned, d6.apportioned) == ("cpu-time", "cpu-time"), name
        assert (d5.share, d6.share) == (pytest.approx(0.75), pytest.approx(0.25)), name
        assert d5.energy_j is not None and d6.energy_j is not None and d5.whole_gpu_energy_j is not None
        assert d5.energy_j + d6.energy_j == pytest.approx(d5.whole_gpu_energy_j, rel=0.05), name
        assert d5.energy_j == pytest.approx(0.75 * d5.whole_gpu_energy_j)
    assert rec5["package-0"].whole_gpu_energy_j == pytest.approx(60.0 * 0.4, rel=0.3)


def test_a_job_alone_on_its_node_keeps_the_whole_energy(tmp_path: Path, ticking: FakePowercap) -> None:
    """Another job's cgroup exists but used no CPU over the window: the node is not shared."""
    node = FakeNode(tmp_path / "node")
    node.cpu(5, 1.0)
    node.cpu(6, 7.0)  # idle all along
    node.stepd(100, 5)
    agent = agent_for(node, ticking.root, tmp_path, 5, 100)
    agent.start()
    time.sleep(0.2)
    node.cpu(5, 0.5)
    agent.request_stop()
    pkg = by_name(agent.node_record())["package-0"]
    assert pkg.apportioned is None and pkg.share is None and pkg.whole_gpu_energy_j is None
    assert pkg.energy_j == pytest.approx(60.0 * 0.2, rel=0.3)


def test_without_job_cgroups_the_slurmstepd_process_trees_tell(tmp_path: Path) -> None:
    """proctrack/linuxproc: no job cgroup; each job's CPU time is its slurmstepd trees' (reaped tasks
    count through cutime/cstime), without the node agents'."""
    node = FakeNode(tmp_path / "node")
    node.stepd(100, 5, cpu_s=1.0)
    node.process(101, 100, ["/bin/stress", "-c", "1"], cpu_s=2.0)  # job 5's task
    node.process(102, 100, ["/usr/bin/python3", "-m", "easlurm.accounting.agent", "--job", "5"], cpu_s=9.0)
    node.process(103, 102, ["/usr/sbin/dmidecode"], cpu_s=9.0)  # the agent's child: not the job's
    node.stepd(200, 6)
    node.process(201, 200, ["/bin/sleep", "100"])
    node.process(300, 1, ["/usr/sbin/sshd"], cpu_s=50.0)  # not a job
    watch = CpuShareWatch(100, node.proc, node.cgroup)
    watch.start()
    node.stepd(100, 5, cpu_s=1.0, children_s=2.0 + 4.0)  # the task ended with 6 s: 4 s inside the window
    shutil.rmtree(node.proc / "101")
    node.process(102, 100, ["/usr/bin/python3", "-m", "easlurm.accounting.agent"], cpu_s=30.0)
    node.process(201, 200, ["/bin/sleep", "100"], cpu_s=1.0)
    node.process(300, 1, ["/usr/sbin/sshd"], cpu_s=90.0)
    share = watch.stop()
    assert share.source == "process tree"
    assert share.job_id == 5
    assert share.job_cpu_s == pytest.approx(4.0)
    assert share.others_cpu_s == {6: pytest.approx(1.0)}
    assert share.fraction == pytest.approx(0.8)


def test_process_trees_count_only_the_jobs_whose_tasks_run_on_this_node(tmp_path: Path) -> None:
    """Several slurmd on one host (an emulated cluster, the box): every node's slurmstepd is visible, so a
    job counts only when its tasks' SLURMD_NODENAME is this job's node (or when no task says)."""
    node = FakeNode(tmp_path / "node")
    node.stepd(100, 5)
    node.process(101, 100, ["/bin/stress"], cpu_s=1.0)
    node.stepd(200, 6)
    node.process(201, 200, ["/bin/stress"], cpu_s=1.0)  # on another virtual node
    node.stepd(300, 7)
    node.process(301, 300, ["/bin/stress"], cpu_s=1.0)  # on this node
    node.stepd(400, 8)
    node.process(401, 400, ["/bin/sleep"])  # says nothing: counted as here
    for pid, name in ((101, "a100-1"), (201, "a100-2"), (301, "a100-1")):
        (node.proc / str(pid) / "environ").write_bytes(f"PATH=/bin\0SLURMD_NODENAME={name}\0".encode())
    watch = CpuShareWatch(100, node.proc, node.cgroup)
    watch.start()
    for pid, stepd in ((101, 100), (201, 200), (301, 300), (401, 400)):
        node.process(pid, stepd, ["/bin/stress"], cpu_s=3.0)
    for pid, name in ((101, "a100-1"), (201, "a100-2"), (301, "a100-1")):
        (node.proc / str(pid) / "environ").write_bytes(f"PATH=/bin\0SLURMD_NODENAME={name}\0".encode())
    share = watch.stop()
    assert share.job_cpu_s == pytest.approx(2.0)
    assert share.others_cpu_s == {7: pytest.approx(2.0), 8: pytest.approx(3.0)}


@pytest.mark.parametrize("version", [2, 1])
def test_a_job_that_ends_inside_the_window_still_counts(tmp_path: Path, version: int) -> None:
    """Job 6 ran beside job 5 and ended (its cgroup removed) before job 5's window closed: its CPU time up
    to the last reading still counts, so job 5 is not billed the whole node for the time they shared."""
    node = FakeNode(tmp_path / "node", version)
    node.cpu(5, 10.0)
    node.cpu(6, 1.0)
    node.stepd(100, 5)
    watch = CpuShareWatch(100, node.proc, node.cgroup, period_s=0.02)
    watch.start()
    node.cpu(5, 1.0)
    node.cpu(6, 3.0)
    readings = watch.readings
    wait_for_readings(watch, readings + 2)
    shutil.rmtree(node.job_dir(6))  # job 6 ended: Slurm removes its cgroup
    node.cpu(5, 2.0)
    share = watch.stop()
    assert share.job_cpu_s == pytest.approx(3.0)
    assert share.others_cpu_s == {6: pytest.approx(3.0)}
    assert share.fraction == pytest.approx(0.5)


def test_a_job_seen_only_at_the_ends_of_the_window_is_lost_without_the_readings_between(
    tmp_path: Path,
) -> None:
    """The same node read only at start and stop (no reading between): job 6 is gone and job 5 would keep
    the whole energy; this is what the periodic readings are for."""
    node = FakeNode(tmp_path / "node")
    node.cpu(5, 10.0)
    node.cpu(6, 1.0)
    node.stepd(100, 5)
    watch = CpuShareWatch(100, node.proc, node.cgroup, period_s=3600.0)
    watch.start()
    node.cpu(6, 3.0)
    shutil.rmtree(node.job_dir(6))
    node.cpu(5, 3.0)
    share = watch.stop()
    assert share.others_cpu_s == {} and share.fraction == 1.0


def wait_for_readings(watch: CpuShareWatch, n: int) -> None:
    deadline = time.monotonic() + 10.0
    while watch.readings < n:
        assert time.monotonic() < deadline, "the watch took no periodic reading"
        time.sleep(0.005)


def test_an_unreadable_cgroup_falls_back_to_the_process_trees(tmp_path: Path) -> None:
    """The stepd's cgroup names job 5 but its cpu.stat is missing: the process trees are read instead."""
    node = FakeNode(tmp_path / "node")
    node.stepd(100, 5)
    reader = CpuTimeReader(100, node.proc, node.cgroup)
    assert reader.job_id == 5
    assert reader.read().source == "process tree"
    node.cpu(5, 1.0)
    assert CpuTimeReader(100, node.proc, node.cgroup).read().source.startswith("cgroup v2 ")


def test_a_job_that_cannot_be_found_is_flagged_not_billed_twice_silently(tmp_path: Path) -> None:
    """The agent's slurmstepd is unknown (no pid) or is not a Slurm step: the CPU and DRAM devices keep
    the whole energy, flagged shared-unknown; GPUs are left alone."""
    node = FakeNode(tmp_path / "node")
    node.process(100, 1, ["/usr/bin/bash"])
    node.stepd(200, 6)
    for pid in (None, 100, 999):
        watch = CpuShareWatch(pid, node.proc, node.cgroup)
        watch.start()
        share = watch.stop()
        assert share.job_id is None and share.fraction is None
        devices = [
            DeviceRecord("package-0", "cpu", 50.0),
            DeviceRecord("dram", "dram", 5.0, modelled=True),
            DeviceRecord("gpu0", "gpu", 500.0),
        ]
        assert apportion_node_devices(devices, share) is None
        assert [(d.energy_j, d.apportioned) for d in devices] == [
            (50.0, SHARED_UNKNOWN),
            (5.0, SHARED_UNKNOWN),
            (500.0, None),
        ]


def test_a_job_whose_own_time_is_lost_is_flagged_when_others_ran() -> None:
    share = share_between(5, CpuTimes({6: 1.0}, "cgroup v2 x"), CpuTimes({6: 3.0}, "cgroup v2 x"))
    assert share.fraction is None
    devices = [DeviceRecord("package-0", "cpu", 50.0)]
    apportion_node_devices(devices, share)
    assert devices[0].apportioned == SHARED_UNKNOWN and devices[0].energy_j == 50.0


def test_share_between_counts_jobs_that_began_inside_the_window() -> None:
    """A job absent from the first reading started inside the window: all its CPU time counts."""
    start = CpuTimes({5: 100.0}, "cgroup v2 x")
    end = CpuTimes({5: 101.0, 7: 3.0}, "cgroup v2 x")
    share = share_between(5, start, end)
    assert share == CpuShare(5, 1.0, {7: 3.0}, "cgroup v2 x")
    assert share.fraction == pytest.approx(0.25)


def test_profiles_without_cpu_or_dram_do_not_read_cpu_time(nvml_env: pytest.MonkeyPatch) -> None:
    """Only node-level CPU/DRAM profiles carry a share; nothing is applied without one."""
    devices = [DeviceRecord("package-0", "cpu", 50.0)]
    assert apportion_node_devices(devices, None) is None
    assert devices[0].apportioned is None
    prof = EnergyProfiler(devices="gpu", nvml_module="easlurm_fakes.fake_nvml", sample_log=False)
    assert prof._cpu_watch is not None  # decided at start, once the devices are known
    prof.start()
    assert prof.stop().cpu_share is None


def test_an_idle_job_beside_leaves_the_node_unshared() -> None:
    """Another job under 1% of the jobs' CPU time (its slurmstepd ticking): the whole energy is kept, no
    flag; above it the node is shared."""
    start = CpuTimes({5: 0.0, 6: 0.0}, "cgroup v2 x")
    idle = share_between(5, start, CpuTimes({5: 10.0, 6: 0.05}, "cgroup v2 x"))
    assert not idle.shared and idle.fraction == 1.0
    devices = [DeviceRecord("package-0", "cpu", 50.0)]
    assert apportion_node_devices(devices, idle) is None
    assert (devices[0].energy_j, devices[0].apportioned) == (50.0, None)
    busy = share_between(5, start, CpuTimes({5: 10.0, 6: 0.5}, "cgroup v2 x"))
    assert busy.shared and busy.fraction == pytest.approx(10.0 / 10.5)


def test_a_stepd_cleaning_up_beside_a_sleeping_job_leaves_the_node_unshared() -> None:
    """A job that only sleeps (its own CPU time ~0) beside another job's slurmstepd spending 50 ms on its
    cleanup: not shared (the sleeper keeps the whole energy, not ~0 of it); a real neighbour's CPU
    seconds still split it."""
    start = CpuTimes({5: 0.0, 6: 0.0}, "process tree")
    cleanup = share_between(5, start, CpuTimes({5: 0.002, 6: 0.05}, "process tree"))
    assert not cleanup.shared and cleanup.fraction == 1.0
    unknown_own = share_between(5, CpuTimes({6: 0.0}, "x"), CpuTimes({6: 0.05}, "x"))
    assert not unknown_own.shared
    busy = share_between(5, start, CpuTimes({5: 0.002, 6: 2.0}, "process tree"))
    assert busy.shared and busy.fraction == pytest.approx(0.001, abs=1e-3)
