"""A shared GPU's energy, apportioned to one step: by the processes' SM utilisation, else by time.

Two jobs on shards of one GPU each measure the whole GPU's counter. Each step's agent therefore also
watches who runs on its GPUs (nvmlDeviceGetComputeRunningProcesses) and their per-process SM samples
(nvmlDeviceGetProcessUtilization): at every sample instant its share is its processes' SM utilisation
over all processes'; where NVML has no samples it is an equal split between the jobs present. Both
agents apply the same rule to the same instants, so their shares of each interval add up to the
interval's energy: no double counting. A step that never saw another job's process keeps the whole
GPU's energy, unflagged (the exclusive case).

The step's record reaches back to the step's start (easlurm.energy.lead_in), before the agent and this
watcher started: the first look asks NVML for the processes' samples since the step's start, and weighs
that lead-in by the first interval's power, so that the split covers the record's whole window.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import ModuleType
from typing import Any

from easlurm.energy.lead_in import lead_in_s
from easlurm.energy.nvml import NvmlLibrary
from easlurm.energy.nvml_errors import NVML_ERROR_NOT_FOUND, nvml_error_class
from easlurm.errors import SensorError

log = logging.getLogger(__name__)

#: Seconds between looks at who runs on a GPU (nvmlDeviceGetComputeRunningProcesses). While another job
#: is there (and at once when one arrives or leaves), each look also reads the energy counter and the
#: processes' samples; alone, only every ALONE_PERIOD_S: the counter read costs milliseconds of CPU
#: (about 4 ms on an H100), too much for every step at 2 Hz.
SHARE_PERIOD_S = 0.5
ALONE_PERIOD_S = 5.0
#: The key of the watching step's own processes.
OWN = "self"


class ShareMethod(StrEnum):
    """How a shared GPU's energy was split (the flag a record carries)."""

    UTILISATION = "utilisation"
    TIME = "time"


@dataclass(frozen=True)
class Sample:
    """One per-process utilisation sample (NVML's timeStamp is in us)."""

    pid: int
    time_us: int
    sm_util: float


def instant_shares(samples: Iterable[Sample], owner: Mapping[int, str]) -> list[float]:
    """The own share at each sample instant with any SM activity: own SM % / all SM %."""
    by_t: dict[int, list[float]] = {}
    for s in samples:
        own, total = by_t.setdefault(s.time_us, [0.0, 0.0])
        by_t[s.time_us] = [own + (s.sm_util if owner.get(s.pid) == OWN else 0.0), total + s.sm_util]
    return [own / total for own, total in (by_t[t] for t in sorted(by_t)) if total > 0]


def time_share(owners: set[str]) -> float | None:
    """Equal split between the jobs present; None when nobody is on the GPU (keep the last share)."""
    if not owners:
        return None
    return 1.0 / len(owners) if OWN in owners else 0.0


@dataclass
class GpuShare:
    """One GPU over the step: energy seen (J), the step's share of it, and who else was there."""

    index: int
    total_j: float = 0.0
    own_j: float = 0.0
    others: set[str] = field(default_factory=set)
    shared_j: float = 0.0  # energy of the intervals another job was on the GPU
    by_utilisation_j: float = 0.0  # ... of which split by SM samples

    @property
    def shared(self) -> bool:
        return bool(self.others)

    @property
    def fraction(self) -> float | None:
        return self.own_j / self.total_j if self.total_j > 0 else None

    @property
    def method(self) -> ShareMethod:
        """Utilisation when most of the shared energy was split by samples."""
        if self.by_utilisation_j >= 0.5 * self.shared_j:
            return ShareMethod.UTILISATION
        return ShareMethod.TIME


class ProcessOwners:
    """Who a GPU process belongs to: the step (a descendant of its slurmstepd), else the Slurm job in its
    environment, else the process itself. Answers are cached per pid (reads /proc: the agent is root)."""

    def __init__(self, own_root_pid: int | None, proc: Path = Path("/proc")) -> None:
        self.own_root = own_root_pid
        self.proc = proc
        self._cache: dict[int, str] = {}

    def _parent(self, pid: int) -> int | None:
        try:
            stat = (self.proc / str(pid) / "stat").read_text()
            return int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None

    def _job(self, pid: int) -> str | None:
        try:
            env = (self.proc / str(pid) / "environ").read_bytes()
        except OSError:
            return None
        for item in env.split(b"\0"):
            if item.startswith(b"SLURM_JOB_ID="):
                return "job" + item[len(b"SLURM_JOB_ID=") :].decode("ascii", "replace")
        return None

    def _is_own(self, pid: int) -> bool:
        cur: int | None = pid
        for _ in range(64):  # ancestry is short; the bound guards against a loop in a racing /proc
            if cur is None or cur <= 1:
                return False
            if cur == self.own_root:
                return True
            cur = self._parent(cur)
        return False

    def owner(self, pid: int) -> str:
        """OWN, "job<id>" or "pid<pid>" (a process already gone when first seen is not the step's)."""
        if pid not in self._cache:
            self._cache[pid] = OWN if self._is_own(pid) else self._job(pid) or f"pid{pid}"
        return self._cache[pid]


