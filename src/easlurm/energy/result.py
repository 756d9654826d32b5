"""Profile results: per-device and per-region energy records, totals as properties, JSON/CSV forms."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from easlurm.errors import SensorError

SCHEMA_VERSION = 1


class DeviceKind(StrEnum):
    """The closed set of device kinds a sensor measures."""

    GPU = "gpu"
    CPU = "cpu"
    DRAM = "dram"


@dataclass
class DeviceEnergy:
    """Energy of one device over the profiled window; `None` where the sensor could not tell. The step
    record's DeviceRecord (easlurm.accounting.step_record) is this plus how a shared GPU was split, so the
    field order here is the order of the records on disk and in AdminComment."""

    name: str
    kind: str
    energy_j: float | None
    mean_power_w: float | None = None
    samples: int = 0
    modelled: bool = False
    source: str = ""
    error: str | None = None
    #: False for RAPL sub-domains (core, uncore, psys) that another domain already contains.
    in_total: bool = True
    #: The window this device's readings span (first to last sample), s.
    duration_s: float | None = None
    #: the highest sampled power over the window, W (None in records written before it was kept)
    peak_power_w: float | None = None
    #: A GPU's mean utilisation (%, NVML's busy share of time) and peak memory in use (bytes) of its
    #: total; None where the device does not report them (or a record written before they were kept).
    #: A shared GPU's are the whole GPU's.
    mean_util_pct: float | None = None
    peak_memory_bytes: int | None = None
    memory_total_bytes: int | None = None
    #: The lead-in (easlurm.energy.lead_in): seconds before the profiler's first sample, from the measured
    #: work's start, covered by samples the device kept (NVML's driver power buffer) and extrapolated
    #: from the first measured power; both in `duration_s` and their energy in `energy_j`. None: no
    #: lead-in was covered (none asked for, none to cover, or a record written before it was kept).
    lead_in_buffered_s: float | None = None
    lead_in_extrapolated_s: float | None = None

    @property
    def edp(self) -> float | None:
        """Energy-delay product of this device (J*s)."""
        if self.energy_j is None or self.duration_s is None:
            return None
        return self.energy_j * self.duration_s


@dataclass
class RegionEnergy:
    """Energy per device between `region()` entry and exit (a mark has start == end)."""

    name: str
    start_s: float
    end_s: float | None
    energy_j: dict[str, float | None] = field(default_factory=dict)

    @property
    def duration_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.start_s

    @property
    def total_energy_j(self) -> float | None:
        return sum_known(self.energy_j.values())


def sum_known(values: Iterable[float | None]) -> float | None:
    """Sum of the known values; None when none is known (a missing value never counts as 0)."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


@dataclass(frozen=True)
class CpuShare:
    """A job's CPU time over a profiled window, the other jobs' on its node, and the job's share of the
    node's CPU package and DRAM energy that follows (measured by easlurm.energy.cpu_share)."""

    job_id: int | None
    job_cpu_s: float | None
    #: other jobs' CPU time over the window, by job (only those that used some)
    others_cpu_s: dict[int, float]
    source: str

    #: Other jobs under this share of all the jobs' CPU time (an idle job's slurmstepd ticking) leave the
    #: node unshared: the job keeps the whole energy (an over-count of at most 1%, not a record flagged
    #: on every node that hosts an idle job too).
    NEGLIGIBLE = 0.01
    #: Nor do other jobs that used under this many CPU-seconds over the whole window, whatever this job's
    #: own: a slurmstepd starting or cleaning up after its job (tens of ms) would otherwise take nearly all
    #: of a job's share that only sleeps on its GPUs.
    NEGLIGIBLE_CPU_S = 0.1

    @property
    def shared(self) -> bool:
        others = sum(self.others_cpu_s.values())
        if others <= self.NEGLIGIBLE_CPU_S:
            return False
        return self.job_cpu_s is None or others > self.NEGLIGIBLE * (others + self.job_cpu_s)

    @property
    def fraction(self) -> float | None:
        """This job's share (0..1); 1 on a node no other job used; None when it cannot be told."""
        if self.job_id is None:
            return None
        if not self.shared:
            return 1.0
        if self.job_cpu_s is None:
            return None
        total = self.job_cpu_s + sum(self.others_cpu_s.values())
        return min(1.0, max(0.0, self.job_cpu_s / total)) if total > 0 else None


