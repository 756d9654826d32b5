"""The idle rule (no compute process, utilisation at or under the threshold, for a time) on one GPU's
readings, and the live reads of a step's GPUs from the fake NVML (pynvml's names, codes and units)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from easlurm_fakes import fake_nvml

from easlurm.energy.gpu_watch import (
    MAX_EPISODES_PER_GPU,
    GpuReader,
    GpuReading,
    IdleRule,
    IdleTracker,
)
from easlurm.errors import SensorError

FAKE_NVML = "easlurm_fakes.fake_nvml"
RULE = IdleRule(util_pct=5.0, after_s=60.0)


def quiet(util: float = 0.0, procs: int | None = 0) -> GpuReading:
    return GpuReading(0, util_pct=util, processes=procs)


def test_idle_starts_after_the_time_and_keeps_its_start_and_energy() -> None:
    """The episode starts when the GPU went quiet, is reported once after `after_s`, and its energy is
    what the GPU drew from then until it was used again."""
    t = IdleTracker("gpu0", RULE)
    assert t.observe(1000.0, quiet(), 10.0) is None
    assert t.observe(1030.0, quiet(util=5.0), 40.0) is None  # at the threshold: still quiet
    assert t.observe(1060.0, quiet(), 70.0) == 60.0  # reported once, with the seconds idle
    assert t.idle and t.idle_s(1080.0) == 80.0
    assert t.idle_energy_j(90.0) == 80.0  # the open episode so far
    assert t.observe(1090.0, quiet(), 100.0) is None
    assert t.observe(1100.0, quiet(util=80.0, procs=1), 150.0) is None
    assert not t.idle
    (ep,) = t.episodes
    assert (ep.gpu, ep.start, ep.end, ep.energy_j) == ("gpu0", 1000.0, 1100.0, 140.0)
    assert t.idle_energy_j(500.0) == 140.0  # closed episodes only


@pytest.mark.parametrize(
    "reading",
    [quiet(util=5.1), quiet(procs=1), GpuReading(0, util_pct=None, processes=0)],
    ids=["utilisation-above", "a-process", "utilisation-unknown"],
)
def test_a_gpu_in_use_or_unknown_is_never_idle(reading: GpuReading) -> None:
    t = IdleTracker("gpu0", RULE)
    for s in range(0, 600, 10):
        assert t.observe(float(s), reading, float(s)) is None
    t.close(600.0, 600.0)
    assert t.episodes == [] and not t.idle


def test_unknown_processes_leave_the_utilisation_to_decide() -> None:
    """NVML that cannot list processes (some vGPU): a GPU at 0 % for the time is idle."""
    t = IdleTracker("gpu0", RULE)
    t.observe(0.0, quiet(procs=None), None)
    assert t.observe(60.0, quiet(procs=None), None) == 60.0
    t.close(90.0, None)
    (ep,) = t.episodes
    assert (ep.start, ep.end, ep.energy_j) == (0.0, 90.0, None)  # energy unknown, not zero


def test_a_quiet_stretch_shorter_than_the_time_is_no_episode() -> None:
    t = IdleTracker("gpu0", RULE)
    t.observe(0.0, quiet(), 0.0)
    t.observe(59.0, quiet(), 59.0)
    t.observe(60.0, quiet(util=50.0), 60.0)  # used again just before the time
    t.observe(70.0, quiet(), 70.0)
    t.close(100.0, 100.0)  # step ended 30 s into a new quiet stretch
    assert t.episodes == []


def test_an_episode_open_at_the_step_end_closes_there() -> None:
    t = IdleTracker("gpu0", RULE)
    t.observe(0.0, quiet(), 0.0)
    t.observe(60.0, quiet(), 250.0 * 60)
    t.close(100.0, 250.0 * 100)
    assert [e.to_dict() for e in t.episodes] == [
        {"gpu": "gpu0", "start": 0.0, "end": 100.0, "energy_j": 25000.0}
    ]


def test_a_flapping_gpu_keeps_a_bounded_number_of_episodes_and_all_their_energy() -> None:
    t = IdleTracker("gpu0", IdleRule(1.0, 10.0))
    for k in range(MAX_EPISODES_PER_GPU + 5):
        base = 100.0 * k
        t.observe(base, quiet(), base)
        t.observe(base + 10, quiet(), base + 10)
        t.observe(base + 20, quiet(util=90.0), base + 20)
    assert len(t.episodes) == MAX_EPISODES_PER_GPU
    assert sum(e.energy_j or 0.0 for e in t.episodes) == pytest.approx(20.0 * (MAX_EPISODES_PER_GPU + 5))
    assert t.episodes[-1].end == 100.0 * (MAX_EPISODES_PER_GPU + 4) + 20


def test_reader_reads_utilisation_memory_processes_and_limit(
    nvml_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """GPU 1 runs a registered process (fake workload registry), GPU 2 none; the limit is NVML's mW in W."""
    registry = tmp_path / "procs"
    registry.mkdir()
    (registry / f"{os.getpid()}.json").write_text(
        json.dumps({"pid": os.getpid(), "gpu": 1, "sm_util": 40, "start_s": time.time()})
    )
    nvml_env.setenv("EASLURM_FAKE_NVML_COUNT", "4")
    nvml_env.setenv("EASLURM_FAKE_NVML_PROCS_DIR", str(registry))
    nvml_env.setenv("EASLURM_FAKE_NVML_MEMORY_GB", "40")
    reader = GpuReader([1, 2], FAKE_NVML)
    reader.open()
    try:
        one, two = reader.read(time.monotonic())
    finally:
        reader.close()
    assert (one.index, one.util_pct, one.processes, one.memory_used_bytes) == (1, 40.0, 1, 512 * 2**20)
    assert (two.index, two.util_pct, two.processes, two.memory_used_bytes) == (2, 0.0, 0, 0)
    assert one.memory_total_bytes == 40_000_000_000
    assert one.power_limit_w == two.power_limit_w == 700.0
    assert fake_nvml._state is None  # NVML shut down on close


def test_reader_stops_asking_what_a_gpu_does_not_support(nvml_env: pytest.MonkeyPatch) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_COUNT", "2")
    nvml_env.setenv("EASLURM_FAKE_NVML_NO_UTIL", "0")
    nvml_env.setenv("EASLURM_FAKE_NVML_LIMIT_UNSUPPORTED", "all")
    reader = GpuReader([0, 1], FAKE_NVML)
    reader.open()
    try:
        first = reader.read(0.0)
        second = reader.read(100.0)
    finally:
        reader.close()
    assert first[0].util_pct is None and second[0].util_pct is None
    assert first[1].util_pct == 0.0 and first[1].power_limit_w is None
    assert (0, "utilisation") in reader.unsupported and (1, "power limit") in reader.unsupported


def test_reader_open_fails_for_a_gpu_that_is_not_there(nvml_env: pytest.MonkeyPatch) -> None:
    nvml_env.setenv("EASLURM_FAKE_NVML_COUNT", "2")
    reader = GpuReader([5], FAKE_NVML)
    with pytest.raises(SensorError, match="GPU watch"):
        reader.open()
    assert fake_nvml._state is None
