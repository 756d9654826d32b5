"""EnergyProfiler: lifecycle, regions and marks, decorator, run directory, bad input, bounded memory."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest
from easlurm_fakes.powercap import FakePowercap

from easlurm.energy import EnergyProfiler, ProfileResult, profile
from easlurm.errors import ConfigError, SensorError

FAKE_NVML = "easlurm_fakes.fake_nvml"


def test_regions_and_marks_get_their_share_of_energy(nvml_env: pytest.MonkeyPatch) -> None:
    """Constant 200 W: a region's energy is 200 W x its duration; a mark is the cumulative energy."""
    nvml_env.setenv("EASLURM_FAKE_NVML_POWER_W", "200")
    prof = EnergyProfiler(devices="gpu", interval_s=0.02, nvml_module=FAKE_NVML, sample_log=False)
    with prof:
        time.sleep(0.1)
        with prof.region("phase"):
            time.sleep(0.3)
        prof.mark("after")
        time.sleep(0.1)
    r = prof.result
    assert r is not None
    (region,) = r.regions
    assert region.duration_s is not None and region.duration_s == pytest.approx(0.3, abs=0.05)
    assert region.energy_j["gpu0"] == pytest.approx(200.0 * region.duration_s, rel=0.02)
    (mark,) = r.marks
    assert mark.energy_j["gpu0"] == pytest.approx(200.0 * mark.start_s, rel=0.05, abs=1.0)
    assert mark.energy_j["gpu0"] < r.device("gpu0").energy_j  # type: ignore[operator]


def test_stop_is_idempotent_and_regions_need_a_running_profiler(nvml_env: pytest.MonkeyPatch) -> None:
    prof = EnergyProfiler(devices="gpu", interval_s=0.05, nvml_module=FAKE_NVML)
    with pytest.raises(SensorError):
        prof.stop()
    prof.start()
    with pytest.raises(SensorError):
        prof.start()
    first = prof.stop()
    assert prof.stop() is first
    with pytest.raises(SensorError), prof.region("late"):
        pass


def test_decorator_keeps_the_return_value_and_the_result(nvml_env: pytest.MonkeyPatch) -> None:
    @profile(devices="gpu", interval_s=0.02, nvml_module=FAKE_NVML)
    def work(x: int) -> int:
        time.sleep(0.1)
        return x * 2

    assert work(21) == 42
    assert isinstance(work.last_result, ProfileResult)  # type: ignore[attr-defined]
    assert work.last_result.gpu_energy_j > 0  # type: ignore[attr-defined]


def test_unknown_device_and_bad_interval_fail_before_anything_is_written(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match="unknown device 'tpu'"):
        EnergyProfiler(devices="gpu,tpu", out_dir=out)
    with pytest.raises(ConfigError, match="interval"):
        EnergyProfiler(interval_s=0.0, out_dir=out)
    assert not out.exists()


def test_run_directory_contents(nvml_env: pytest.MonkeyPatch, powercap: FakePowercap, tmp_path: Path) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_COUNT", "2")
    out = tmp_path / "runs" / "r1"
    powercap.start_ticker({"package-0": 50.0})
    with EnergyProfiler(
        interval_s=0.02, out_dir=out, powercap_root=powercap.root, nvml_module=FAKE_NVML, command=["x", "y"]
    ) as prof:
        time.sleep(0.3)
    run = json.loads((out / "run.json").read_text())
    assert run["command"] == ["x", "y"] and run["config"]["interval_s"] == 0.02
    assert {s["name"] for s in run["sensors"] if s["available"]} >= {"gpu0", "gpu1", "package-0", "dram-1"}
    summary = ProfileResult.from_dict(json.loads((out / "summary.json").read_text()))
    assert summary.total_energy_j == pytest.approx(prof.result.total_energy_j)  # type: ignore[union-attr]
    rows = list(csv.DictReader((out / "power_samples.csv").open()))
    per_device = {d.name: d.samples for d in summary.devices}
    for name, n in per_device.items():
        assert sum(1 for r in rows if r["device"] == name) == n
    last_pkg = [r for r in rows if r["device"] == "package-0"][-1]
    assert float(last_pkg["energy_j"]) == pytest.approx(summary.device("package-0").energy_j, abs=1e-5)
    assert (out / "summary.csv").read_text().startswith("host,name")
    with pytest.raises(ConfigError, match="already holds a run"):
        EnergyProfiler(out_dir=out)


def test_unwritable_out_dir_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import tempfile

    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)

    def denied(*args: object, **kwargs: object) -> tuple[int, str]:
        raise PermissionError(13, "Permission denied")

    # writability is tried by creating a file; root ignores modes, so simulate a user's refusal
    monkeypatch.setattr(tempfile, "mkstemp", denied)
    with pytest.raises(ConfigError, match="permission denied"):
        EnergyProfiler(out_dir=locked / "run")
    with pytest.raises(ConfigError, match="cannot write under /proc"):
        EnergyProfiler(out_dir="/proc/easlurm-run")
    assert os.listdir(locked) == []


def test_memory_stays_bounded_with_many_samples(nvml_env: pytest.MonkeyPatch) -> None:
    """Nothing is kept per sample: the sampler's state does not grow with the number of samples."""
    import sys

    nvml_env.setenv("EASLURM_FAKE_NVML_SAMPLE_MS", "1")  # the driver's buffer gives a point per ms
    prof = EnergyProfiler(devices="gpu", interval_s=0.001, nvml_module=FAKE_NVML, sample_log=False)
    with prof:
        time.sleep(0.5)
    sp = prof._samplers[0]
    assert prof.result is not None and prof.result.device("gpu0").samples > 100
    assert len(vars(sp.integrator)) < 20 and sys.getsizeof(sp.integrator.resolved) < 1000


def test_all_sensors_failing_still_gives_a_result(nvml_env: pytest.MonkeyPatch) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_INIT_ERROR", "9")
    nvml_env.setenv("PATH", "/nonexistent")
    with EnergyProfiler(devices="gpu,cpu", nvml_module=FAKE_NVML, powercap_root="/nonexistent") as prof:
        pass
    assert prof.result is not None and prof.result.total_energy_j is None


def test_one_sampling_thread_per_backend_not_per_device(
    nvml_env: pytest.MonkeyPatch, powercap: FakePowercap
) -> None:
    """4 GPUs and 2 sockets' RAPL zones (package, core, dram): two sampler threads (nvml, rapl), so the
    profiled program loses the GIL twice per tick instead of once per device."""
    import threading

    nvml_env.setenv("EASLURM_FAKE_NVML_COUNT", "4")
    nvml_env.setenv("EASLURM_FAKE_NVML_SAMPLE_MS", "10")  # GPU points come from the driver's buffer
    prof = EnergyProfiler(
        devices="gpu,cpu,dram",
        interval_s=0.02,
        nvml_module=FAKE_NVML,
        powercap_root=powercap.root,
        sample_log=False,
    )
    with prof:
        time.sleep(0.2)
        names = sorted(t.name for t in threading.enumerate() if t.name.startswith("easlurm-sampler-"))
    assert names == ["easlurm-sampler-nvml", "easlurm-sampler-rapl"], names
    assert prof.result is not None
    gpus = [d for d in prof.result.devices if d.kind == "gpu"]
    assert len(gpus) == 4 and len(prof.result.devices) >= 8
    assert all(d.samples > 5 and d.error is None for d in prof.result.devices), prof.result.devices
