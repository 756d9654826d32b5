"""GPU utilisation and memory read with the energy samples, against the fake NVML (pynvml's names, structs
and codes): the mean and peak per GPU, and a GPU that does not report them is "not measured", never 0."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
from easlurm_fakes import fake_nvml

from easlurm.energy import EnergyProfiler
from easlurm.energy.nvml_activity import ActivityReader

FAKE_NVML = "easlurm_fakes.fake_nvml"


def test_fake_utilisation_and_memory_calls_are_pynvmls() -> None:
    for fn in ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo"):
        assert callable(getattr(pynvml, fn)) and callable(getattr(fake_nvml, fn)), fn
    for struct in ("c_nvmlUtilization_t", "c_nvmlMemory_t"):
        ours = [(n, t) for n, t in getattr(fake_nvml, struct)._fields_]
        assert ours == list(getattr(pynvml, struct)._fields_), struct


def _profile(seconds: float, interval_s: float = 0.02) -> Any:
    with EnergyProfiler(devices="gpu", interval_s=interval_s, nvml_module=FAKE_NVML) as prof:
        time.sleep(seconds)
    return prof.result


@pytest.mark.parametrize("buffered", [True, False], ids=["driver-samples", "per-tick"])
def test_mean_utilisation_and_peak_memory_per_gpu(nvml_env: pytest.MonkeyPatch, buffered: bool) -> None:
    """Both ways the sensor reads power (the driver's sample buffer, or a read per tick) keep them."""
    nvml_env.setenv("EASLURM_FAKE_NVML_COUNT", "2")
    nvml_env.setenv("EASLURM_FAKE_NVML_UTIL", "80,20")
    nvml_env.setenv("EASLURM_FAKE_NVML_MEMORY_USED_MB", "1024,30000")
    nvml_env.setenv("EASLURM_FAKE_NVML_MEMORY_GB", "40")
    if not buffered:
        nvml_env.setenv("EASLURM_FAKE_NVML_NO_SAMPLES", "all")
    r = _profile(0.3)
    g0, g1 = r.device("gpu0"), r.device("gpu1")
    assert (g0.mean_util_pct, g1.mean_util_pct) == (80.0, 20.0)
    assert (g0.peak_memory_bytes, g1.peak_memory_bytes) == (1024 * 2**20, 30000 * 2**20)
    assert g0.memory_total_bytes == g1.memory_total_bytes == 40_000_000_000
    assert g0.energy_j is not None and g0.error is None
    doc = r.to_dict()["devices"][1]
    assert doc["mean_util_pct"] == 20.0 and doc["peak_memory_bytes"] == 30000 * 2**20


def test_a_gpu_without_utilisation_is_not_measured_and_keeps_its_energy(nvml_env: pytest.MonkeyPatch) -> None:
    """NOT_SUPPORTED (some GPUs, MIG mode) leaves the value unknown; the energy is measured as before."""
    nvml_env.setenv("EASLURM_FAKE_NVML_COUNT", "3")
    nvml_env.setenv("EASLURM_FAKE_NVML_UTIL", "50")
    nvml_env.setenv("EASLURM_FAKE_NVML_NO_UTIL", "1")
    nvml_env.setenv("EASLURM_FAKE_NVML_NO_MEMINFO", "2")
    r = _profile(0.3)
    assert r.device("gpu1").mean_util_pct is None and r.device("gpu1").peak_memory_bytes == 0
    assert r.device("gpu2").mean_util_pct == 50.0 and r.device("gpu2").peak_memory_bytes is None
    for d in r.devices:
        assert d.error is None and d.energy_j is not None and d.energy_j > 0


def test_utilisation_follows_the_gpus_processes_without_a_setting(
    nvml_env: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """With a process registry, the fake's utilisation is its running processes' and memory 512 MiB each."""
    import json
    import os

    nvml_env.setenv("EASLURM_FAKE_NVML_COUNT", "1")
    nvml_env.setenv("EASLURM_FAKE_NVML_PROCS_DIR", str(tmp_path))
    now = time.time()
    for pid, util in ((os.getpid(), 30), (os.getppid(), 25)):
        (tmp_path / f"{pid}.json").write_text(
            json.dumps({"pid": pid, "gpu": 0, "sm_util": util, "start_s": now})
        )
    fake_nvml.nvmlInit()
    try:
        h = fake_nvml.nvmlDeviceGetHandleByIndex(0)
        assert fake_nvml.nvmlDeviceGetUtilizationRates(h).gpu == 55
        assert fake_nvml.nvmlDeviceGetMemoryInfo(h).used == 2 * 512 * 2**20
    finally:
        fake_nvml.nvmlShutdown()


def test_mig_handles_and_lost_gpus_raise_as_nvml_does(nvml_env: pytest.MonkeyPatch) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_COUNT", "2")
    nvml_env.setenv("EASLURM_FAKE_NVML_MIG", "2")
    nvml_env.setenv("EASLURM_FAKE_NVML_LOST", "1:0")
    fake_nvml.nvmlInit()
    try:
        gpu0 = fake_nvml.nvmlDeviceGetHandleByIndex(0)
        mig = fake_nvml.nvmlDeviceGetHandleByUUID(gpu0.migs[0])
        with pytest.raises(fake_nvml.NVMLError) as err:
            fake_nvml.nvmlDeviceGetUtilizationRates(mig)
        assert err.value.value == fake_nvml.NVML_ERROR_NOT_SUPPORTED
        with pytest.raises(fake_nvml.NVMLError) as err:
            fake_nvml.nvmlDeviceGetMemoryInfo(fake_nvml.nvmlDeviceGetHandleByIndex(1))
        assert err.value.value == fake_nvml.NVML_ERROR_GPU_IS_LOST
    finally:
        fake_nvml.nvmlShutdown()


class _Scripted:
    """An NVML module whose two calls answer from scripts: a value, or an NVML error code to raise."""

    NVMLError = fake_nvml.NVMLError

    def __init__(self, util: list[Any], used: list[Any]) -> None:
        self.util, self.used = util, used
        self.calls = {"util": 0, "mem": 0}

    def _next(self, script: list[Any], key: str) -> Any:
        self.calls[key] += 1
        v = script.pop(0) if len(script) > 1 else script[0]
        if isinstance(v, str):
            raise fake_nvml.NVMLError(int(v))
        return v

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        return SimpleNamespace(gpu=self._next(self.util, "util"), memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        return SimpleNamespace(used=self._next(self.used, "mem"), total=1000, free=0)


def test_reader_skips_transient_errors_stops_asking_where_unsupported_and_keeps_the_peak() -> None:
    nvml = _Scripted(util=[90, "999", 70, 80], used=["3", 0])
    reader = ActivityReader(nvml, object(), "gpu0", period_s=1.0)  # type: ignore[arg-type]
    for t in (0.0, 0.5, 1.0, 2.0, 3.0, 4.0):  # 0.5 is not due: 5 reads
        reader.maybe_read(t)
    res = reader.result()
    assert res.mean_util_pct == pytest.approx((90 + 70 + 80 + 80) / 4)  # UNKNOWN skipped one read
    assert nvml.calls == {"util": 5, "mem": 1}  # NOT_SUPPORTED memory is asked once
    assert res.peak_memory_bytes is None and res.memory_total_bytes is None
    peaks = ActivityReader(_Scripted(util=["3"], used=[100, 700, 300]), object(), "gpu1", period_s=0.0)  # type: ignore[arg-type]
    for t in range(3):
        peaks.maybe_read(float(t))
    assert peaks.result().peak_memory_bytes == 700 and peaks.result().mean_util_pct is None
