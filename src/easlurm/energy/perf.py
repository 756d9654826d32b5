"""CPU package energy through `perf stat -e power/energy-pkg/`: the AMD fallback where powercap is missing."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from easlurm.energy.result import DeviceKind
from easlurm.energy.sensor import Mode, Sensor, SensorStatus
from easlurm.energy.stream import LineStream
from easlurm.errors import SensorError

log = logging.getLogger(__name__)

EVENTS_DIR = Path("/sys/bus/event_source/devices/power/events")
UNIT_TO_J = {"Joules": 1.0, "J": 1.0, "mJ": 1e-3, "uJ": 1e-6}


def parse_perf_interval_line(line: str) -> tuple[float, float | None, str] | None:
    """`perf stat -x, -I ms` line -> (time s, energy J in that interval or None, event); None for others.

    Example: '     0.100281513,1.92,Joules,power/energy-pkg/,100295345,100.00,,'
    """
    parts = line.strip().split(",")
    if len(parts) < 4 or not parts[0].strip():
        return None
    try:
        t = float(parts[0])
    except ValueError:
        return None
    try:
        value: float | None = float(parts[1]) * UNIT_TO_J.get(parts[2], 1.0)
    except ValueError:
        value = None  # <not counted> / <not supported>
    return t, value, parts[3]


class PerfPkgSensor(Sensor):
    """System-wide package energy from a `perf stat -a -I` child; read() returns J since start."""

    name = "package"
    kind = DeviceKind.CPU
    source = "perf"
    mode = Mode.ENERGY

    def __init__(self, exe: str, interval_s: float, event: str = "power/energy-pkg/") -> None:
        self.exe = exe
        self.event = event
        self.update_period_s = max(interval_s, 0.01)
        ms = max(int(interval_s * 1000), 10)
        self._total_j = 0.0
        self._bad = 0
        self.stream = LineStream(
            [exe, "stat", "-a", "-x,", "-I", str(ms), "-e", event], self._on_line, "stderr"
        )

    def _on_line(self, line: str) -> None:
        parsed = parse_perf_interval_line(line)
        if parsed is None:
            return
        _, value, _ = parsed
        if value is None:
            self._bad += 1
        else:
            self._total_j += value

    def open(self) -> None:
        self.stream.start()

    def read(self) -> float | None:
        if not self.stream.alive and self.stream.error:
            raise SensorError(f"perf: {self.stream.error}")
        return self._total_j

    def close(self) -> None:
        self.stream.stop()

    def describe(self) -> str:
        return f"perf stat -a -e {self.event}"


def discover_perf(
    interval_s: float, events_dir: Path = EVENTS_DIR
) -> tuple[list[PerfPkgSensor], list[SensorStatus]]:
    exe = shutil.which("perf")
    if not exe:
        return [], [SensorStatus("perf", "cpu", "perf", False, "perf not installed")]
    if not (events_dir / "energy-pkg").exists():
        return [], [
            SensorStatus("perf", "cpu", "perf", False, f"no power/energy-pkg event ({events_dir} missing)")
        ]
    try:
        paranoid = int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())
    except (OSError, ValueError):
        paranoid = 2
    if os.geteuid() != 0 and paranoid > 0:
        reason = f"system-wide perf needs root or perf_event_paranoid <= 0 (it is {paranoid})"
        return [], [SensorStatus("perf", "cpu", "perf", False, reason)]
    return [PerfPkgSensor(exe, interval_s)], []
