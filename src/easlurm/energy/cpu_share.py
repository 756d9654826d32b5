"""A job's share of its node's CPU package and DRAM energy: its CPU time over all Slurm jobs' on the node.

RAPL measures whole sockets and the DRAM model whole DIMMs, so two jobs on one node would each be billed
the node's energy. The rule (docs/spank.md, "Shared nodes"): over the profiled window, a job's share is
its CPU time divided by the CPU time of every Slurm job on the node (its own included). A node where the
other jobs used under 1% of it (CpuShare.NEGLIGIBLE) is not shared: the job keeps the whole energy. Where the job's own CPU time cannot be
read, the devices are flagged `shared-unknown` rather than silently billed in full.

CPU time comes from Slurm's job cgroups (v2 `<scope>/job_<id>/cpu.stat` usage_usec, v1
`cpuacct/slurm/uid_<uid>/job_<id>/cpuacct.usage` ns), found through the step's slurmstepd's
/proc/<pid>/cgroup; where jobs have no cgroup (proctrack/linuxproc), from the process trees of the
slurmstepd processes (titled `slurmstepd: [<job>.<step>]`), whose utime+stime+cutime+cstime count the
tasks they have reaped. Node agents (easlurm.accounting.agent) are left out of the trees. The times are
read every CpuShareWatch.PERIOD_S over the window, so a job that ended inside it counts up to its last
reading (a job seen only at the start and the end would drop out, and the job that outlived it would be
billed the whole node for the time they ran together).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from easlurm.energy.dram import ProcessTree
from easlurm.energy.result import CpuShare

log = logging.getLogger(__name__)

#: The record's `apportioned` value for a CPU/DRAM device split by CPU time, and for one whose share
#: could not be told (billed whole, flagged).
METHOD = "cpu-time"
SHARED_UNKNOWN = "shared-unknown"
#: The device kinds that RAPL and the DRAM model measure for the whole node.
NODE_KINDS = ("cpu", "dram")
#: The node agent's processes: never any job's work.
AGENT_MARK = b"easlurm.accounting.agent"

_JOB_IN_PATH = re.compile(r"^(?P<root>.*?)(?P<uid>/uid_\d+)?/job_(?P<job>\d+)(?:/|$)")
_STEPD_TITLE = re.compile(rb"^slurmstepd: \[(\d+)\.")
_CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative CPU seconds of every Slurm job seen on the node at one instant."""

    jobs: dict[int, float] = field(default_factory=dict)
    #: where they came from ("cgroup v2 DIR", "cgroup v1 DIR", "process tree"), or why not
    source: str = ""


def _cgroup_lines(proc: Path, pid: int) -> list[tuple[str, str]]:
    """(controllers, path) of each line of /proc/<pid>/cgroup; [] when unreadable."""
    try:
        text = (proc / str(pid) / "cgroup").read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            out.append((parts[1], parts[2]))
    return out


def _read_usage_s(path: Path) -> float | None:
    """A job cgroup's CPU time: v2 cpu.stat usage_usec, v1 cpuacct.usage (ns); None when unreadable."""
    try:
        text = path.read_text()
    except OSError:
        return None
    try:
        if path.name == "cpu.stat":
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
            return None
        return int(text.strip()) / 1e9
    except ValueError:
        return None


