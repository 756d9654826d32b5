"""Per-job GPU power caps through (fake) NVML: set by a job's first step on a node, restored when its last
step there ends, and after a crash with no next job."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest
from easlurm_fakes import fake_nvml

from easlurm.energy.power_limits import (
    LEDGER_DIR,
    CapOutcome,
    Ledger,
    StepCap,
    StepRef,
    apply_limit,
    ledger_path,
    requested_limit_w,
    restore,
    restore_stale,
    this_host,
)

FAKE = "easlurm_fakes.fake_nvml"


@pytest.fixture
def gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """4 fake GPUs (limits 100-700 W, default 700 W) whose limits live in a file, as a driver's outlive a process."""
    limits = tmp_path / "limits.json"
    monkeypatch.setenv("EASLURM_FAKE_NVML_COUNT", "4")
    monkeypatch.setenv("EASLURM_FAKE_NVML_LIMITS_FILE", str(limits))
    fake_nvml.nvmlInit()
    yield limits
    fake_nvml.nvmlShutdown()


def limits_w() -> list[float]:
    return [
        fake_nvml.nvmlDeviceGetPowerManagementLimit(fake_nvml.nvmlDeviceGetHandleByIndex(i)) / 1000
        for i in range(4)
    ]


def sched_env(spool: Path, job: int, text: str) -> None:
    (spool / "sched").mkdir(parents=True, exist_ok=True)
    (spool / "sched" / f"job-{job}.env").write_text(text)


