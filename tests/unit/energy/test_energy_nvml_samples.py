"""The driver's power sample buffer (nvmlDeviceGetSamples) as the GPU timeline: the fake against pynvml,
timeline points from the buffer, exact totals, overflow, NOT_FOUND, fallback to the power field."""

from __future__ import annotations

import csv
import inspect
import itertools
import time
from pathlib import Path

import pynvml
import pytest
from easlurm_fakes import fake_nvml

from easlurm.energy import EnergyProfiler, nvml_samples
from easlurm.energy.nvml import NvmlGpuSensor, discover_nvml
from easlurm.energy.nvml_samples import wall_us_to_monotonic
from easlurm.energy.result import DeviceKind
from easlurm.energy.sampler import SamplingThread, SensorSampler
from easlurm.energy.sensor import Mode, Sensor

FAKE_NVML = "easlurm_fakes.fake_nvml"


def _fields(cls: type) -> list[tuple[str, type]]:
    return [(name, ctype) for name, ctype in cls._fields_]  # type: ignore[attr-defined]


def test_fake_samples_call_mirrors_pynvml() -> None:
    """Same parameter names, sampling-type constants and sample struct layout as pynvml."""
    real = inspect.signature(pynvml.nvmlDeviceGetSamples).parameters
    fake = inspect.signature(fake_nvml.nvmlDeviceGetSamples).parameters
    assert list(real) == list(fake) == ["device", "sampling_type", "timeStamp"]
    assert fake_nvml.NVML_TOTAL_POWER_SAMPLES == pynvml.NVML_TOTAL_POWER_SAMPLES == 0
    assert fake_nvml.NVML_VALUE_TYPE_UNSIGNED_INT == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    assert nvml_samples.NVML_ERROR_NOT_FOUND == pynvml.NVML_ERROR_NOT_FOUND
    assert [n for n, _ in _fields(fake_nvml.c_nvmlSample_t)] == [n for n, _ in _fields(pynvml.c_nvmlSample_t)]
    assert [(n, t.__name__) for n, t in _fields(fake_nvml.c_nvmlValue_t)] == [
        (n, t.__name__) for n, t in _fields(pynvml.c_nvmlValue_t)
    ]


