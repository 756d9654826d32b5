"""Rank 0's aggregation: one entry per device per node (no double counting), totals over nodes."""

from __future__ import annotations

import pytest

from easlurm.energy import DeviceEnergy, ProfileResult
from easlurm.energy.mpi import aggregate


def _rank(host: str, devices: list[DeviceEnergy], duration_s: float = 10.0) -> ProfileResult:
    return ProfileResult(host=host, start_time=1.0, duration_s=duration_s, devices=devices)


def _gpu(i: int, e: float) -> DeviceEnergy:
    return DeviceEnergy(f"gpu{i}", "gpu", e, e / 10, 10, False, "nvml-energy", peak_power_w=e / 10)


PKG = DeviceEnergy("package-0", "cpu", 1500.0, 150.0, 10, False, "rapl", peak_power_w=160.0)
RAM = DeviceEnergy("dram", "dram", 200.0, 20.0, 10, True, "dram-model", peak_power_w=20.0)


def test_ranks_sharing_a_node_count_node_sensors_and_shared_gpus_once() -> None:
    ranks = [
        _rank("n0", [_gpu(0, 600.0), _gpu(1, 650.0), PKG, RAM]),  # node leader
        _rank("n0", [_gpu(0, 600.0), _gpu(1, 650.0)], duration_s=11.0),  # sees the same GPUs
        _rank("n1", [_gpu(0, 700.0), PKG, RAM]),
        _rank("n1", [_gpu(1, 500.0)]),
    ]
    cluster = aggregate(ranks)
    assert cluster.ranks == 4 and [n.host for n in cluster.nodes] == ["n0", "n1"]
    n0, n1 = cluster.nodes
    assert n0.gpu_energy_j == 1250.0 and n0.cpu_energy_j == 1500.0 and n0.duration_s == 11.0
    assert n1.gpu_energy_j == 1200.0
    assert cluster.total_energy_j == pytest.approx(1250 + 1500 + 200 + 1200 + 1500 + 200)
    rows = cluster.rows()
    assert cluster.columns() == ["Node", "Pkg(J)", "gpu0(J)", "gpu1(J)", "RAM(J)", "Total(J)", "Time(s)"]
    total = rows[-1]
    assert total["Node"] == "Total" and total["Pkg(J)"] == 3000.0 and total["gpu0(J)"] == 1300.0
    assert total["Time(s)"] == 11.0  # the wall time of the run, not a sum
    assert cluster.to_csv().splitlines()[0].startswith("Node,Pkg(J)")