def test_fake_nvml_power_limits_follow_nvml(gpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    h = fake_nvml.nvmlDeviceGetHandleByIndex(0)
    assert fake_nvml.nvmlDeviceGetPowerManagementLimitConstraints(h) == [100_000, 700_000]
    fake_nvml.nvmlDeviceSetPowerManagementLimit(h, 300_000)
    assert limits_w()[:2] == [300.0, 700.0]
    assert json.loads(gpus.read_text()) == {"0": 300_000}
    with pytest.raises(fake_nvml.NVMLError) as exc:
        fake_nvml.nvmlDeviceSetPowerManagementLimit(h, 50_000)
    assert exc.value.value == pynvml.NVML_ERROR_INVALID_ARGUMENT == fake_nvml.NVML_ERROR_INVALID_ARGUMENT
    fake_nvml.nvmlShutdown()
    monkeypatch.setenv("EASLURM_FAKE_NVML_LIMIT_NO_PERMISSION", "1")
    monkeypatch.setenv("EASLURM_FAKE_NVML_LIMIT_UNSUPPORTED", "3")
    fake_nvml.nvmlInit()
    with pytest.raises(fake_nvml.NVMLError) as exc:
        fake_nvml.nvmlDeviceSetPowerManagementLimit(fake_nvml.nvmlDeviceGetHandleByIndex(0), 300_000)
    assert exc.value.value == pynvml.NVML_ERROR_NO_PERMISSION
    with pytest.raises(fake_nvml.NVMLError) as exc:
        fake_nvml.nvmlDeviceGetPowerManagementLimit(fake_nvml.nvmlDeviceGetHandleByIndex(3))
    assert exc.value.value == pynvml.NVML_ERROR_NOT_SUPPORTED
    h0 = fake_nvml.nvmlDeviceGetHandleByIndex(0)
    assert fake_nvml.nvmlDeviceGetPowerManagementLimit(h0) == 300_000  # the setting outlived the "process"


def test_requested_limit_from_the_schedulers_env_file(tmp_path: Path) -> None:
    assert requested_limit_w(tmp_path, 7) is None
    sched_env(tmp_path, 7, "EASLURM_BATCH_SIZE=128\nEASLURM_POWER_LIMIT_W=275.5\n")
    assert requested_limit_w(tmp_path, 7) == 275.5
    sched_env(tmp_path, 8, "EASLURM_POWER_LIMIT_W=lots\n")
    assert requested_limit_w(tmp_path, 8) is None


def test_step_cap_sets_the_steps_gpus_and_restores_them(gpus: Path, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    sched_env(spool, 5, "EASLURM_POWER_LIMIT_W=250\n")
    cap = StepCap(spool, 5, "0", "h100-1", [1, 2], FAKE)
    cap.start()
    assert limits_w() == [700.0, 250.0, 250.0, 700.0]
    ledger = ledger_path(spool, 5, "h100-1")
    assert ledger.exists() and oct(ledger.stat().st_mode & 0o777) == "0o600"
    cap.end()
    assert limits_w() == [700.0] * 4 and not ledger.exists()
    # below the GPU's minimum: clamped to it; no limit chosen: nothing touched
    sched_env(spool, 6, "EASLURM_POWER_LIMIT_W=20\n")
    low = StepCap(spool, 6, "0", "h100-1", [0], FAKE)
    low.start()
    assert limits_w()[0] == 100.0
    low.end()
    untouched = StepCap(spool, 9, "0", "h100-1", [0], FAKE)
    untouched.start()
    untouched.end()
    assert limits_w() == [700.0] * 4 and not list((spool / LEDGER_DIR).glob("*.json"))


def held(job: int, node: str, *pids: int, host: str | None = None) -> Ledger:
    """A ledger of `job` on `node` held by steps whose agents are `pids` (written on this host)."""
    return Ledger(
        job, node, this_host() if host is None else host, [StepRef(p, str(i)) for i, p in enumerate(pids)]
    )


DEAD = 2**22 + 12345  # a PID no process has (above the kernel's pid_max)


def test_a_killed_agents_caps_are_restored_by_the_next_agent_and_the_repair(
    gpus: Path, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    apply_limit(fake_nvml, [0, 1], 300.0, ledger_path(spool, 11, "h100-1"), held(11, "h100-1", DEAD))
    # a step still running beside it
    apply_limit(fake_nvml, [2], 400.0, ledger_path(spool, 12, "h100-1"), held(12, "h100-1", os.getpid()))
    assert limits_w() == [300.0, 300.0, 400.0, 700.0]
    # the repair restores only what the dead agent left, the live step keeps its cap
    restored = restore_stale(fake_nvml, spool)
    assert [p.name for p in restored] == ["11.h100-1.json"]
    assert limits_w() == [700.0, 700.0, 400.0, 700.0]
    # the next agent on the node does the same at its start, before capping its own GPUs
    apply_limit(fake_nvml, [0], 300.0, ledger_path(spool, 13, "h100-1"), held(13, "h100-1", DEAD + 1))
    sched_env(spool, 14, "EASLURM_POWER_LIMIT_W=500\n")
    cap = StepCap(spool, 14, "0", "h100-1", [3], FAKE)
    cap.start()
    assert limits_w() == [700.0, 700.0, 400.0, 500.0]
    cap.end()
    assert restore(fake_nvml, ledger_path(spool, 12, "h100-1"))
    assert limits_w() == [700.0] * 4 and not list((spool / LEDGER_DIR).glob("*.json"))


def test_no_permission_leaves_gpus_and_no_ledger(
    gpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spool = tmp_path / "spool"
    monkeypatch.setenv("EASLURM_FAKE_NVML_LIMIT_NO_PERMISSION", "1")
    fake_nvml.nvmlShutdown()
    fake_nvml.nvmlInit()
    sched_env(spool, 5, "EASLURM_POWER_LIMIT_W=250\n")
    cap = StepCap(spool, 5, "0", "n", [0, 1], FAKE)
    cap.start()  # logged, never raised: the job runs uncapped
    cap.end()
    assert limits_w() == [700.0] * 4 and not ledger_path(spool, 5, "n").exists()


def test_a_stale_ledger_leaves_a_gpu_someone_changed_since(gpus: Path, tmp_path: Path) -> None:
    """A killed step capped GPU 0 at 200 W; an admin has set it to 650 W since. The repair drops the
    ledger and leaves the admin's limit."""
    spool = tmp_path / "spool"
    spool.mkdir()
    apply_limit(fake_nvml, [0], 200.0, ledger_path(spool, 20, "n"), held(20, "n", DEAD))
    assert limits_w()[0] == 200.0
    fake_nvml.nvmlDeviceSetPowerManagementLimit(fake_nvml.nvmlDeviceGetHandleByIndex(0), 650_000)
    assert [p.name for p in restore_stale(fake_nvml, spool)] == ["20.n.json"]
    assert limits_w()[0] == 650.0


def test_step_cap_says_what_the_step_runs_at(gpus: Path, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    sched_env(spool, 30, "EASLURM_POWER_LIMIT_W=250\n")
    cap = StepCap(spool, 30, "0", "n", [0, 1], FAKE)
    cap.start()
    assert cap.outcome == CapOutcome(250.0, 250.0, None)
    cap.end()
    sched_env(spool, 31, "EASLURM_POWER_LIMIT_W=20\n")  # under the GPUs' minimum: clamped, and said so
    low = StepCap(spool, 31, "0", "n", [0], FAKE)
    low.start()
    assert low.outcome == CapOutcome(20.0, 100.0, None)
    low.end()
    plain = StepCap(spool, 32, "0", "n", [0], FAKE)
    plain.start()
    assert plain.outcome is None  # no limit asked for: the default, nothing to say
    plain.end()


def test_a_limit_the_driver_refuses_leaves_the_default_and_the_reason(
    gpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_nvml.nvmlShutdown()
    monkeypatch.setenv("EASLURM_FAKE_NVML_LIMIT_NO_PERMISSION", "1")
    fake_nvml.nvmlInit()
    spool = tmp_path / "spool"
    sched_env(spool, 33, "EASLURM_POWER_LIMIT_W=300\n")
    cap = StepCap(spool, 33, "0", "n", [0, 1], FAKE)
    cap.start()
    assert cap.outcome is not None and cap.outcome.requested_w == 300.0
    assert cap.outcome.applied_w is None and "300000 mW not set" in (cap.outcome.error or "")
    assert limits_w() == [700.0] * 4
    cap.end()
