"""ProfileResult: totals without double counting, None when unknown, JSON round trip, CSV."""

from __future__ import annotations

import csv
import io
import json

import pytest

from easlurm.energy import DeviceEnergy, ProfileResult, RegionEnergy
from easlurm.errors import SensorError


def _result() -> ProfileResult:
    return ProfileResult(
        host="n1",
        start_time=1.7e9,
        duration_s=10.0,
        devices=[
            DeviceEnergy("gpu0", "gpu", 2500.0, 250.0, 100, False, "nvml-energy", peak_power_w=300.0),
            DeviceEnergy(
                "gpu1", "gpu", None, None, 0, False, "nvml-energy", "GPU is lost", peak_power_w=None
            ),
            DeviceEnergy("package-0", "cpu", 800.0, 80.0, 100, False, "rapl", peak_power_w=95.0),
            DeviceEnergy("core-0", "cpu", 500.0, 50.0, 100, False, "rapl", in_total=False, peak_power_w=60.0),
            DeviceEnergy("dram", "dram", 30.0, 3.0, 100, True, "dram-model", peak_power_w=3.0),
        ],
        regions=[RegionEnergy("train", 1.0, 3.0, {"gpu0": 500.0, "gpu1": None})],
    )


def test_totals_skip_subdomains_and_unknown_devices() -> None:
    r = _result()
    assert r.gpu_energy_j == 2500.0
    assert r.cpu_energy_j == 800.0  # core-0 is inside package-0
    assert r.dram_energy_j == 30.0
    assert r.total_energy_j == 3330.0
    assert r.edp == pytest.approx(33300.0)
    assert r.mean_power_w == pytest.approx(333.0)
    assert r.regions[0].total_energy_j == 500.0
    assert r.regions[0].duration_s == 2.0


def test_kinds_without_devices_are_none_not_zero() -> None:
    r = ProfileResult(
        "n",
        0.0,
        1.0,
        devices=[DeviceEnergy("dram", "dram", 3.0, 3.0, 2, True, "dram-model", peak_power_w=3.0)],
    )
    assert r.gpu_energy_j is None and r.cpu_energy_j is None
    empty = ProfileResult("n", 0.0, 1.0)
    assert empty.total_energy_j is None and empty.edp is None and empty.mean_power_w is None


def test_json_round_trip_keeps_everything() -> None:
    r = _result()
    doc = json.loads(json.dumps(r.to_dict()))
    assert doc["schema_version"] == 1
    assert doc["total_energy_j"] == 3330.0
    back = ProfileResult.from_dict(doc)
    assert back.devices == r.devices
    assert back.regions[0].energy_j == r.regions[0].energy_j
    assert back.total_energy_j == r.total_energy_j


def test_from_dict_rejects_other_schema_versions_and_garbage() -> None:
    doc = _result().to_dict()
    with pytest.raises(SensorError, match="schema_version"):
        ProfileResult.from_dict({**doc, "schema_version": 99})
    with pytest.raises(SensorError, match="malformed"):
        ProfileResult.from_dict({"schema_version": 1, "host": "x"})


def test_csv_has_one_row_per_device_with_blank_unknowns() -> None:
    rows = list(csv.DictReader(io.StringIO(_result().to_csv())))
    assert [r["name"] for r in rows] == ["gpu0", "gpu1", "package-0", "core-0", "dram"]
    assert rows[1]["energy_j"] == "" and rows[1]["error"] == "GPU is lost"
    assert rows[4]["modelled"] == "True"
