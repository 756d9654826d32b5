"""RAPL through powercap sysfs: package/core/uncore/dram/psys zones of every socket, Intel and AMD."""

from __future__ import annotations

import contextlib
import logging
import os
import re
from pathlib import Path

from easlurm.energy.result import DeviceKind
from easlurm.energy.sensor import CounterUnwrap, Mode, Sensor, SensorStatus
from easlurm.errors import SensorError

log = logging.getLogger(__name__)

#: Zone directories as the kernel names them (intel_rapl_msr also serves AMD); `-mmio` zones duplicate
#: the MSR package zone and are skipped so that nothing is counted twice.
_ZONE = re.compile(r"^(intel-rapl|amd-rapl):(\d+)(?::(\d+))?$")
#: Zones that another zone already contains are reported but left out of the totals.
_SUBDOMAINS = {"core", "uncore", "psys"}
ROOT_ONLY_HINT = (
    "energy_uj is readable by root only (Linux >= 5.10, CVE-2020-8694): run as root, "
    "or let the node agent read it, or chmod o+r it"
)


def _read_fd(fd: int) -> str:
    return os.pread(fd, 64, 0).decode().strip()


class RaplSensor(Sensor):
    """One powercap zone; energy_uj is a wrapping microjoule counter, max_energy_range_uj its range."""

    source = "rapl"
    mode = Mode.ENERGY
    update_period_s = 0.001

    def __init__(self, zone_dir: Path, name: str, kind: DeviceKind, in_total: bool) -> None:
        self.zone_dir = zone_dir
        self.name = name
        self.kind = kind
        self.in_total = in_total
        self._fd: int | None = None
        self._unwrap: CounterUnwrap | None = None

    def open(self) -> None:
        path = self.zone_dir / "energy_uj"
        try:
            max_range = float((self.zone_dir / "max_energy_range_uj").read_text().strip())
        except (OSError, ValueError):
            max_range = None
        try:
            self._fd = os.open(path, os.O_RDONLY)
            _read_fd(self._fd)
        except PermissionError as exc:
            self.close()
            raise SensorError(f"{path}: {ROOT_ONLY_HINT}") from exc
        except OSError as exc:
            self.close()
            raise SensorError(f"{path}: cannot read ({exc.strerror})") from exc
        self._unwrap = CounterUnwrap(max_range)

    def read(self) -> float | None:
        if self._fd is None or self._unwrap is None:
            raise SensorError(f"{self.name}: sensor not open")
        try:
            raw = float(_read_fd(self._fd))
        except ValueError:
            return None  # a torn or empty read: skip this sample
        except OSError as exc:
            raise SensorError(f"{self.zone_dir}/energy_uj: {exc.strerror}") from exc
        return self._unwrap.update(raw) * 1e-6

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def describe(self) -> str:
        return f"powercap {self.zone_dir.name} ({self.zone_dir})"


def _zone_label(zone_name: str, socket: int) -> tuple[str, DeviceKind, bool]:
    """package-0 -> (package-0, cpu, True); dram -> (dram-0, dram, True); core -> (core-0, cpu, False)."""
    base = zone_name.split("-")[0]
    kind = DeviceKind.DRAM if base == "dram" else DeviceKind.CPU
    in_total = base not in _SUBDOMAINS
    label = zone_name if re.search(r"-\d+$", zone_name) else f"{zone_name}-{socket}"
    return label, kind, in_total


def discover_rapl(root: str | Path) -> tuple[list[RaplSensor], list[SensorStatus]]:
    """Every RAPL zone under a powercap root (real /sys/class/powercap or a fake tree), unopened."""
    root = Path(root)
    sensors: list[RaplSensor] = []
    statuses: list[SensorStatus] = []
    if not root.is_dir():
        statuses.append(SensorStatus("rapl", "cpu", "rapl", False, f"{root} does not exist (no powercap)"))
        return sensors, statuses
    zones = []
    for entry in root.iterdir():
        m = _ZONE.match(entry.name)
        if m:
            zones.append((int(m.group(2)), -1 if m.group(3) is None else int(m.group(3)), entry))
    if not zones:
        statuses.append(SensorStatus("rapl", "cpu", "rapl", False, f"no intel-rapl zones under {root}"))
    seen: set[str] = set()
    for socket, sub, entry in sorted(zones):
        try:
            zone_name = (entry / "name").read_text().strip()
        except OSError as exc:
            statuses.append(
                SensorStatus(entry.name, "cpu", "rapl", False, f"unreadable name ({exc.strerror})")
            )
            continue
        if sub >= 0:
            try:
                parent = (root / f"{entry.name.rsplit(':', 1)[0]}" / "name").read_text().strip()
                socket = int(parent.rsplit("-", 1)[1]) if parent.startswith("package-") else socket
            except (OSError, ValueError, IndexError):
                pass
        label, kind, in_total = _zone_label(zone_name, socket)
        if label in seen:
            label = f"{label}.{entry.name}"
        seen.add(label)
        sensors.append(RaplSensor(entry.resolve(), label, kind, in_total))
    return sensors, statuses
