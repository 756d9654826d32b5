"""Find and open the sensors for a device list: backends tried in order, each failure explained."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from easlurm.energy.amd import discover_amdsmi
from easlurm.energy.dram import DramModelSensor
from easlurm.energy.gpus import job_gpus
from easlurm.energy.nvml import NO_SUCH_GPU, discover_nvml
from easlurm.energy.perf import discover_perf
from easlurm.energy.rapl import discover_rapl
from easlurm.energy.result import DeviceKind
from easlurm.energy.sensor import Sensor, SensorStatus
from easlurm.energy.smi import discover_smi
from easlurm.errors import ConfigError, SensorError

log = logging.getLogger(__name__)


def parse_devices(devices: str | Sequence[str]) -> list[DeviceKind]:
    """'gpu,cpu,dram' (or a list) -> kinds; an unknown name is a ConfigError naming the known ones."""
    names = devices.split(",") if isinstance(devices, str) else list(devices)
    kinds: list[DeviceKind] = []
    known = ", ".join(k.value for k in DeviceKind)
    for raw in names:
        name = raw.strip().lower()
        if not name:
            continue
        try:
            kind = DeviceKind(name)
        except ValueError:
            raise ConfigError(f"unknown device {raw.strip()!r} (known: {known})") from None
        if kind not in kinds:
            kinds.append(kind)
    if not kinds:
        raise ConfigError(f"no device selected (known: {known})")
    return kinds


@dataclass
class Discovery:
    """Sensors that opened, sensors that failed to open (with why), and the probe report."""

    sensors: list[Sensor] = field(default_factory=list)
    failed: list[tuple[Sensor, str]] = field(default_factory=list)
    statuses: list[SensorStatus] = field(default_factory=list)
    #: Requested kinds (gpu, cpu) with no sensor at all on this host, or a requested GPU that does not
    #: exist, each with why: measured as nothing, which is not zero (never set for DRAM: it has a model).
    no_sensor: dict[str, str] = field(default_factory=dict)

    def _has(self, kind: DeviceKind) -> bool:
        """A sensor of this kind was found (it may have failed to open: that is `degraded`, not missing)."""
        return any(s.kind is kind for s in self.sensors) or any(s.kind is kind for s, _ in self.failed)

    def _why_not(self, kind: str) -> str:
        """One line: no sensor of this kind, and the first backend's reason."""
        reasons = [s.detail for s in self.statuses if s.kind == kind and not s.available and s.detail]
        return f"no {kind.upper()} sensor on this host" + (
            f" ({reasons[0].splitlines()[0]})" if reasons else ""
        )

    def _try_open(self, sensor: Sensor) -> bool:
        try:
            sensor.open()
        except SensorError as exc:
            self.failed.append((sensor, str(exc)))
            self.statuses.append(SensorStatus(sensor.name, sensor.kind.value, sensor.source, False, str(exc)))
            return False
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}"
            self.failed.append((sensor, why))
            self.statuses.append(SensorStatus(sensor.name, sensor.kind.value, sensor.source, False, why))
            return False
        self.sensors.append(sensor)
        self.statuses.append(
            SensorStatus(sensor.name, sensor.kind.value, sensor.source, True, sensor.describe())
        )
        return True

    def close(self) -> None:
        for s in self.sensors:
            try:
                s.close()
            except Exception as exc:
                log.debug("closing %s: %s", s.name, exc)


def _guarded(
    d: Discovery, name: str, kind: str, probe: Callable[[], tuple[Sequence[Sensor], list[SensorStatus]]]
) -> list[Sensor]:
    """Run one backend's probe; an unexpected failure (unreadable sysfs, a bad variable) becomes a status."""
    try:
        sensors, statuses = probe()
    except Exception as exc:
        d.statuses.append(SensorStatus(name, kind, name, False, f"{type(exc).__name__}: {exc}"))
        return []
    d.statuses.extend(statuses)
    return list(sensors)


def discover(
    kinds: Sequence[DeviceKind],
    interval_s: float = 0.1,
    gpus: Sequence[str] | None = None,
    pids: Sequence[int] = (),
    powercap_root: str | Path = "/sys/class/powercap",
    nvml_module: str = "pynvml",
    node_level: bool = True,
    gpu_level: bool = True,
) -> Discovery:
    """Open every sensor for `kinds`; never raises. node_level=False skips CPU/DRAM (another MPI rank
    reads them)."""
    d = Discovery()
    if DeviceKind.GPU in kinds and gpu_level:
        try:
            refs = job_gpus(gpus)
        except ConfigError as exc:
            d.statuses.append(SensorStatus("gpus", "gpu", "nvml", False, str(exc)))
            refs = []
        nv = _guarded(d, "nvml", "gpu", lambda: discover_nvml(nvml_module, refs))
        for s in nv:
            d._try_open(s)
        if not nv and any(x.name == "nvml" and not x.available for x in d.statuses):
            # The library itself did not load: fall back to nvidia-smi.
            for s in _guarded(d, "nvidia-smi", "gpu", lambda: discover_smi(refs, interval_s)):
                d._try_open(s)
        for s in _guarded(d, "amdsmi", "gpu", discover_amdsmi):
            d._try_open(s)
        absent = [x.name for x in d.statuses if x.kind == "gpu" and x.detail == NO_SUCH_GPU]
        if absent:
            d.no_sensor["gpu"] = f"no GPU {','.join(absent)} on this host"
        elif refs != [] and not d._has(DeviceKind.GPU):  # [] = the step has no GPU here: none wanted
            d.no_sensor["gpu"] = d._why_not("gpu")
    if not node_level:
        return d
    want_cpu, want_dram = DeviceKind.CPU in kinds, DeviceKind.DRAM in kinds
    have_dram = False
    if want_cpu or want_dram:
        zones = _guarded(d, "rapl", "cpu", lambda: discover_rapl(powercap_root))
        for z in zones:
            if (z.kind is DeviceKind.CPU and want_cpu) or (z.kind is DeviceKind.DRAM and want_dram):
                opened = d._try_open(z)
                have_dram = have_dram or (opened and z.kind is DeviceKind.DRAM)
        if want_cpu and not any(z.kind is DeviceKind.CPU for z in zones):
            for s in _guarded(d, "perf", "cpu", lambda: discover_perf(interval_s)):
                d._try_open(s)
        if want_cpu and not d._has(DeviceKind.CPU):
            d.no_sensor["cpu"] = d._why_not("cpu")
    if want_dram and not have_dram:
        d._try_open(DramModelSensor(pids))
    return d