class CpuTimeReader:
    """Reads every Slurm job's CPU time on the node, for the job whose slurmstepd is `pid`; the /proc and
    cgroup roots are injectable (tests hand it fake trees)."""

    def __init__(
        self, pid: int | None, proc: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")
    ):
        self.pid = pid
        self.proc = proc
        self.cgroup_root = cgroup_root
        self.job_id: int | None = None
        self._glob: tuple[Path, str] | None = None  # (directory, pattern) of the job cgroups' usage files
        self._tree = ProcessTree(proc)
        if pid is not None:
            self._find_job(pid)

    def _find_job(self, pid: int) -> None:
        """The job's id and its cgroups' usage files, from the stepd's cgroup; else its title."""
        for controllers, path in _cgroup_lines(self.proc, pid):
            m = _JOB_IN_PATH.match(path)
            if m is None:
                continue
            self.job_id = int(m.group("job"))
            sub = m.group("root").lstrip("/")
            if controllers == "":
                base, name, pattern = self.cgroup_root / sub, "cpu.stat", "job_*"
            elif "cpuacct" in controllers.split(","):
                mounts = [self.cgroup_root / c for c in (controllers, "cpuacct", "cpu,cpuacct")]
                mount = next((d for d in mounts if d.is_dir()), mounts[0])
                base, name = mount / sub, "cpuacct.usage"
                pattern = "uid_*/job_*" if m.group("uid") else "job_*"
            else:
                continue
            own = base / f"{m.group('uid') or ''}/job_{self.job_id}".lstrip("/") / name
            if _read_usage_s(own) is not None:
                self._glob = (base, f"{pattern}/{name}")
                return
        if self.job_id is None:
            self.job_id = self._title_job(pid)

    def _title(self, pid: int) -> bytes:
        try:
            return (self.proc / str(pid) / "cmdline").read_bytes()
        except OSError:
            return b""

    def _title_job(self, pid: int) -> int | None:
        m = _STEPD_TITLE.match(self._title(pid))
        return int(m.group(1)) if m else None

    def read(self) -> CpuTimes:
        """Every job's cumulative CPU time now (never raises: an unreadable tree reads as no job)."""
        try:
            if self._glob is not None:
                return self._from_cgroups(*self._glob)
            return self._from_trees()
        except OSError as exc:
            return CpuTimes({}, f"unreadable ({exc})")

    def _from_cgroups(self, base: Path, pattern: str) -> CpuTimes:
        jobs: dict[int, float] = {}
        for usage in base.glob(pattern):
            m = re.fullmatch(r"job_(\d+)", usage.parent.name)
            value = _read_usage_s(usage) if m else None
            if m and value is not None:
                jobs[int(m.group(1))] = jobs.get(int(m.group(1)), 0.0) + value
        version = "v2" if pattern.endswith("cpu.stat") else "v1"
        return CpuTimes(jobs, f"cgroup {version} {base}")

    def _from_trees(self) -> CpuTimes:
        """Each job's slurmstepd trees, without the node agents' subtrees."""
        stepds: dict[int, list[int]] = {}
        agents = []
        for name in os.listdir(self.proc):
            if not name.isdigit():
                continue
            title = self._title(int(name))
            m = _STEPD_TITLE.match(title)
            if m:
                stepds.setdefault(int(m.group(1)), []).append(int(name))
            elif AGENT_MARK in title:
                agents.append(int(name))
        skip = self._tree.pids(agents) if agents else set()
        trees = {job: self._tree.pids(roots) - skip for job, roots in stepds.items()}
        # several slurmd on one host (an emulated cluster): count only the jobs whose tasks run on this
        # node, as their SLURMD_NODENAME says (a job whose tasks do not say counts as here)
        here = self._node_of(trees[self.job_id] - set(stepds[self.job_id])) if self.job_id in trees else None
        jobs = {}
        for job, pids in trees.items():
            node = self._node_of(pids - set(stepds[job])) if here is not None and job != self.job_id else None
            if node is None or node == here:
                jobs[job] = sum(self._proc_cpu_s(p) for p in pids)
        return CpuTimes(jobs, "process tree")

    def _node_of(self, tasks: set[int]) -> str | None:
        """The node a job's tasks run on (their SLURMD_NODENAME); None when no task says."""
        for pid in sorted(tasks):
            try:
                env = (self.proc / str(pid) / "environ").read_bytes()
            except OSError:
                continue
            for item in env.split(b"\0"):
                if item.startswith(b"SLURMD_NODENAME="):
                    return item.partition(b"=")[2].decode(errors="replace")
        return None

    def _proc_cpu_s(self, pid: int) -> float:
        """utime+stime+cutime+cstime of one process (0 when it is gone)."""
        try:
            stat = (self.proc / str(pid) / "stat").read_bytes()
            fields = stat[stat.rfind(b")") + 2 :].split()
            return sum(int(x) for x in fields[11:15]) / _CLK_TCK
        except (OSError, ValueError):
            return 0.0


def share_between(job_id: int | None, start: CpuTimes, end: CpuTimes) -> CpuShare:
    """The job's share over the window from two readings; a job absent at the start began inside it."""
    delta = {j: max(0.0, t - start.jobs.get(j, 0.0)) for j, t in end.jobs.items()}
    own = delta.pop(job_id, None) if job_id is not None else None
    others = {j: t for j, t in delta.items() if t > 0}
    return CpuShare(job_id, own, others, end.source or start.source)


