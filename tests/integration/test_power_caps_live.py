"""Per-job GPU power caps on the local Slurm: the node agents set the scheduler's limit on the step's
(fake NVML) GPUs while the step runs and put the previous limit back after it, also when it fails or is
cancelled; a cap left by a killed agent is restored by the next agent on the node (or the box's cap
check, whichever comes first: tests/integration/test_power_cap_ledger_live.py)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from box_support import mine, wait_for
from spank_support import plugin_with_fake_sensors

from easlurm.energy.power_limits import LEDGER_DIR

pytestmark = pytest.mark.slurm


def read_limits(path: Path) -> dict[str, int]:
    return json.loads(path.read_text()) if path.exists() else {}


def capped_job(box: Any, spool: Path, tmp_path: Path, name: str, body: str, limit_w: float) -> str:
    """A held job whose scheduler env file asks for `limit_w`, released once the file is there."""
    job = box.sbatch(
        "-H",
        "-J",
        name,
        "-p",
        "h100",
        "-N1",
        "--gres=gpu:h100:2",
        "--energy-profile=gpu",
        "-o",
        str(tmp_path / f"{name}.out"),
        "--wrap",
        body,
    )
    (spool / "sched").mkdir(mode=0o755, exist_ok=True)
    (spool / "sched" / f"job-{job}.env").write_text(f"EASLURM_POWER_LIMIT_W={limit_w:g}\n")
    box.run(["scontrol", "release", job])
    return str(job)


def test_step_gpus_capped_while_running_and_restored_after_success_failure_and_cancel(
    slurm_box: Any, tmp_path: Path
) -> None:
    limits = tmp_path / "limits.json"
    with plugin_with_fake_sensors(slurm_box, f"env=EASLURM_FAKE_NVML_LIMITS_FILE={limits}") as spool:
        ok = capped_job(
            slurm_box,
            spool,
            tmp_path,
            "cap-ok",
            f"srun bash -c 'sleep 3; cat {limits}' > {tmp_path}/seen.json",
            250,
        )
        assert slurm_box.wait_job(ok, timeout_s=120) == "COMPLETED"
        seen = json.loads((tmp_path / "seen.json").read_text())
        assert sorted(seen.values()) == [250_000, 250_000], seen  # the step's 2 GPUs, at the limit
        fail = capped_job(slurm_box, spool, tmp_path, "cap-fail", "srun false", 300)
        assert slurm_box.wait_job(fail, timeout_s=120) == "FAILED"
        slow = capped_job(slurm_box, spool, tmp_path, "cap-cancel", "srun sleep 300", 300)
        end = time.monotonic() + 60
        while time.monotonic() < end and 300_000 not in read_limits(limits).values():
            time.sleep(0.3)
        assert 300_000 in read_limits(limits).values(), "the long step was never capped"
        slurm_box.run(["scancel", slow])
        assert slurm_box.wait_job(slow, timeout_s=120) == "CANCELLED"
        time.sleep(2)  # the agents finish after the step
        # every GPU back at its previous (default) limit, no ledger left
        assert all(v == 700_000 for v in read_limits(limits).values()), read_limits(limits)
        assert not list((spool / LEDGER_DIR).glob("*.json"))


def test_a_killed_agents_cap_is_restored_by_the_next_agent(slurm_box: Any, tmp_path: Path) -> None:
    """SIGKILL to the batch step's agent (its pid is in its ledger): its cap outlives it; the next capped
    job's agents (or the box's cap check, which sees the box's fake NVML limits) restore it, and leave
    everything as it was."""
    limits = slurm_box.box.paths.fake_nvml_limits
    with plugin_with_fake_sensors(slurm_box, f"env=EASLURM_FAKE_NVML_LIMITS_FILE={limits}") as spool:
        # the batch step alone holds the GPUs: an srun step's agent would cap and restore them too, and
        # whichever of the two restores last decides what the GPUs hold after the kill
        slow = capped_job(slurm_box, spool, tmp_path, "cap-killed", "sleep 300", 300)
        try:
            kill_agent_then_run_the_next_job(slurm_box, spool, tmp_path, limits, slow)
        finally:
            slurm_box.run(["scancel", slow], check=False)


def kill_agent_then_run_the_next_job(
    slurm_box: Any, spool: Path, tmp_path: Path, limits: Path, slow: str
) -> None:
    """The batch agent killed mid-job, the job cancelled, then another capped job on the same spool."""
    ledgers = spool / LEDGER_DIR
    # a loaded machine may take a while to start the job (the previous test's jobs still completing):
    # the cap is looked for once the job runs
    wait_for(lambda: mine(slurm_box, [slow])[slow].running, 180, f"job {slow} to run")
    end = time.monotonic() + 60
    step_ledger = None
    while time.monotonic() < end and step_ledger is None:
        step_ledger = next(iter(ledgers.glob(f"{slow}.*.json")), None)
        time.sleep(0.3)
    assert step_ledger is not None, "the step was never capped"
    os.kill(json.loads(step_ledger.read_text())["refs"][0]["pid"], signal.SIGKILL)
    slurm_box.run(["scancel", slow])
    assert slurm_box.wait_job(slow, timeout_s=120) == "CANCELLED"
    ok = capped_job(slurm_box, spool, tmp_path, "cap-next", "srun true", 400)
    assert slurm_box.wait_job(ok, timeout_s=120) == "COMPLETED"
    time.sleep(2)
    assert all(v == 700_000 for v in read_limits(limits).values()), read_limits(limits)
    assert not list(ledgers.glob("*.json"))
