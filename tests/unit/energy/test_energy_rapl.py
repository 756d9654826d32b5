"""RAPL through powercap: the real zone layout, wrap-around through max_energy_range_uj, root-only files."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from easlurm_fakes.powercap import FakePowercap

from easlurm.energy import EnergyProfiler
from easlurm.energy.rapl import RaplSensor, discover_rapl
from easlurm.errors import SensorError


def test_discovery_names_kinds_and_totals(powercap: FakePowercap) -> None:
    sensors, statuses = discover_rapl(powercap.root)
    assert statuses == []
    by_name = {s.name: s for s in sensors}
    assert set(by_name) == {"package-0", "core-0", "dram-0", "package-1", "core-1", "dram-1"}
    assert by_name["dram-1"].kind.value == "dram" and by_name["dram-1"].in_total
    assert by_name["core-0"].kind.value == "cpu" and not by_name["core-0"].in_total
    assert by_name["package-1"].in_total


def test_psys_and_mmio_zones(tmp_path: Path) -> None:
    fp = FakePowercap(tmp_path / "pc", sockets=1, subzones=("core", "uncore"), psys=True)
    mmio = tmp_path / "pc" / "intel-rapl-mmio:0"
    mmio.mkdir()
    (mmio / "name").write_text("package-0\n")
    try:
        sensors, _ = discover_rapl(fp.root)
        names = {s.name: s.in_total for s in sensors}
        assert names == {"package-0": True, "core-0": False, "uncore-0": False, "psys-1": False}
    finally:
        fp.close()


def test_missing_powercap_is_explained(tmp_path: Path) -> None:
    sensors, statuses = discover_rapl(tmp_path / "nothing")
    assert sensors == [] and not statuses[0].available and "does not exist" in statuses[0].detail


def test_reading_handles_wrap_around(powercap: FakePowercap) -> None:
    """Counter 5 J below its range, then +12 J: the sensor must report 12 J, not a negative jump."""
    top = powercap.max_range_uj
    powercap.set_energy_uj("package-0", top - 5_000_000)
    sensor = RaplSensor(powercap.zones["package-0"], "package-0", *_cpu())
    sensor.open()
    try:
        assert sensor.read() == 0.0
        powercap.advance("package-0", 3.0)
        assert sensor.read() == pytest.approx(3.0)
        powercap.advance("package-0", 9.0)  # wraps
        assert powercap.energy_uj("package-0") < top - 5_000_000
        assert sensor.read() == pytest.approx(12.0)
    finally:
        sensor.close()


def _cpu() -> tuple:
    from easlurm.energy.result import DeviceKind

    return (DeviceKind.CPU, True)


def test_root_only_energy_gives_a_clear_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fp = FakePowercap(tmp_path / "pc", sockets=1, subzones=(), root_only=True)
    try:
        assert (fp.zones["package-0"] / "energy_uj").stat().st_mode & 0o777 == 0o400
        if os.geteuid() == 0:  # root reads 0400 files anyway: simulate the kernel's refusal
            real_open = os.open

            def deny(path: os.PathLike[str] | str, flags: int, *a: object) -> int:
                if str(path).endswith("energy_uj") and not flags & os.O_WRONLY:
                    raise PermissionError(13, "Permission denied")
                return real_open(path, flags, *a)  # type: ignore[arg-type]

            monkeypatch.setattr(os, "open", deny)
        sensor = RaplSensor(fp.zones["package-0"], "package-0", *_cpu())
        with pytest.raises(SensorError, match="root only"):
            sensor.open()
    finally:
        fp.close()


def test_measured_energy_matches_power_times_duration(powercap: FakePowercap) -> None:
    """A ticker adds 80 W to package-0 and 6 W to dram-1: the profiler must agree within 1%."""
    powercap.start_ticker({"package-0": 80.0, "dram-1": 6.0}, period_s=0.002)
    with EnergyProfiler(devices="cpu,dram", interval_s=0.02, powercap_root=powercap.root) as prof:
        time.sleep(1.0)
    powercap.stop_ticker()
    r = prof.result
    assert r is not None
    pkg, dram = r.device("package-0"), r.device("dram-1")
    assert pkg.duration_s is not None and pkg.energy_j is not None and dram.energy_j is not None
    assert pkg.energy_j == pytest.approx(80.0 * pkg.duration_s, rel=0.03)  # the fake ticks every 2 ms
    assert dram.energy_j == pytest.approx(6.0 * pkg.duration_s, rel=0.03)
    assert not dram.modelled and dram.source == "rapl"
    # RAPL has dram domains here: the DRAM model must not be used.
    assert all(d.source != "dram-model" for d in r.devices)
    assert r.cpu_energy_j == pytest.approx(pkg.energy_j + r.device("package-1").energy_j)  # type: ignore[operator]