@dataclass
class ProfileResult:
    """What one profiled run consumed; totals sum only top-level devices (no double counting)."""

    host: str
    start_time: float
    duration_s: float
    devices: list[DeviceEnergy] = field(default_factory=list)
    regions: list[RegionEnergy] = field(default_factory=list)
    marks: list[RegionEnergy] = field(default_factory=list)
    interval_s: float | None = None
    sampler_cpu_s: float | None = None
    #: Requested kinds with no sensor on this host (see Discovery.no_sensor): unknown, not zero.
    no_sensor: list[str] = field(default_factory=list)
    #: This job's share of the node's CPU time over the run (easlurm.energy.cpu_share), which the node
    #: agent applies to the CPU and DRAM devices; None where CPU/DRAM were not read here.
    cpu_share: CpuShare | None = None

    def _kind_total(self, kind: DeviceKind | None) -> float | None:
        chosen = [d for d in self.devices if d.in_total and (kind is None or d.kind == kind.value)]
        return sum_known(d.energy_j for d in chosen)

    @property
    def total_energy_j(self) -> float | None:
        return self._kind_total(None)

    @property
    def gpu_energy_j(self) -> float | None:
        return self._kind_total(DeviceKind.GPU)

    @property
    def cpu_energy_j(self) -> float | None:
        return self._kind_total(DeviceKind.CPU)

    @property
    def dram_energy_j(self) -> float | None:
        return self._kind_total(DeviceKind.DRAM)

    @property
    def edp(self) -> float | None:
        """Energy-delay product of the whole run (J*s)."""
        total = self.total_energy_j
        return None if total is None else total * self.duration_s

    @property
    def mean_power_w(self) -> float | None:
        total = self.total_energy_j
        if total is None or self.duration_s <= 0:
            return None
        return total / self.duration_s

    def device(self, name: str) -> DeviceEnergy:
        for dev in self.devices:
            if dev.name == name:
                return dev
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe document with snake_case keys, units in names and a schema_version."""
        return {
            "schema_version": SCHEMA_VERSION,
            "host": self.host,
            "start_time": self.start_time,
            "duration_s": self.duration_s,
            "interval_s": self.interval_s,
            "sampler_cpu_s": self.sampler_cpu_s,
            "total_energy_j": self.total_energy_j,
            "gpu_energy_j": self.gpu_energy_j,
            "cpu_energy_j": self.cpu_energy_j,
            "dram_energy_j": self.dram_energy_j,
            "mean_power_w": self.mean_power_w,
            "edp_j_s": self.edp,
            "devices": [{**asdict(d), "edp_j_s": d.edp} for d in self.devices],
            "regions": [_region_dict(r) for r in self.regions],
            "marks": [_region_dict(r) for r in self.marks],
            "no_sensor": list(self.no_sensor),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProfileResult:
        """Inverse of to_dict; derived totals are recomputed, not trusted."""
        version = d.get("schema_version")
        if version != SCHEMA_VERSION:
            raise SensorError(f"profile result: unsupported schema_version {version!r}")
        dev_fields = set(DeviceEnergy.__dataclass_fields__)
        try:
            return cls(
                host=d["host"],
                start_time=float(d["start_time"]),
                duration_s=float(d["duration_s"]),
                devices=[
                    DeviceEnergy(**{k: v for k, v in x.items() if k in dev_fields}) for x in d["devices"]
                ],
                regions=[_region_from(x) for x in d.get("regions", [])],
                marks=[_region_from(x) for x in d.get("marks", [])],
                interval_s=d.get("interval_s"),
                sampler_cpu_s=d.get("sampler_cpu_s"),
                no_sensor=[str(k) for k in d.get("no_sensor", [])],
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SensorError(f"profile result: malformed document ({exc})") from exc

    def to_csv(self) -> str:
        """One row per device (energy, power, EDP), for spreadsheets."""
        buf = io.StringIO()
        cols = [
            "host",
            "name",
            "kind",
            "source",
            "modelled",
            "in_total",
            "energy_j",
            "mean_power_w",
            "peak_power_w",
            "duration_s",
            "edp_j_s",
            "samples",
            "error",
            "mean_util_pct",
            "peak_memory_bytes",
            "memory_total_bytes",
        ]
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(cols)
        for dev in self.devices:
            row = {**asdict(dev), "host": self.host, "edp_j_s": dev.edp}
            writer.writerow(["" if row[c] is None else row[c] for c in cols])
        return buf.getvalue()


def _region_dict(r: RegionEnergy) -> dict[str, Any]:
    return {
        "name": r.name,
        "start_s": r.start_s,
        "end_s": r.end_s,
        "duration_s": r.duration_s,
        "total_energy_j": r.total_energy_j,
        "energy_j": dict(r.energy_j),
    }


def _region_from(d: dict[str, Any]) -> RegionEnergy:
    return RegionEnergy(
        name=d["name"], start_s=d["start_s"], end_s=d.get("end_s"), energy_j=dict(d["energy_j"])
    )
