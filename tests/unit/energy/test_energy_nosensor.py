"""A requested device with no sensor is told apart from one measured as zero or modelled: discovery names
the kind and why, the result and the node record carry it, and `easlurm profile` refuses to run when the
user named the device (exit 2, one line) instead of printing an empty table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from easlurm_fakes.powercap import FakePowercap

from easlurm.accounting.step_record import NodeRecord
from easlurm.energy import EnergyProfiler
from easlurm.energy.discovery import discover, parse_devices

FAKE_NVML = "easlurm_fakes.fake_nvml"
FAKES = Path(__file__).resolve().parents[2] / "fakes"


def test_no_gpu_and_no_cpu_sensor_are_named_with_why(nvml_env: pytest.MonkeyPatch) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_INIT_ERROR", "12")  # LIBRARY_NOT_FOUND: a host without a driver
    nvml_env.setenv("PATH", "/nonexistent")  # and no nvidia-smi
    d = discover(parse_devices("gpu,cpu,dram"), nvml_module=FAKE_NVML, powercap_root="/nonexistent")
    d.close()
    assert set(d.no_sensor) == {"gpu", "cpu"}  # not DRAM: it has its model (flagged modelled:dram)
    assert d.no_sensor["cpu"].startswith("no CPU sensor on this host (")
    assert d.no_sensor["gpu"].startswith("no GPU sensor on this host (")
    assert "\n" not in d.no_sensor["gpu"]


def test_a_step_without_gpus_wants_none(nvml_env: pytest.MonkeyPatch) -> None:
    """gpus=[] (the step has no GPU on this node): not a missing sensor."""
    nvml_env.setenv("EASLURM_FAKE_NVML_INIT_ERROR", "12")
    nvml_env.setenv("PATH", "/nonexistent")
    d = discover(parse_devices("gpu"), gpus=[], nvml_module=FAKE_NVML)
    d.close()
    assert d.no_sensor == {}


def test_a_gpu_index_the_node_lacks(nvml_env: pytest.MonkeyPatch) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_COUNT", "2")
    d = discover(parse_devices("gpu"), gpus=["1", "99"], nvml_module=FAKE_NVML)
    d.close()
    assert [s.name for s in d.sensors] == ["gpu1"]
    assert d.no_sensor == {"gpu": "no GPU 99 on this host"}


def test_the_node_record_carries_it_and_a_full_host_has_none(
    nvml_env: pytest.MonkeyPatch, powercap: FakePowercap
) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_INIT_ERROR", "12")
    nvml_env.setenv("PATH", "/nonexistent")
    with EnergyProfiler(devices="gpu,dram", interval_s=0.05, nvml_module=FAKE_NVML) as prof:
        pass
    assert prof.result is not None and prof.result.no_sensor == ["gpu"]
    assert NodeRecord.from_profile(prof.result, 0, None, None).no_sensor == ["gpu"]
    nvml_env.delenv("EASLURM_FAKE_NVML_INIT_ERROR")
    from easlurm_fakes import fake_nvml

    fake_nvml._state = None
    with EnergyProfiler(
        devices="gpu,cpu,dram", interval_s=0.05, nvml_module=FAKE_NVML, powercap_root=powercap.root
    ) as full:
        pass
    assert full.result is not None and full.result.no_sensor == []


def _profile(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EASLURM_", "CUDA_VISIBLE", "SLURM_"))}
    env.update(
        PYTHONPATH=f"{FAKES}{os.pathsep}{env.get('PYTHONPATH', '')}",
        EASLURM_PROFILER__NVML_MODULE=FAKE_NVML,
        EASLURM_PROFILER__POWERCAP_ROOT=str(tmp_path / "no-powercap"),
        XDG_CONFIG_HOME=str(tmp_path / "xdg"),
        **extra,
    )
    return subprocess.run(
        [sys.executable, "-m", "easlurm.cli", "profile", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "extra", "message"),
    [
        (
            ["--devices", "gpu"],
            {"EASLURM_FAKE_NVML_INIT_ERROR": "12", "PATH": "/usr/bin:/bin"},
            "easlurm: error: --devices gpu: no GPU sensor on this host (",
        ),
        (
            ["--gpus", "99"],
            {"EASLURM_FAKE_NVML_COUNT": "2"},
            "easlurm: error: --gpus 99: no GPU 99 on this host",
        ),
    ],
)
def test_profile_refuses_a_named_device_it_cannot_measure(
    tmp_path: Path, args: list[str], extra: dict[str, str], message: str
) -> None:
    """Exit 2, one line, and the command never runs (an empty table with exit 0 reads as zero energy)."""
    ran = tmp_path / "ran"
    res = _profile(tmp_path, *args, "--", "touch", str(ran), **extra)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(message) and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not ran.exists()
