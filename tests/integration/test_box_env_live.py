"""`eval "$(scripts/slurm-box env)"` is all a user needs: plain `easlurm sacct` and `easlurm schedd` then use
the box's spool and the plugin's scheduler directory, and a user's own profiled job on the box shows GPU
and CPU energy from the box's fake sensors (box.fake_sensors, on by default)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]


def box_shell_env(box: Any) -> dict[str, str]:
    """Exactly what a shell has after `eval "$(scripts/slurm-box env)"`: the session's other EASLURM_*
    settings and SLURM_CONF are left out first, so only the export decides."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not (k.startswith("EASLURM_") or k in ("SLURM_CONF", "PYTHONPATH"))
    }
    base["EASLURM_BOX__DIR"] = str(box.dir)
    base["EASLURM_BOX__BASE_PORT"] = str(box.box.ports.base)
    res = subprocess.run(
        ["bash", "-c", 'eval "$(scripts/slurm-box env)" && env -0'],
        cwd=REPO,
        env=base,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    env = dict(item.split("=", 1) for item in res.stdout.split("\0") if "=" in item)
    env["PYTHONPATH"] = str(REPO / "src")  # this checkout's easlurm, as `make install` would give
    return env


def run(env: dict[str, str], *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout, check=False)


def easlurm(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    import sys

    return run(env, sys.executable, "-m", "easlurm.cli", *args)


def squeue_state(env: dict[str, str], job: str) -> str:
    return run(env, "squeue", "-h", "-j", job, "-o", "%T").stdout.strip()


def test_box_env_points_sacct_and_schedd_at_the_box(slurm_box: Any, tmp_path: Path) -> None:
    """After eval of `slurm-box env`: a requeued, then cancelled, profiled job's two runs both show in
    `easlurm sacct -D -j ID` without --spool (records missing from AdminComment come from the box's spool), and
    `easlurm schedd` manages the hint files in the directory the box's plugin reads (<spool>/sched)."""
    env = box_shell_env(slurm_box)
    tmp_path.chmod(0o755)
    job = run(
        env, "sbatch", "--parsable", "-p", "a100", "-N1", "--gres=gpu:a100:1", "--requeue",
        "--open-mode=append", "--energy-profile", "-o", str(tmp_path / "out"), "--wrap", "sleep 60",
    ).stdout.strip()  # fmt: skip
    assert job.isdigit(), job
    try:
        end = time.monotonic() + 60
        while squeue_state(env, job) != "RUNNING" and time.monotonic() < end:
            time.sleep(0.3)
        time.sleep(3)
        run(env, "scontrol", "requeue", job)
        end = time.monotonic() + 60
        while time.monotonic() < end:  # a requeued job waits ~120 s unless its start time is reset
            run(env, "scontrol", "update", f"JobId={job}", "StartTime=now")
            if squeue_state(env, job) == "RUNNING":
                break
            time.sleep(1)
        time.sleep(3)
        # cancelled: a job may end COMPLETING, when slurmctld refuses its AdminComment (spool only)
        run(env, "scancel", job)
        assert slurm_box.wait_job(job, timeout_s=90) == "CANCELLED"
        end = time.monotonic() + 60
        runs: list[int] = []
        while time.monotonic() < end:
            res = easlurm(env, "sacct", "-D", "-j", job, "--json")
            assert res.returncode == 0, res.stderr
            rows = json.loads(res.stdout)["rows"]
            runs = sorted(
                {
                    r["energy_record"]["run"]
                    for r in rows
                    if r["job_id"] == f"{job}.batch" and r.get("energy_record")
                }
            )
            if runs == [0, 1]:
                break
            time.sleep(2)
        assert runs == [0, 1], res.stdout
    finally:
        run(env, "scancel", job)

    sched = Path(env["EASLURM_SPANK__SPOOL"]) / "sched"
    assert sched == slurm_box.dir / "spool" / "easlurm" / "sched"  # spank/install-box's spool=
    sched.mkdir(mode=0o755, exist_ok=True)
    stale = sched / "job-987654321.env"  # a job Slurm does not know: schedd must prune it
    stale.write_text("EASLURM_BATCH_SIZE=1\n")
    host_spool_existed = Path("/var/spool/easlurm").exists()
    res = easlurm(env, "schedd", "--once", "--policy", "zeus", "--only-names", "box-env-none")
    assert res.returncode == 0, res.stderr
    assert not stale.exists(), "schedd did not manage the plugin's scheduler directory"
    assert Path("/var/spool/easlurm").exists() == host_spool_existed


def test_a_users_own_profiled_job_shows_gpu_and_cpu_energy_from_the_fake_sensors(
    slurm_box: Any, tmp_path: Path
) -> None:
    """box.fake_sensors (on by default): after `slurm-box up` and eval of `slurm-box env`, a plain
    `sbatch --energy-profile` job (no test plugstack line) shows GPU energy at the fake's 250 W per GPU,
    and measured CPU and DRAM energy from the fake RAPL tree: nothing modelled, no device without sensor."""
    env = box_shell_env(slurm_box)
    assert env["EASLURM_BOX__FAKE_SENSORS"] == "true"
    up = run(env, str(REPO / "scripts" / "slurm-box"), "up", "-q", timeout=180)  # as a user would
    assert up.returncode == 0, up.stderr
    tmp_path.chmod(0o755)
    job = run(
        env, "sbatch", "--parsable", "-p", "a100", "-N1", "--gres=gpu:a100:2", "--energy-profile",
        "-o", str(tmp_path / "out"), "--wrap", "srun sleep 3",
    ).stdout.strip()  # fmt: skip
    assert job.isdigit(), job
    assert slurm_box.wait_job(job, timeout_s=90) == "COMPLETED"
    end = time.monotonic() + 60
    step: dict[str, Any] = {}
    while time.monotonic() < end:
        res = easlurm(env, "sacct", "-j", job, "--json")
        assert res.returncode == 0, res.stderr
        step = next((r for r in json.loads(res.stdout)["rows"] if r["job_id"] == f"{job}.0"), {})
        if step.get("energy_record"):
            break
        time.sleep(1)
    rec = step["energy_record"]
    gpus = [d for n in rec["nodes"] for d in n["devices"] if d["kind"] == "gpu"]
    assert len(gpus) == 2
    for dev in gpus:
        assert dev["energy_j"] == pytest.approx(250.0 * dev["duration_s"], rel=0.02), dev
    assert step["cpu_energy_j"] and step["cpu_energy_j"] > 0, step
    assert step["dram_energy_j"] and step["dram_energy_j"] > 0, step
    assert "modelled" not in step["energy_flags"] and "nosensor" not in step["energy_flags"], step
