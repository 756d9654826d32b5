"""AMD GPUs through amdsmi (not installed here): the sensor against a stub with amdsmi's call shapes."""

from __future__ import annotations

import sys
import time
import types

import pytest

from easlurm.energy.amd import discover_amdsmi
from easlurm.energy.sampler import SamplingThread, SensorSampler


def _stub(power_w: float, energy: bool = True) -> types.ModuleType:
    mod = types.ModuleType("fake_amdsmi")
    t0 = time.monotonic()
    resolution_uj = 15.3

    class AmdSmiException(Exception):
        pass

    def get_energy_count(h: int) -> dict[str, float]:
        if not energy:
            raise AmdSmiException("not supported")
        uj = power_w * (time.monotonic() - t0) * 1e6
        return {"energy_accumulator": uj / resolution_uj, "counter_resolution": resolution_uj, "timestamp": 0}

    mod.AmdSmiException = AmdSmiException  # type: ignore[attr-defined]
    mod.amdsmi_init = lambda *a: None  # type: ignore[attr-defined]
    mod.amdsmi_get_processor_handles = lambda: [101, 102]  # type: ignore[attr-defined]
    mod.amdsmi_get_energy_count = get_energy_count  # type: ignore[attr-defined]
    mod.amdsmi_get_power_info = lambda h: {"current_socket_power": power_w, "average_socket_power": "N/A"}  # type: ignore[attr-defined]
    return mod


@pytest.mark.parametrize("energy", [True, False])
def test_amd_energy_matches_power_times_duration(monkeypatch: pytest.MonkeyPatch, energy: bool) -> None:
    monkeypatch.setitem(sys.modules, "fake_amdsmi", _stub(420.0, energy))
    sensors, statuses = discover_amdsmi("fake_amdsmi")
    assert [s.name for s in sensors] == ["gpu0", "gpu1"] and statuses == []
    sensors[0].open()
    assert sensors[0].mode.value == ("energy" if energy else "power")
    sp = SensorSampler(sensors[0])
    thread = SamplingThread([sp], 0.02)
    thread.start()
    time.sleep(0.4)
    thread.stop()
    d = sp.integrator.duration_s
    assert sp.error is None and d is not None
    assert sp.integrator.energy_j == pytest.approx(420.0 * d, rel=0.01)


def test_amdsmi_missing_is_explained() -> None:
    sensors, statuses = discover_amdsmi("no_such_amdsmi_module")
    assert sensors == [] and "not installed" in statuses[0].detail