class CpuShareWatch:
    """Read the jobs' CPU times at start(), every PERIOD_S in a thread, and at stop(); stop() returns the
    CpuShare over the whole window, each job counted up to the last reading that saw it. Never raises."""

    #: Seconds between readings: a job that ends inside the window loses at most this much of its CPU
    #: time. A reading of the process trees took 7.7 ms with 567 processes on the development machine,
    #: of cgroup v2 1 ms with 64 jobs (benchmarks/bench_cpu_share.py): under 1% of one core.
    PERIOD_S = 1.0

    def __init__(
        self,
        pid: int | None,
        proc: Path = Path("/proc"),
        cgroup_root: Path = Path("/sys/fs/cgroup"),
        period_s: float | None = None,
    ):
        self.pid, self.proc, self.cgroup_root = pid, proc, cgroup_root
        self.period_s = self.PERIOD_S if period_s is None else period_s
        self._reader: CpuTimeReader | None = None
        self._start: CpuTimes | None = None
        self._latest: dict[int, float] = {}  # each job's highest cumulative CPU time read so far
        self._source = ""
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self.readings = 0

    def start(self) -> None:
        try:
            self._reader = CpuTimeReader(self.pid, self.proc, self.cgroup_root)
            self._start = self._reader.read()
            self._take(self._start)
        except Exception as exc:  # accounting context only: never fail the profile
            log.warning("CPU time of the jobs on this node unreadable: %s", exc)
            self._reader = None
            return
        self._thread = threading.Thread(target=self._watch, name="easlurm-cpu-share", daemon=True)
        self._thread.start()

    def _take(self, reading: CpuTimes) -> None:
        with self._lock:
            for job, cpu_s in reading.jobs.items():
                self._latest[job] = max(cpu_s, self._latest.get(job, cpu_s))
            self._source = reading.source or self._source
            self.readings += 1

    def _watch(self) -> None:
        while not self._done.wait(self.period_s):
            if self._reader is not None:
                try:
                    self._take(self._reader.read())
                except Exception as exc:  # a bad reading is skipped; the next one may do
                    log.debug("CPU time reading skipped: %s", exc)

    def stop(self) -> CpuShare:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        reader, start = self._reader, self._start
        if reader is None or start is None:
            return CpuShare(None, None, {}, "not read")
        try:
            self._take(reader.read())
            with self._lock:
                seen = CpuTimes(dict(self._latest), self._source)
            return share_between(reader.job_id, start, seen)
        except Exception as exc:
            log.warning("CPU time of the jobs on this node unreadable: %s", exc)
            return CpuShare(reader.job_id, None, {}, f"unreadable ({exc})")


class NodeDevice(Protocol):
    """A record's device as the accounting step record keeps it (DeviceRecord)."""

    kind: str
    apportioned: str | None

    def apportion(self, share: float, method: str) -> None: ...


def apportion_node_devices(devices: Iterable[NodeDevice], share: CpuShare | None) -> float | None:
    """Scale the CPU (package and sub-domains) and DRAM devices to this job's share of a shared node,
    keeping the whole device's energy as context; flag them `shared-unknown` when the share cannot be
    told. Returns the share applied (None: none)."""
    if share is None or (not share.shared and share.job_id is not None):
        return None
    chosen = [d for d in devices if d.kind in NODE_KINDS]
    fraction = share.fraction
    if fraction is None:
        for dev in chosen:
            dev.apportioned = SHARED_UNKNOWN
        log.warning("CPU/DRAM energy billed whole but flagged %s: %s", SHARED_UNKNOWN, _why(share))
        return None
    for dev in chosen:
        dev.apportion(fraction, METHOD)
    log.info(
        "job %s shares its node with jobs %s: %.1f%% of CPU/DRAM energy by CPU time (%s)",
        share.job_id,
        ",".join(str(j) for j in sorted(share.others_cpu_s)),
        100.0 * fraction,
        share.source,
    )
    return fraction


def _why(share: CpuShare) -> str:
    if share.job_id is None:
        return f"this step's job is not found on the node ({share.source})"
    return f"job {share.job_id}'s CPU time unreadable ({share.source}); others: {_names(share.others_cpu_s)}"


def _names(jobs: Mapping[int, float]) -> str:
    return ",".join(str(j) for j in sorted(jobs)) or "none"
