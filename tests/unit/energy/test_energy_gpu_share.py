"""A GPU shared by two jobs: each step's share by SM utilisation (else time), the shares add up to the
GPU's energy, an unshared GPU is left alone; and the fake NVML's process interface behaves as NVML."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from easlurm_fakes import fake_nvml, gpu_load

from easlurm.accounting.step_record import DeviceRecord, NodeRecord, StepRecord
from easlurm.energy.gpu_share import OWN, ProcessOwners, Sample, ShareWatcher, instant_shares, time_share

MODULE = "easlurm_fakes.fake_nvml"


class Owners(ProcessOwners):
    """Ownership by a fixed table (the real one walks /proc up to the step's slurmstepd)."""

    def __init__(self, table: dict[int, str]) -> None:
        super().__init__(None)
        self.table = table

    def owner(self, pid: int) -> str:
        return self.table.get(pid, f"pid{pid}")


@pytest.fixture
def procs(nvml_env: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    registry = tmp_path / "procs"
    registry.mkdir()
    nvml_env.setenv("EASLURM_FAKE_NVML_PROCS_DIR", str(registry))
    nvml_env.setenv("EASLURM_FAKE_NVML_COUNT", "2")
    nvml_env.setenv("EASLURM_FAKE_NVML_POWER_W", "300")
    yield registry


@pytest.fixture
def two_processes(procs: Path) -> Iterator[list[int]]:
    """Two live processes registered on GPU 0 at 30 % and 60 % SM."""
    children = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    start = time.time() - 1.0
    for child, util in zip(children, (30, 60), strict=True):
        doc = {"pid": child.pid, "gpu": 0, "sm_util": util, "start_s": start}
        (procs / f"{child.pid}.json").write_text(json.dumps(doc))
    try:
        yield [c.pid for c in children]
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_instant_and_time_shares() -> None:
    owner = {1: OWN, 2: "job7"}
    samples = [Sample(1, 100, 30), Sample(2, 100, 60), Sample(1, 200, 30), Sample(2, 300, 0)]
    assert instant_shares(samples, owner) == [pytest.approx(1 / 3), 1.0]
    assert time_share({OWN, "job7"}) == 0.5
    assert time_share({"job7"}) == 0.0
    assert time_share(set()) is None


def _watch(pids: list[int], own: int, method_env: dict[str, str] | None = None) -> ShareWatcher:
    w = ShareWatcher(
        [0], None, MODULE, period_s=3600, owners=Owners({own: OWN, **{p: "other" for p in pids if p != own}})
    )
    assert w.start()
    return w


def test_two_jobs_split_by_utilisation_and_add_up(two_processes: list[int]) -> None:
    """30 % and 60 % SM: a third and two thirds of the GPU's energy, together all of it."""
    a, b = _watch(two_processes, two_processes[0]), _watch(two_processes, two_processes[1])
    for _ in range(4):
        time.sleep(0.25)
        a.tick()
        b.tick()
    sa, sb = a.stop()[0], b.stop()[0]
    assert sa.method.value == "utilisation" and sb.method.value == "utilisation"
    assert sa.fraction == pytest.approx(1 / 3, abs=0.02)
    assert sb.fraction == pytest.approx(2 / 3, abs=0.02)
    assert sa.own_j + sb.own_j == pytest.approx((sa.total_j + sb.total_j) / 2, rel=0.02)
    assert sa.others == {"other"}


def test_without_process_samples_the_split_is_by_time(two_processes: list[int], procs: Path) -> None:
    fake_nvml._state = None
    import os

    os.environ["EASLURM_FAKE_NVML_NO_PROC_UTIL"] = "1"
    try:
        a = _watch(two_processes, two_processes[0])
        time.sleep(0.2)
        share = a.stop()[0]
    finally:
        del os.environ["EASLURM_FAKE_NVML_NO_PROC_UTIL"]
    assert share.method.value == "time" and share.fraction == pytest.approx(0.5)


def test_a_gpu_used_by_the_step_alone_is_not_apportioned(two_processes: list[int], procs: Path) -> None:
    (procs / f"{two_processes[1]}.json").unlink()
    a = _watch(two_processes[:1], two_processes[0])
    time.sleep(0.2)
    assert a.stop() == {}


def test_fake_process_interface_matches_nvml(procs: Path) -> None:
    fake_nvml.nvmlInit()
    try:
        h = fake_nvml.nvmlDeviceGetHandleByIndex(1)
        assert fake_nvml.nvmlDeviceGetComputeRunningProcesses(h) == []
        with pytest.raises(fake_nvml.NVMLError) as info:
            fake_nvml.nvmlDeviceGetProcessUtilization(h, 0)
        assert info.value.value == fake_nvml.NVML_ERROR_NOT_FOUND
        child = subprocess.Popen(
            [sys.executable, "-m", "easlurm_fakes.gpu_load", "--util", "40", "--seconds", "0.6"],
            env={
                **__import__("os").environ,
                "CUDA_VISIBLE_DEVICES": "1",
                "PYTHONPATH": str(Path(gpu_load.__file__).parents[1]),
            },
        )
        deadline = time.monotonic() + 20
        while not fake_nvml.nvmlDeviceGetComputeRunningProcesses(h) and time.monotonic() < deadline:
            time.sleep(0.05)
        running = fake_nvml.nvmlDeviceGetComputeRunningProcesses(h)
        assert [p.pid for p in running] == [child.pid]
        assert child.wait(timeout=20) == 0
        assert fake_nvml.nvmlDeviceGetComputeRunningProcesses(h) == []  # ended: no context any more
        samples = fake_nvml.nvmlDeviceGetProcessUtilization(h, 0)
        assert {s.pid for s in samples} == {child.pid} and {s.smUtil for s in samples} == {40}
        stamps = [s.timeStamp for s in samples]
        assert stamps == sorted(stamps) and all(t % fake_nvml.SAMPLE_PERIOD_US == 0 for t in stamps)
        with pytest.raises(fake_nvml.NVMLError):
            fake_nvml.nvmlDeviceGetProcessUtilization(h, stamps[-1])
    finally:
        fake_nvml.nvmlShutdown()


def test_energy_counter_is_one_system_wide_clock(procs: Path) -> None:
    """Two processes reading the same GPU agree (the counter is a function of CLOCK_MONOTONIC)."""
    code = (
        "import time;from easlurm_fakes import fake_nvml as n;n.nvmlInit();"
        "print(n.nvmlDeviceGetTotalEnergyConsumption(n.nvmlDeviceGetHandleByIndex(0)), time.monotonic())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**__import__("os").environ, "PYTHONPATH": str(Path(gpu_load.__file__).parents[1])},
    ).stdout.split()
    fake_nvml.nvmlInit()
    try:
        mine = fake_nvml.nvmlDeviceGetTotalEnergyConsumption(fake_nvml.nvmlDeviceGetHandleByIndex(0))
        now = time.monotonic()
    finally:
        fake_nvml.nvmlShutdown()
    # the other process read earlier: its value is this one minus 300 W x the time between the reads
    assert int(out[0]) == pytest.approx(mine - 300_000 * (now - float(out[1])), abs=300)


def test_records_carry_the_share_and_the_flag() -> None:
    dev = DeviceRecord("gpu0", "gpu", 900.0, mean_power_w=300.0)
    dev.apportion(1 / 3, "utilisation")
    assert dev.energy_j == pytest.approx(300.0) and dev.mean_power_w == pytest.approx(100.0)
    assert dev.whole_gpu_energy_j == 900.0 and dev.apportioned == "utilisation"
    step = StepRecord(1, "batch", 1, [NodeRecord(0, "h100-2", 0.0, 3.0, [dev])])
    assert step.apportioned_devices == ["gpu0:utilisation"]
    again = StepRecord.from_dict(json.loads(json.dumps(step.to_dict())))
    assert again.gpu_energy_j == pytest.approx(300.0) and again.apportioned_devices == ["gpu0:utilisation"]
    assert again.reduced("step").apportioned_devices == ["gpu:utilisation"]


def test_sacct_flags_an_apportioned_step() -> None:
    from easlurm.accounting.sacct_rows import step_values

    dev = DeviceRecord("gpu3", "gpu", 600.0)
    dev.apportion(0.5, "time")
    step = StepRecord(1, "batch", 1, [NodeRecord(0, "h100-2", 0.0, 3.0, [dev])])
    values = step_values(step)
    assert values["GPUEnergy"] == pytest.approx(300.0)
    assert "apportioned:gpu3:time" in values["EnergyFlags"].split(",")


def test_alone_the_costly_counter_is_read_rarely(
    two_processes: list[int], procs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The energy counter costs ms of CPU: alone on the GPU, looks only ask who is there."""
    (procs / f"{two_processes[1]}.json").unlink()
    reads: list[int] = []
    real = fake_nvml.nvmlDeviceGetTotalEnergyConsumption
    monkeypatch.setattr(
        fake_nvml, "nvmlDeviceGetTotalEnergyConsumption", lambda h: reads.append(1) or real(h)
    )
    a = _watch(two_processes, two_processes[0])
    for _ in range(5):
        a.tick()
    assert len(reads) == 1  # at start only
    doc = {"pid": two_processes[1], "gpu": 0, "sm_util": 60, "start_s": time.time()}
    (procs / f"{two_processes[1]}.json").write_text(json.dumps(doc))
    a.tick()
    assert len(reads) == 2  # another job arrived: read at once
    assert a.stop()[0].others == {"other"}


@pytest.fixture
def lead_in_procs(nvml_env: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[int, int, float]]:
    """The step's process ran at 60 % SM during the step's first second only (before its agent came),
    another job's at 30 % all along; the step started 2 s ago."""
    registry = tmp_path / "procs"
    registry.mkdir()
    nvml_env.setenv("EASLURM_FAKE_NVML_PROCS_DIR", str(registry))
    nvml_env.setenv("EASLURM_FAKE_NVML_POWER_W", "300")
    children = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    start = time.time() - 2.0
    own, other = children[0].pid, children[1].pid
    docs = [
        {"pid": own, "gpu": 0, "sm_util": 60, "start_s": start, "end_s": start + 1.0},
        {"pid": other, "gpu": 0, "sm_util": 30, "start_s": start},
    ]
    for doc in docs:
        (registry / f"{doc['pid']}.json").write_text(json.dumps(doc))
    try:
        yield own, other, start
    finally:
        for child in children:
            child.kill()
            child.wait()


@pytest.mark.parametrize("from_start", [True, False])
def test_the_share_watcher_splits_the_lead_in(
    lead_in_procs: tuple[int, int, float], from_start: bool
) -> None:
    """From the step's start, its share is its work in the lead-in (2/3 of the GPU over the first of
    ~2.3 s); from the watcher's own start it would be nothing."""
    own, other, start = lead_in_procs
    owners = Owners({own: OWN, other: "job7"})
    w = ShareWatcher([0], None, MODULE, period_s=3600, owners=owners, since=start if from_start else None)
    assert w.start()
    time.sleep(0.3)
    w.tick()
    share = w.stop()[0]
    assert share.method.value == "utilisation" and share.others == {"job7"}
    assert share.fraction is not None
    if from_start:
        assert share.fraction == pytest.approx((2 / 3) * 1.0 / (time.time() - start), abs=0.05)
    else:
        assert share.fraction == 0.0