def test_fake_buffer_is_bounded_and_raises_like_nvml(nvml_env: pytest.MonkeyPatch) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_COUNT", "2")
    nvml_env.setenv("EASLURM_FAKE_NVML_POWER_W", "300")
    nvml_env.setenv("EASLURM_FAKE_NVML_SAMPLE_MS", "1000")
    nvml_env.setenv("EASLURM_FAKE_NVML_SAMPLE_BUFFER", "7")
    nvml_env.setenv("EASLURM_FAKE_NVML_NO_SAMPLES", "1")
    fake_nvml.nvmlInit()
    try:
        h0, h1 = (fake_nvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
        vtype, samples = fake_nvml.nvmlDeviceGetSamples(h0, fake_nvml.NVML_TOTAL_POWER_SAMPLES, 0)
        assert vtype == fake_nvml.NVML_VALUE_TYPE_UNSIGNED_INT and len(samples) == 7
        stamps = [s.timeStamp for s in samples]
        assert [b - a for a, b in itertools.pairwise(stamps)] == [1_000_000] * 6
        assert abs(stamps[-1] - time.time() * 1e6) < 1.1e6  # wall-clock microseconds
        assert {s.sampleValue.uiVal for s in samples} == {300_000}  # mW
        with pytest.raises(fake_nvml.NVMLError) as nothing_new:
            fake_nvml.nvmlDeviceGetSamples(h0, fake_nvml.NVML_TOTAL_POWER_SAMPLES, stamps[-1])
        assert nothing_new.value.value == fake_nvml.NVML_ERROR_NOT_FOUND
        _, tail = fake_nvml.nvmlDeviceGetSamples(h0, fake_nvml.NVML_TOTAL_POWER_SAMPLES, stamps[-3])
        assert [s.timeStamp for s in tail] == stamps[-2:]
        with pytest.raises(fake_nvml.NVMLError) as unsupported:
            fake_nvml.nvmlDeviceGetSamples(h1, fake_nvml.NVML_TOTAL_POWER_SAMPLES, 0)
        assert unsupported.value.value == fake_nvml.NVML_ERROR_NOT_SUPPORTED
    finally:
        fake_nvml.nvmlShutdown()


def _sensor(nvml_env: pytest.MonkeyPatch) -> NvmlGpuSensor:
    sensors, _ = discover_nvml(FAKE_NVML, None)
    sensors[0].open()
    return sensors[0]


def test_wall_clock_timestamps_land_on_the_monotonic_base(nvml_env: pytest.MonkeyPatch) -> None:
    """Driver timestamps are wall-clock us; the points must sit between open and now on monotonic time,
    one driver period apart."""
    assert wall_us_to_monotonic(1_700_000_000_250_000, -1_699_999_000.0) == pytest.approx(1000.25)
    nvml_env.setenv("EASLURM_FAKE_NVML_SAMPLE_MS", "20")
    t_open = time.monotonic()
    sensor = _sensor(nvml_env)
    try:
        assert sensor.batched and sensor.update_period_s == pytest.approx(0.02)
        assert "driver power samples every 0.020 s" in sensor.describe()
        assert sensor.buffer is not None
        time.sleep(0.15)
        points = sensor.buffer.drain()
        t_now = time.monotonic()
        assert len(points) >= 5
        assert all(t_open - 0.02 <= t <= t_now for t, _ in points)
        steps = [b[0] - a[0] for a, b in itertools.pairwise(points)]
        assert all(s == pytest.approx(0.02, abs=1e-5) for s in steps)
        assert {w for _, w in points} == {100.0}
    finally:
        sensor.close()


def test_profile_timeline_comes_from_the_buffer_and_total_from_the_counter(
    nvml_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """At a 10 ms interval the power field is never read: the timeline has one point per driver sample
    (50 ms apart), a handful of buffer reads, and the total is power x duration from the counter."""
    nvml_env.setenv("EASLURM_FAKE_NVML_POWER_W", "250")
    nvml_env.setenv("EASLURM_FAKE_NVML_SAMPLE_MS", "50")
    calls = {"field": 0, "samples": 0, "energy": 0}
    real = {
        "field": fake_nvml.nvmlDeviceGetFieldValues,
        "samples": fake_nvml.nvmlDeviceGetSamples,
        "energy": fake_nvml.nvmlDeviceGetTotalEnergyConsumption,
    }

    def counting(key: str):  # type: ignore[no-untyped-def]
        def call(*args: object) -> object:
            calls[key] += 1
            return real[key](*args)  # type: ignore[operator]

        return call

    nvml_env.setattr(fake_nvml, "nvmlDeviceGetFieldValues", counting("field"))
    nvml_env.setattr(fake_nvml, "nvmlDeviceGetSamples", counting("samples"))
    nvml_env.setattr(fake_nvml, "nvmlDeviceGetTotalEnergyConsumption", counting("energy"))
    with EnergyProfiler(
        devices="gpu", interval_s=0.01, nvml_module=FAKE_NVML, out_dir=tmp_path / "run"
    ) as prof:
        calls["field"] = 0  # the open probes the field once; from here on it must stay unread
        time.sleep(0.6)
    dev = prof.result.devices[0]  # type: ignore[union-attr]
    assert dev.source == "nvml-energy" and dev.error is None and dev.duration_s is not None
    assert calls["field"] == 0 and calls["energy"] == 2  # open and close
    assert 2 <= calls["samples"] <= 5  # open, the closing drain, a drain every 1.5 s at most
    assert dev.energy_j == pytest.approx(250.0 * dev.duration_s, rel=1e-3)
    assert dev.peak_power_w == pytest.approx(250.0, rel=0.01)
    with (tmp_path / "run" / "power_samples.csv").open() as f:
        rows = list(csv.DictReader(f))
    times = [float(r["time_s"]) for r in rows]
    inner = [b - a for a, b in itertools.pairwise(times[1:-1])]  # between driver samples
    assert len(rows) == dev.samples  # the first point, one per driver sample, the closing counter read
    assert abs(len(rows) - 2 - dev.duration_s / 0.05) <= 2
    assert inner and all(s == pytest.approx(0.05, abs=1e-4) for s in inner)


def test_overflow_is_detected_and_the_cadence_shortened(nvml_env: pytest.MonkeyPatch) -> None:
    """A buffer of 20 samples 10 ms apart, drained after 500 ms: the gap after the last sample seen is
    counted as lost samples and the drain period halves; a drain within the buffer's span loses none."""
    nvml_env.setenv("EASLURM_FAKE_NVML_SAMPLE_MS", "10")
    nvml_env.setenv("EASLURM_FAKE_NVML_SAMPLE_BUFFER", "20")
    sensor = _sensor(nvml_env)
    try:
        buf = sensor.buffer
        assert buf is not None and buf.capacity == 20
        assert buf.poll_s == pytest.approx(0.5 * 20 * 0.01)
        time.sleep(0.5)
        assert buf.due(time.monotonic())
        assert len(buf.drain()) == 20
        assert buf.stats.gaps == 1 and buf.stats.lost_samples >= 25
        assert buf.poll_s == pytest.approx(0.05)
        time.sleep(0.03)
        buf.drain()
        assert buf.stats.gaps == 1  # drained within the buffer's span (200 ms): nothing lost
    finally:
        sensor.close()


def test_total_stays_exact_across_overflows(nvml_env: pytest.MonkeyPatch) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_POWER_W", "180")
    nvml_env.setenv("EASLURM_FAKE_NVML_SAMPLE_MS", "5")
    nvml_env.setenv("EASLURM_FAKE_NVML_SAMPLE_BUFFER", "3")
    with EnergyProfiler(devices="gpu", interval_s=0.05, nvml_module=FAKE_NVML) as prof:
        time.sleep(0.4)
    dev = prof.result.devices[0]  # type: ignore[union-attr]
    assert dev.error is None and dev.duration_s is not None
    assert dev.energy_j == pytest.approx(180.0 * dev.duration_s, rel=1e-3)


def test_lost_gpu_keeps_the_timeline_up_to_the_last_drain(nvml_env: pytest.MonkeyPatch) -> None:
    """The loss is seen at the next drain (at most MAX_POLL_S later): the other GPU is unaffected and the
    lost one keeps its energy up to its last good drain."""
    nvml_env.setenv("EASLURM_FAKE_NVML_COUNT", "2")
    nvml_env.setenv("EASLURM_FAKE_NVML_LOST", "1:0.25")
    nvml_env.setenv("EASLURM_FAKE_NVML_SAMPLE_MS", "10")
    nvml_env.setattr(nvml_samples, "MAX_POLL_S", 0.05)
    with EnergyProfiler(devices="gpu", interval_s=0.01, nvml_module=FAKE_NVML) as prof:
        time.sleep(0.5)
    r = prof.result
    assert r is not None and r.device("gpu0").error is None
    lost = r.device("gpu1")
    assert lost.error is not None and "lost" in lost.error
    assert lost.duration_s is not None and 0.0 < lost.duration_s < 0.3
    assert lost.energy_j == pytest.approx(100.0 * lost.duration_s, rel=0.01)


def test_nothing_new_is_not_an_error(nvml_env: pytest.MonkeyPatch) -> None:
    """NOT_FOUND (no sample newer than the last seen) is an empty drain, not a failure."""
    nvml_env.setenv("EASLURM_FAKE_NVML_SAMPLE_MS", "10000")
    sensor = _sensor(nvml_env)
    try:
        assert sensor.buffer is not None
        assert sensor.buffer.drain() == [] and sensor.buffer.stats.polls == 2
        sp = SensorSampler(sensor)
        sp.sample()  # the run's first point
        sensor.want_exact()
        sp.sample()  # closing: drain (nothing new) + counter
        assert sp.error is None and sp.integrator.samples == 2
    finally:
        sensor.close()


def test_not_supported_falls_back_to_the_power_field(nvml_env: pytest.MonkeyPatch) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_POWER_W", "120")
    nvml_env.setenv("EASLURM_FAKE_NVML_NO_SAMPLES", "all")
    sensor = _sensor(nvml_env)
    try:
        assert not sensor.batched and sensor.buffer is None
        assert sensor.read() is not None
    finally:
        sensor.close()


def test_failing_mid_run_falls_back_and_keeps_the_total(nvml_env: pytest.MonkeyPatch) -> None:
    """The buffer works at open, then NVML refuses it: the field is read per tick from then on."""
    nvml_env.setenv("EASLURM_FAKE_NVML_POWER_W", "220")
    nvml_env.setenv("EASLURM_FAKE_NVML_SAMPLE_MS", "20")
    sensor = _sensor(nvml_env)
    try:
        sp = SensorSampler(sensor)
        sp.sample()
        assert sensor.batched

        def refuse(*args: object) -> object:
            raise fake_nvml.NVMLError(fake_nvml.NVML_ERROR_NOT_SUPPORTED)

        nvml_env.setattr(fake_nvml, "nvmlDeviceGetSamples", refuse)
        time.sleep(0.05)
        sensor.want_exact()
        sp.sample()
        assert not sensor.batched and sp.error is None
        for _ in range(5):
            time.sleep(0.01)
            sp.sample()
        sensor.want_exact()
        sp.sample()
        integ = sp.integrator
        assert integ.samples >= 7 and integ.duration_s is not None
        assert integ.energy_j == pytest.approx(220.0 * integ.duration_s, rel=1e-3)
    finally:
        sensor.close()


def test_a_stalled_buffer_falls_back(nvml_env: pytest.MonkeyPatch) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_SAMPLE_MS", "10000")
    nvml_env.setattr(nvml_samples, "STALL_S", 0.0)
    nvml_env.setattr(nvml_samples, "MAX_POLL_S", 0.0)
    sensor = _sensor(nvml_env)
    try:
        assert sensor.buffer is not None
        sensor.buffer.driver_period_s = 0.001  # as if the driver had promised samples every ms
        sp = SensorSampler(sensor)
        sp.sample()
        time.sleep(0.05)
        sp.sample()
        assert not sensor.batched and sp.error is None
    finally:
        sensor.close()


def test_gpu_without_counter_gets_power_points_from_the_buffer(nvml_env: pytest.MonkeyPatch) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_NO_ENERGY", "all")
    nvml_env.setenv("EASLURM_FAKE_NVML_POWER_W", "90")
    nvml_env.setenv("EASLURM_FAKE_NVML_SAMPLE_MS", "20")
    with EnergyProfiler(devices="gpu", interval_s=0.05, nvml_module=FAKE_NVML) as prof:
        time.sleep(0.3)
    dev = prof.result.devices[0]  # type: ignore[union-attr]
    assert dev.source == "nvml-power" and dev.error is None and dev.duration_s is not None
    assert dev.samples >= 10
    assert dev.energy_j == pytest.approx(90.0 * dev.duration_s, rel=1e-3)


class _Buffered(Sensor):
    name, kind, source, mode, batched = "b", DeviceKind.GPU, "test", Mode.POWER, True

    def __init__(self, batches: list[list[tuple[float, float]] | None]) -> None:
        self.batches = batches

    def read(self) -> float | None:
        raise AssertionError("a batched sensor is read through read_batch")

    def read_batch(self) -> list[tuple[float, float]] | None:
        return self.batches.pop(0)


def test_sampler_takes_batches_in_time_order() -> None:
    """Readings keep their own times; one not after the last point is dropped; None is one unknown."""
    sp = SensorSampler(_Buffered([[(1.0, 100.0), (2.0, 100.0)], [], None, [(1.5, 999.0), (3.0, 100.0)]]))
    for _ in range(4):
        sp.sample()
    assert sp.error is None and sp.transient == 0
    assert sp.integrator.samples == 3 and sp.integrator.energy_j == pytest.approx(200.0)


class _Sleepy(Sensor):
    """A buffering sensor with nothing to do for 10 s after each read."""

    name, kind, source, mode, batched = "s", DeviceKind.GPU, "test", Mode.POWER, True

    def __init__(self) -> None:
        self.calls = 0
        self.last = time.monotonic()

    def read(self) -> float | None:
        raise AssertionError("a batched sensor is read through read_batch")

    def read_batch(self) -> list[tuple[float, float]] | None:
        self.calls += 1
        self.last = time.monotonic()
        return [(self.last, 50.0)]

    def next_read_s(self) -> float | None:
        return self.last + 10.0


def test_thread_of_buffering_sensors_sleeps_until_one_has_work() -> None:
    """At a 10 ms interval over 0.2 s: the first reading, then nothing until the closing one; a thread
    that also holds a per-tick sensor keeps ticking."""
    sleepy = _Sleepy()
    th = SamplingThread([SensorSampler(sleepy)], 0.01)
    th.start()
    time.sleep(0.2)
    th.stop()
    assert sleepy.calls == 2

    sleepy2, ticking = _Sleepy(), _Buffered([[]] * 1000)
    ticking.next_read_s = lambda: None  # type: ignore[method-assign]
    th = SamplingThread([SensorSampler(sleepy2), SensorSampler(ticking)], 0.01)
    th.start()
    time.sleep(0.2)
    th.stop()
    assert sleepy2.calls > 5
