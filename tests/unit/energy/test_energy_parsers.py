"""Text parsers of the helper tools: nvidia-smi CSV lines and perf stat interval lines."""

from __future__ import annotations

import pytest

from easlurm.energy.perf import parse_perf_interval_line
from easlurm.energy.smi import parse_smi_line


def test_smi_lines() -> None:
    assert parse_smi_line("0, GPU-abc, 71.23") == (0, "GPU-abc", 71.23)
    assert parse_smi_line("3, GPU-d, [N/A]") == (3, "GPU-d", None)
    assert parse_smi_line("1, GPU-e, Unknown") == (1, "GPU-e", None)
    with pytest.raises(ValueError):
        parse_smi_line("garbage")


def test_perf_interval_lines() -> None:
    t, j, ev = parse_perf_interval_line("     0.100281513,1.92,Joules,power/energy-pkg/,100295345,100.00,,")  # type: ignore[misc]
    assert (t, j, ev) == (pytest.approx(0.100281513), pytest.approx(1.92), "power/energy-pkg/")
    assert parse_perf_interval_line("  1.0,<not counted>,Joules,power/energy-pkg/,0,100.00,,")[1] is None  # type: ignore[index]
    assert parse_perf_interval_line("# started on Sun Nov 22") is None
    assert parse_perf_interval_line("") is None


def test_smi_fallback_integrates_power(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake nvidia-smi streams 150 W with an occasional unknown value: energy is P x duration."""
    import os
    import time
    from pathlib import Path

    from easlurm.energy.sampler import SamplingThread, SensorSampler
    from easlurm.energy.smi import discover_smi

    fake_bin = Path(__file__).resolve().parents[2] / "fakes" / "bin"
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("EASLURM_FAKE_NVML_COUNT", "2")
    monkeypatch.setenv("EASLURM_FAKE_NVML_POWER_W", "150")
    monkeypatch.setenv("EASLURM_FAKE_SMI_UNKNOWN_EVERY", "7")
    sensors, statuses = discover_smi(None, 0.02)
    assert [s.name for s in sensors] == ["gpu0", "gpu1"] and statuses == []
    for s in sensors:
        s.open()
    deadline = time.monotonic() + 20  # under load the fake nvidia-smi takes a while to start
    while any(s.read() is None for s in sensors) and time.monotonic() < deadline:
        time.sleep(0.02)  # until the stream delivers its first lines
    samplers = [SensorSampler(s) for s in sensors]
    thread = SamplingThread(samplers, 0.02)  # one backend: one thread reads both GPUs
    thread.start()
    time.sleep(0.5)
    while any(sp.integrator.duration_s is None for sp in samplers) and time.monotonic() < deadline:
        time.sleep(0.02)
    thread.stop()
    for s in sensors:
        s.close()
    for sp in samplers:
        integ = sp.integrator
        assert sp.error is None and integ.duration_s is not None
        assert integ.energy_j == pytest.approx(150.0 * integ.duration_s, rel=0.02)


def test_perf_sensor_accumulates_interval_energy(monkeypatch: pytest.MonkeyPatch) -> None:
    import time
    from pathlib import Path

    from easlurm.energy.perf import PerfPkgSensor

    fake = Path(__file__).resolve().parents[2] / "fakes" / "bin" / "perf"
    monkeypatch.setenv("EASLURM_FAKE_PERF_POWER_W", "60")
    sensor = PerfPkgSensor(str(fake), 0.02)
    sensor.open()
    try:
        deadline = time.monotonic() + 10
        while not sensor.read() and time.monotonic() < deadline:  # wait for the first interval line
            time.sleep(0.01)
        e0, t0 = sensor.read(), time.monotonic()
        time.sleep(0.5)
        e1, t1 = sensor.read(), time.monotonic()
    finally:
        sensor.close()
    assert e0 is not None and e1 is not None and e0 > 0
    # perf reports whole intervals only: the difference is within a few intervals of P x elapsed.
    assert e1 - e0 == pytest.approx(60.0 * (t1 - t0), abs=60.0 * 0.1)
