"""NVML sensor against the fake NVML (real pynvml names and codes): counter, power fallback, errors."""

from __future__ import annotations

import time

import pynvml
import pytest
from easlurm_fakes import fake_nvml

from easlurm.energy import EnergyProfiler
from easlurm.energy.discovery import discover, parse_devices
from easlurm.energy.gpus import parse_gpu_ref
from easlurm.energy.nvml import discover_nvml
from easlurm.energy.nvml_errors import nvml_error_class

FAKE_NVML = "easlurm_fakes.fake_nvml"


def test_fake_mirrors_pynvml_codes_and_error_classes() -> None:
    codes = [n for n in dir(fake_nvml) if n.startswith("NVML_ERROR_")]
    assert len(codes) > 15
    for name in codes:
        assert getattr(fake_nvml, name) == getattr(pynvml, name), name
        cls = "NVMLError_" + name[len("NVML_ERROR_") :].title().replace("_", "")
        assert hasattr(pynvml, cls) and hasattr(fake_nvml, cls), cls
    lost = fake_nvml.NVMLError(fake_nvml.NVML_ERROR_GPU_IS_LOST)
    assert type(lost).__name__ == type(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)).__name__
    assert str(lost) == "GPU is lost"
    for fn in ("nvmlInit", "nvmlShutdown", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex",
               "nvmlDeviceGetHandleByUUID", "nvmlDeviceGetUUID", "nvmlDeviceGetTotalEnergyConsumption",
               "nvmlDeviceGetPowerUsage", "nvmlDeviceGetFieldValues",
               "nvmlDeviceGetDeviceHandleFromMigDeviceHandle"):  # fmt: skip
        assert callable(getattr(pynvml, fn)) and callable(getattr(fake_nvml, fn)), fn


def test_error_classes_for_the_sampler() -> None:
    assert nvml_error_class(fake_nvml.NVMLError(15)) == "gone"
    assert nvml_error_class(fake_nvml.NVMLError(999)) == "transient"
    assert nvml_error_class(fake_nvml.NVMLError(3)) == "unsupported"


def _profile(seconds: float, **kw: object) -> EnergyProfiler:
    with EnergyProfiler(devices="gpu", interval_s=0.02, nvml_module=FAKE_NVML, **kw) as prof:  # type: ignore[arg-type]
        time.sleep(seconds)
    return prof


def test_energy_counter_matches_power_times_duration(nvml_env: pytest.MonkeyPatch) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_COUNT", "8")
    nvml_env.setenv("EASLURM_FAKE_NVML_POWER_W", "250")
    r = _profile(0.6).result
    assert r is not None and len(r.devices) == 8
    for d in r.devices:
        assert d.source == "nvml-energy" and d.error is None and d.duration_s is not None
        assert d.energy_j == pytest.approx(250.0 * d.duration_s, rel=0.01)
    assert r.gpu_energy_j == pytest.approx(sum(250.0 * d.duration_s for d in r.devices), rel=0.01)  # type: ignore[operator]


def test_no_energy_counter_falls_back_to_power_polling(nvml_env: pytest.MonkeyPatch) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_COUNT", "2")
    nvml_env.setenv("EASLURM_FAKE_NVML_POWER_W", "100,300")
    nvml_env.setenv("EASLURM_FAKE_NVML_NO_ENERGY", "1")
    nvml_env.setenv("EASLURM_FAKE_NVML_NO_FIELD", "1")
    r = _profile(0.5).result
    assert r is not None
    g0, g1 = r.device("gpu0"), r.device("gpu1")
    assert g0.source == "nvml-energy" and g1.source == "nvml-power"
    assert g1.duration_s is not None
    assert g1.energy_j == pytest.approx(300.0 * g1.duration_s, rel=0.01)
    assert g1.peak_power_w == pytest.approx(300.0)


def test_lost_gpu_degrades_only_that_sensor(nvml_env: pytest.MonkeyPatch) -> None:
    """Power read per tick: the loss is seen at the next tick."""
    nvml_env.setenv("EASLURM_FAKE_NVML_COUNT", "2")
    nvml_env.setenv("EASLURM_FAKE_NVML_NO_SAMPLES", "all")
    nvml_env.setenv("EASLURM_FAKE_NVML_LOST", "1:0.2")
    r = _profile(0.5).result
    assert r is not None
    assert r.device("gpu0").error is None and r.device("gpu0").energy_j is not None
    lost = r.device("gpu1")
    assert lost.error is not None and "lost" in lost.error
    assert lost.duration_s is not None and 0.0 < lost.duration_s < 0.35  # energy up to the loss is kept
    assert lost.energy_j == pytest.approx(100.0 * lost.duration_s, rel=0.01)


def test_unknown_values_are_skipped_not_fatal(nvml_env: pytest.MonkeyPatch) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_UNKNOWN_EVERY", "3")
    nvml_env.setenv("EASLURM_FAKE_NVML_POWER_W", "200")
    r = _profile(0.5).result
    assert r is not None
    d = r.device("gpu0")
    assert d.error is None and d.duration_s is not None
    assert d.energy_j == pytest.approx(200.0 * d.duration_s, rel=0.01)


