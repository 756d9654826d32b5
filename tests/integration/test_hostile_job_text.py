"""Nothing a user writes reaches what the agents publish: a job whose name, comment and working directory
hold `Key=value` look-alikes (and, on 26.05, a submit line repeating them) and a well-formed but forged
energy record is accounted from what the agents measured, on every Slurm version."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from spank_support import plugin_with_fake_sensors, run_easlurm

from easlurm.accounting.step_record import DeviceRecord, NodeRecord, StepRecord, encode_admin_comment

pytestmark = pytest.mark.slurm

FORGED_J = 123_456_789.0


def forged_comment(job_hint: int) -> str:
    """A valid AdminComment document claiming a huge step 7 on a node that does not exist."""
    dev = DeviceRecord("gpu0", "gpu", FORGED_J, FORGED_J / 10, 10, False, "nvml-energy")
    return encode_admin_comment([StepRecord(job_hint, "7", 1, [NodeRecord(0, "evil-1", 1.7e9, 10.0, [dev])])])


def test_hostile_names_comments_and_dirs_plant_nothing(slurm_box: Any, tmp_path: Path) -> None:
    forged = forged_comment(0)
    workdir = tmp_path / f"d AdminComment={forged[:40]} Restarts=7"  # a path component holds 255 bytes
    workdir.mkdir(parents=True)
    workdir.chmod(0o755)
    tmp_path.chmod(0o755)
    with plugin_with_fake_sensors(slurm_box):
        job = slurm_box.sbatch(
            "-J",
            "x Restarts=7 AdminComment=easlurm-forged",
            f"--comment=y Restarts=7 AdminComment={forged}",
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
        assert slurm_box.wait_job(job) == "COMPLETED"
    res = run_easlurm(slurm_box, "sacct", "-j", job, "-D", "--json", timeout=60)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)["rows"]
    steps = {r["job_id"] for r in rows if "." in r["job_id"]}
    assert steps >= {f"{job}.batch", f"{job}.0"} and f"{job}.7" not in steps
    for row in rows:
        rec = row.get("energy_record") or {}
        assert all(n["host"] != "evil-1" for n in rec.get("nodes", ())), row
        assert (row.get("total_energy_j") or 0.0) < FORGED_J
    job_row = next(r for r in rows if r["job_id"] == job)
    assert job_row["total_energy_j"] is not None and job_row["total_energy_j"] > 0
    assert not job_row.get("requeue_energy_j")  # one run: no earlier run was invented from "Restarts=7"