class _Gpu:
    def __init__(self, index: int, handle: Any, energy_mj: float, since: float | None = None) -> None:
        self.share = GpuShare(index)
        self.handle = handle
        self.last_mj = energy_mj
        now = time.time()
        #: the lead-in (s) the first look covers before the first counter read; samples are asked from its start
        self.lead_s = lead_in_s(since, now) or 0.0
        self.last_us = int((now - self.lead_s) * 1e6)
        self.last_fraction = 1.0
        self.last_full = time.monotonic()
        self.others_last = False


class ShareWatcher:
    """Apportions the step's GPUs while it runs: start(), then stop() returns {index: GpuShare}.

    A named daemon thread looks every `period_s`; every failure degrades to "not apportioned" (logged),
    never to an error of the step."""

    def __init__(
        self,
        gpus: Sequence[int],
        own_root_pid: int | None,
        nvml_module: str = "pynvml",
        period_s: float = SHARE_PERIOD_S,
        owners: ProcessOwners | None = None,
        since: float | None = None,
    ) -> None:
        self.indices = list(gpus)
        #: when the step started (unix s): the first look covers its lead-in from there
        self.since = since
        self.lib = NvmlLibrary(nvml_module)
        self.period_s = period_s
        self.owners = owners or ProcessOwners(own_root_pid)
        self._nvml: ModuleType | None = None
        self._gpus: list[_Gpu] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> bool:
        """Open NVML and read every GPU's counter; False (logged) when this cannot apportion."""
        if not self.indices:
            return False
        try:
            nvml = self.lib.acquire()
        except SensorError as exc:
            log.info("GPU sharing not watched: %s", exc)
            return False
        self._nvml = nvml
        if not hasattr(nvml, "nvmlDeviceGetComputeRunningProcesses"):
            log.info("GPU sharing not watched: this NVML binding has no process query")
            self.close()
            return False
        try:
            for idx in self.indices:
                h = nvml.nvmlDeviceGetHandleByIndex(idx)
                nvml.nvmlDeviceGetComputeRunningProcesses(h)
                energy_mj = float(nvml.nvmlDeviceGetTotalEnergyConsumption(h))
                self._gpus.append(_Gpu(idx, h, energy_mj, self.since))
        except nvml.NVMLError as exc:
            log.info("GPU sharing not watched: %s", exc)
            self.close()
            return False
        self._thread = threading.Thread(target=self._run, name="easlurm-gpu-share", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.tick()

    def tick(self, full: bool = False) -> None:
        """One look at every GPU: the energy since the last full look, split by who ran there."""
        nvml = self._nvml
        if nvml is None:
            return
        with self._lock:
            for gpu in self._gpus:
                try:
                    self._tick_gpu(nvml, gpu, full)
                except nvml.NVMLError as exc:
                    if nvml_error_class(exc) != "transient":
                        log.warning("gpu%d: sharing no longer watched: %s", gpu.share.index, exc)
                        self._gpus.remove(gpu)
                        break

    def _tick_gpu(self, nvml: ModuleType, gpu: _Gpu, full: bool) -> None:
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(gpu.handle)
        present = {self.owners.owner(int(p.pid)) for p in procs}
        others_now = bool(present - {OWN})
        shared = others_now or gpu.others_last
        if not (full or shared or time.monotonic() - gpu.last_full >= ALONE_PERIOD_S):
            return
        samples: list[Sample] = []
        if shared:
            try:
                raw = nvml.nvmlDeviceGetProcessUtilization(gpu.handle, gpu.last_us)
                samples = [Sample(int(s.pid), int(s.timeStamp), float(s.smUtil)) for s in raw]
            except nvml.NVMLError as exc:
                # NOT_FOUND: no sample since the last look; NOT_SUPPORTED: no per-process accounting
                if getattr(exc, "value", None) != NVML_ERROR_NOT_FOUND and nvml_error_class(exc) == "gone":
                    raise
        now_us = int(time.time() * 1e6)
        energy_mj = float(nvml.nvmlDeviceGetTotalEnergyConsumption(gpu.handle))
        delta_j = max(energy_mj - gpu.last_mj, 0.0) * 1e-3
        now_mono = time.monotonic()
        span_s = now_mono - gpu.last_full
        if gpu.lead_s > 0 and span_s > 0:  # the lead-in at this first interval's power
            delta_j += delta_j * gpu.lead_s / span_s
            gpu.lead_s = 0.0
        gpu.last_mj, gpu.last_full = energy_mj, now_mono
        owner = {s.pid: self.owners.owner(s.pid) for s in samples}
        present |= set(owner.values())
        gpu.last_us = max((s.time_us for s in samples), default=now_us) if shared else now_us
        shares = instant_shares(samples, owner)
        fraction = sum(shares) / len(shares) if shares else time_share(present)
        if fraction is None:
            fraction = gpu.last_fraction
        gpu.last_fraction = fraction
        if shared:
            gpu.share.shared_j += delta_j
            gpu.share.by_utilisation_j += delta_j if shares else 0.0
        gpu.others_last = others_now
        gpu.share.others |= present - {OWN}
        gpu.share.total_j += delta_j
        gpu.share.own_j += fraction * delta_j

    def stop(self) -> dict[int, GpuShare]:
        """A last look, then the GPUs' shares (only those that saw another job)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self.tick(full=True)
        out = {g.share.index: g.share for g in self._gpus if g.share.shared}
        self.close()
        return out

    def close(self) -> None:
        if self._nvml is not None:
            self._nvml = None
            self.lib.release()
