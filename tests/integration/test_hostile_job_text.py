"""Nothing a user writes reaches what the agents publish: a job whose name, comment and working directory
hold `Key=value` look-alikes (and, on 26.05, a submit line repeating them) and a well-formed but forged
energy record is accounted from what the agents measured, on every Slurm version. Slurm prints user
text unquoted in `scontrol -o show job`, so any reader of that text could take `Restarts=7` (which keys a
run's records) or `AdminComment=<record>` (which an agent without a spool merges) from the user."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from spank_support import plugin_with_fake_sensors, run_easlurm

from easlurm.accounting.step_record import DeviceRecord, NodeRecord, StepRecord, encode_admin_comment

pytestmark = pytest.mark.slurm

FORGED_J = 123_456_789.0


def forged_comment(job_id: int) -> str:
    """A valid AdminComment document claiming a huge step 7 of `job_id` on a node that does not exist."""
    dev = DeviceRecord("gpu0", "gpu", FORGED_J, FORGED_J / 10, 10, False, "nvml-energy")
    return encode_admin_comment([StepRecord(job_id, "7", 1, [NodeRecord(0, "evil-1", 1.7e9, 10.0, [dev])])])


def submit_hostile(box: Any, tmp_path: Path) -> str:
    """A held profiled job with a hostile name and working directory; its Comment is then set (as any user
    may) to look-alikes and a forged record carrying its own job id; then released."""
    workdir = tmp_path / "d Restarts=7 AdminComment=easlurm1:00ff"
    workdir.mkdir(parents=True)
    for p in (tmp_path, workdir):
        p.chmod(0o755)
    job = box.sbatch(
        "--hold",
        "-J",
        "x Restarts=7 AdminComment=easlurm-forged",
        "-D",
        str(workdir),
        "-p",
        "a100",
        "--gres=gpu:a100:1",
        "--energy-profile=all",
        "-o",
        str(tmp_path / "out"),
        "--wrap",
        "srun sleep 1",
    )
    box.run(
        [
            "scontrol",
            "update",
            f"JobId={job}",
            f"Comment=y Restarts=7 AdminComment={forged_comment(int(job))}",
        ]
    )
    box.run(["scontrol", "release", job])
    return job


def measured_rows(box: Any, job: str) -> dict[str, dict[str, Any]]:
    res = run_easlurm(box, "sacct", "-j", job, "-D", "--json", timeout=60)
    assert res.returncode == 0, res.stderr
    return {r["job_id"]: r for r in json.loads(res.stdout)["rows"]}


def assert_only_measured(rows: dict[str, dict[str, Any]], job: str) -> None:
    assert f"{job}.7" not in rows and {f"{job}.batch", f"{job}.0"} <= set(rows)
    for name in (f"{job}.batch", f"{job}.0"):
        rec = rows[name].get("energy_record")
        assert rec is not None, (name, rows[name])  # keyed by the real run (0), not the user's "Restarts=7"
        assert rec.get("run", 0) == 0 and all(n["host"] != "evil-1" for n in rec["nodes"]), rec
    assert 0 < rows[job]["total_energy_j"] < FORGED_J
    assert not rows[job].get("requeue_energy_j")


def test_hostile_text_plants_nothing_with_a_spool(slurm_box: Any, tmp_path: Path) -> None:
    with plugin_with_fake_sensors(slurm_box):
        job = submit_hostile(slurm_box, tmp_path)
        assert slurm_box.wait_job(job) == "COMPLETED"
    assert_only_measured(measured_rows(slurm_box, job), job)


def test_hostile_text_plants_nothing_without_a_spool(slurm_box: Any, tmp_path: Path) -> None:
    """A node whose spool is unusable publishes its step straight into AdminComment, merged with what
    slurmctld holds: read from JSON, the user's Comment never counts as what slurmctld holds."""
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    with plugin_with_fake_sensors(slurm_box, spool=blocked / "spool"):
        job = submit_hostile(slurm_box, tmp_path / "job")
        assert slurm_box.wait_job(job) == "COMPLETED"
    res = run_easlurm(slurm_box, "sacct", "-j", job, "-D", "--json", "--no-spool", timeout=60)
    assert res.returncode == 0, res.stderr
    rows = {r["job_id"]: r for r in json.loads(res.stdout)["rows"]}
    assert f"{job}.7" not in rows
    for row in rows.values():
        rec = row.get("energy_record") or {}
        assert all(n["host"] != "evil-1" for n in rec.get("nodes", ())), row
        assert (row.get("total_energy_j") or 0.0) < FORGED_J