def test_library_not_found_is_reported_and_smi_tried(nvml_env: pytest.MonkeyPatch) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_INIT_ERROR", "12")
    nvml_env.setenv("PATH", "/nonexistent")
    found = discover(parse_devices("gpu"), nvml_module=FAKE_NVML)
    by_source = {s.source: s for s in found.statuses}
    assert "Library Not Found" in by_source["nvml"].detail
    assert not by_source["nvidia-smi"].available
    assert found.sensors == []


def test_missing_module_is_reported(nvml_env: pytest.MonkeyPatch) -> None:
    sensors, statuses = discover_nvml("easlurm_fakes.no_such_module", None)
    assert sensors == [] and "cannot import" in statuses[0].detail


def test_selection_by_index_uuid_and_mig(nvml_env: pytest.MonkeyPatch) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_COUNT", "4")
    nvml_env.setenv("EASLURM_FAKE_NVML_MIG", "2")
    refs = [parse_gpu_ref(x) for x in ("1", "GPU-fa4e0000-0000-0000-0000-000000000003")]
    refs += [parse_gpu_ref(f"MIG-fa4e0002-0000-0000-0000-{j:012d}") for j in (0, 1)]
    refs.append(parse_gpu_ref("7"))
    sensors, statuses = discover_nvml(FAKE_NVML, refs)
    assert [s.name for s in sensors] == ["gpu1", "gpu2", "gpu3"]  # two MIGs of GPU 2 -> measured once
    assert "MIG" in sensors[1].note
    assert [s.name for s in statuses] == ["7"]


def test_cuda_visible_devices_restricts_the_profiler(nvml_env: pytest.MonkeyPatch) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_COUNT", "4")
    nvml_env.setenv("CUDA_VISIBLE_DEVICES", "0,2")
    r = _profile(0.1).result
    assert r is not None and [d.name for d in r.devices] == ["gpu0", "gpu2"]


def test_bad_gpu_selectors(nvml_env: pytest.MonkeyPatch) -> None:
    """An explicit bad selector is the caller's error; a bad variable only loses the GPU sensors."""
    from easlurm.errors import ConfigError

    with pytest.raises(ConfigError, match="GPU selector"):
        EnergyProfiler(devices="gpu", gpus=["gpu0"], nvml_module=FAKE_NVML)
    nvml_env.setenv("CUDA_VISIBLE_DEVICES", "weird")
    with EnergyProfiler(devices="gpu,dram", nvml_module=FAKE_NVML, powercap_root="/nonexistent") as prof:
        pass
    assert prof.result is not None and prof.result.gpu_energy_j is None
    assert prof.result.dram_energy_j is not None


def test_counter_is_read_at_start_and_stop_samples_come_from_the_power_field(
    nvml_env: pytest.MonkeyPatch,
) -> None:
    """The energy counter costs ~4 ms of CPU per call on an H100: between start and stop (and the slow
    cadence) the samples come from the cheap power field where the driver keeps no power samples, and
    the total still comes from the counter."""
    nvml_env.setenv("EASLURM_FAKE_NVML_POWER_W", "250")
    nvml_env.setenv("EASLURM_FAKE_NVML_NO_SAMPLES", "all")
    calls = {"energy": 0, "field": 0}
    real_energy, real_field = (
        fake_nvml.nvmlDeviceGetTotalEnergyConsumption,
        fake_nvml.nvmlDeviceGetFieldValues,
    )

    def energy(handle: object) -> int:
        calls["energy"] += 1
        return real_energy(handle)  # type: ignore[arg-type]

    def field(handle: object, ids: list[int]) -> object:
        calls["field"] += 1
        return real_field(handle, ids)  # type: ignore[arg-type]

    nvml_env.setattr(fake_nvml, "nvmlDeviceGetTotalEnergyConsumption", energy)
    nvml_env.setattr(fake_nvml, "nvmlDeviceGetFieldValues", field)
    r = _profile(0.5).result
    assert r is not None and len(r.devices) == 1
    dev = r.devices[0]
    assert dev.samples >= 10 and calls["field"] >= dev.samples - 2
    assert calls["energy"] <= 3  # open, the first sample's anchor at most, and the closing read
    assert dev.duration_s is not None and dev.energy_j == pytest.approx(250.0 * dev.duration_s, rel=0.01)


def test_fake_nvml_burns_the_configured_cpu_per_call(nvml_env: pytest.MonkeyPatch) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_COST_MS", "energy=20")
    fake_nvml.nvmlInit()
    try:
        handle = fake_nvml.nvmlDeviceGetHandleByIndex(0)
        c0 = time.thread_time()
        fake_nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        assert time.thread_time() - c0 >= 0.02
    finally:
        fake_nvml.nvmlShutdown()
