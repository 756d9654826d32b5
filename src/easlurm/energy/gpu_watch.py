"""A job's GPUs watched live: utilisation, memory, compute processes and power limit from NVML, and the
rule that tells an allocated GPU idle (no compute process, utilisation at or under a threshold, for a time)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from easlurm.energy.nvml import NvmlLibrary
from easlurm.energy.nvml_errors import nvml_error_class
from easlurm.errors import SensorError

log = logging.getLogger(__name__)

#: Seconds between power-limit reads: a limit changes when the scheduler caps a step, rarely.
LIMIT_PERIOD_S = 30.0
#: Episodes kept per GPU in a record; later ones are merged into the last kept (energy summed, span
#: widened), so that a GPU flapping for days cannot grow the AdminComment record without bound.
MAX_EPISODES_PER_GPU = 20


@dataclass(frozen=True)
class IdleRule:
    """A GPU is idle once it has had no compute process and utilisation <= `util_pct` for `after_s`."""

    util_pct: float
    after_s: float


@dataclass
class GpuReading:
    """One GPU at one instant; None where NVML could not tell (unsupported, or a failed read)."""

    index: int
    util_pct: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    processes: int | None = None
    power_limit_w: float | None = None


@dataclass
class IdleEpisode:
    """A stretch of time a GPU was idle: `start` when it went quiet, `end` when it was used again or the
    step ended (unix s), and the energy it drew in between (J; None when unknown)."""

    gpu: str
    start: float
    end: float
    energy_j: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "start": self.start, "end": self.end, "energy_j": self.energy_j}


@dataclass
class IdleTracker:
    """The idle rule applied to one GPU's readings, in time order (pure: no NVML, no clock).

    `observe` returns the seconds the GPU has been quiet when an episode starts (the moment a site's
    action runs), else None. An unknown utilisation is never quiet (nothing is claimed that was not
    seen); unknown processes (NVML cannot list them) leave the utilisation alone to decide."""

    gpu: str
    rule: IdleRule
    episodes: list[IdleEpisode] = field(default_factory=list)
    quiet_since: float | None = None
    quiet_energy_j: float | None = None
    idle: bool = False

    def quiet(self, reading: GpuReading) -> bool:
        if reading.util_pct is None or reading.util_pct > self.rule.util_pct:
            return False
        return not reading.processes

    def observe(self, t: float, reading: GpuReading, energy_j: float | None) -> float | None:
        """One reading at unix time `t`, with the GPU's energy since the step started (J)."""
        if not self.quiet(reading):
            self.close(t, energy_j)
            return None
        if self.quiet_since is None:
            self.quiet_since, self.quiet_energy_j = t, energy_j
        elif self.quiet_energy_j is None:  # the GPU's first energy reading came after it went quiet
            self.quiet_energy_j = energy_j
        if not self.idle and t - self.quiet_since >= self.rule.after_s:
            self.idle = True
            return t - self.quiet_since
        return None

    def close(self, t: float, energy_j: float | None) -> None:
        """The quiet stretch ends at `t` (used again, or the step ended); an idle one becomes an episode."""
        if self.idle and self.quiet_since is not None:
            used = None
            if energy_j is not None and self.quiet_energy_j is not None:
                used = max(energy_j - self.quiet_energy_j, 0.0)
            self._keep(IdleEpisode(self.gpu, self.quiet_since, max(t, self.quiet_since), used))
        self.quiet_since, self.quiet_energy_j, self.idle = None, None, False

    def _keep(self, ep: IdleEpisode) -> None:
        if len(self.episodes) < MAX_EPISODES_PER_GPU:
            self.episodes.append(ep)
            return
        last = self.episodes[-1]
        last.end = ep.end
        last.energy_j = None if last.energy_j is None or ep.energy_j is None else last.energy_j + ep.energy_j

    def idle_energy_j(self, energy_j: float | None) -> float | None:
        """Energy of this GPU's idle episodes so far, the open one up to `energy_j` (J since the step
        began) included; None while an episode's energy is unknown."""
        total = 0.0
        for ep in self.episodes:
            if ep.energy_j is None:
                return None
            total += ep.energy_j
        if self.idle:
            if energy_j is None or self.quiet_energy_j is None:
                return None
            total += max(energy_j - self.quiet_energy_j, 0.0)
        return total

    def idle_s(self, t: float) -> float:
        """Seconds idle so far at `t` (0 when not idle)."""
        return t - self.quiet_since if self.idle and self.quiet_since is not None else 0.0


class GpuReader:
    """Reads the live view of a step's GPUs (by index) from NVML: utilisation and memory each call,
    compute processes each call, the power limit every LIMIT_PERIOD_S. A call NVML does not support on a
    GPU is not asked again; any other error leaves that value unknown for this read. Never raises after
    `open`."""

    def __init__(self, indices: list[int], nvml_module: str = "pynvml") -> None:
        self.indices = list(indices)
        self.lib = NvmlLibrary(nvml_module)
        self.nvml: Any = None
        self.handles: dict[int, Any] = {}
        self.unsupported: set[tuple[int, str]] = set()
        self._limits: dict[int, float | None] = {}
        self._limit_t: float | None = None

    def open(self) -> None:
        """Initialise NVML and find the GPUs; SensorError when NVML or a GPU is not there."""
        self.nvml = self.lib.acquire()
        try:
            for index in self.indices:
                self.handles[index] = self.nvml.nvmlDeviceGetHandleByIndex(index)
        except self.nvml.NVMLError as exc:
            self.close()
            raise SensorError(f"GPU watch: {exc}") from exc

    def close(self) -> None:
        if self.nvml is not None:
            self.nvml = None
            self.lib.release()

    def read(self, now_s: float) -> list[GpuReading]:
        """Every GPU's reading now (`now_s`: monotonic s, paces the limit reads)."""
        if self.nvml is None:
            return [GpuReading(i) for i in self.indices]
        limits_due = self._limit_t is None or now_s - self._limit_t >= LIMIT_PERIOD_S
        if limits_due:
            self._limit_t = now_s
        out = []
        for index, handle in self.handles.items():
            r = GpuReading(index)
            rates = self._call(index, "utilisation", self.nvml.nvmlDeviceGetUtilizationRates, handle)
            if rates is not None and 0 <= float(rates.gpu) <= 100:
                r.util_pct = float(rates.gpu)
            mem = self._call(index, "memory", self.nvml.nvmlDeviceGetMemoryInfo, handle)
            if mem is not None:
                r.memory_used_bytes, r.memory_total_bytes = int(mem.used), int(mem.total)
            procs = self._call(index, "processes", self.nvml.nvmlDeviceGetComputeRunningProcesses, handle)
            r.processes = None if procs is None else len(procs)
            if limits_due:
                mw = self._call(index, "power limit", self.nvml.nvmlDeviceGetPowerManagementLimit, handle)
                self._limits[index] = None if mw is None else float(mw) / 1000.0
            r.power_limit_w = self._limits.get(index)
            out.append(r)
        return out

    def _call(self, index: int, what: str, fn: Any, handle: Any) -> Any:
        if (index, what) in self.unsupported:
            return None
        try:
            return fn(handle)
        except self.nvml.NVMLError as exc:
            if nvml_error_class(exc) == "unsupported":
                log.info("gpu%d: %s not watched (%s)", index, what, exc)
                self.unsupported.add((index, what))
            return None
        except Exception as exc:  # a driver quirk must not stop the watch
            log.info("gpu%d: %s not watched (%s: %s)", index, what, type(exc).__name__, exc)
            self.unsupported.add((index, what))
            return None
