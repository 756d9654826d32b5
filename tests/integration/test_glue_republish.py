"""Cancelled jobs' energy reaches sacct: a profiled job cancelled mid-step (its hooks all run while it is
COMPLETING, so scontrol refuses and slurmctld's earlier copy of AdminComment can overwrite the agents'
sacctmgr fallback) shows every step's energy in `easlurm sacct` after `easlurm accounting republish`,
which waits until a database write is safe, verifies it, and changes nothing when run again."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from box_support import wait_for
from spank_support import GPU_W, plugin_with_fake_sensors, run_easlurm

from easlurm.accounting.step_record import decode_admin_comment, encode_admin_comment
from easlurm.slurm.client import CliSlurmClient

pytestmark = pytest.mark.slurm


def sacct_steps(box: Any, job: str) -> dict[str, dict[str, Any]]:
    """Step rows of `easlurm sacct` from AdminComment only (no spool fallback)."""
    res = run_easlurm(box, "sacct", "-j", job, "--json", "--no-spool")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)["rows"]
    return {r["job_id"].split(".", 1)[1]: r for r in rows if "." in r["job_id"]}


def test_glue_cancelled_jobs_energy_reaches_sacct_after_republish(slurm_box: Any, tmp_path: Path) -> None:
    """Two profiled jobs cancelled in their long step: `early` had published a step through scontrol
    first (slurmctld holds a copy: a database write must wait until slurmctld forgets the job), `lone`
    had not (written at once). After republishing, every step the spool holds (batch, 0, 1 / batch, 0)
    is in sacct with the fake sensors' energy; a second run finds nothing to do."""
    scripts = {
        "early": "#!/bin/sh\nsrun --gres=gpu:a100:1 sleep 1\nsrun --gres=gpu:a100:1 sleep 300\n",
        "lone": "#!/bin/sh\nsrun --gres=gpu:a100:1 sleep 300\n",
    }
    long_step = {"early": "1", "lone": "0"}
    with plugin_with_fake_sensors(slurm_box) as spool:
        jobs: dict[str, str] = {}
        for name, text in scripts.items():
            script = tmp_path / f"{name}.sh"
            script.write_text(textwrap.dedent(text))
            jobs[name] = slurm_box.sbatch(
                "-J",
                f"glue-republish-{name}",
                "-p",
                "a100",
                "-N1",
                "--gres=gpu:a100:1",
                "--energy-profile=gpu",
                "-o",
                str(tmp_path / f"{name}.out"),
                str(script),
            )
        try:
            for name, job in jobs.items():
                step_dir = spool / job / long_step[name]
                wait_for(step_dir.exists, 90, f"step {job}.{long_step[name]} to start")
            time.sleep(1.5)  # the long steps have measured something
            slurm_box.run(["scancel", *jobs.values()])
            for job in jobs.values():
                assert slurm_box.wait_job(job, timeout_s=90) == "CANCELLED"
        finally:
            slurm_box.run(["scancel", *jobs.values()], check=False)
        # the step records are in the spool (the agents ran), whatever reached the database
        for name, job in jobs.items():
            names = {p.name for p in (spool / job).glob("step-*.json")}
            assert {"step-batch.json", f"step-{long_step[name]}.json"} <= names, (name, names)
        # What the facts say can happen (ARCHITECTURE.md): slurmctld's copy of AdminComment (step 0 for
        # `early`, nothing for `lone`) overwrites the agents' sacctmgr fallback in the database, on a late
        # completion record or a controller restart within MinJobAge. Put the database in that state.
        client = CliSlurmClient(env=slurm_box.env)
        ctld = {name: client.show_job(int(job)).get("AdminComment", "") for name, job in jobs.items()}
        assert [s.step for s in decode_admin_comment(ctld["early"])] == ["0"]
        assert ctld["lone"] in ("", "(null)")
        client.set_admin_comment_db(int(jobs["early"]), ctld["early"])
        client.set_admin_comment_db(int(jobs["lone"]), encode_admin_comment([]))
        before = {name: sacct_steps(slurm_box, job) for name, job in jobs.items()}
        assert {s for s, r in before["early"].items() if r.get("energy_record")} == {"0"}
        assert not any(r.get("energy_record") for r in before["lone"].values())
        ids = ",".join(jobs.values())
        common = ["accounting", "republish", "-j", ids, "--spool", str(spool), "--json"]
        first = run_easlurm(slurm_box, *common)
        assert first.returncode == 0, first.stdout + first.stderr
        status = {r["job_id"]: r for r in json.loads(first.stdout)["jobs"]}
        # slurmctld still knows both jobs (MinJobAge=30 on the box): `lone` is safe to write now, `early`
        # must wait (a write now could be overwritten by slurmctld's copy again)
        assert status[jobs["lone"]]["status"] == "republished", status
        assert status[jobs["early"]]["status"] == "deferred", status
        res = run_easlurm(slurm_box, *common, "--wait", "150s")
        assert res.returncode == 0, res.stdout + res.stderr
        results = {r["job_id"]: r for r in json.loads(res.stdout)["jobs"]}
        assert results[jobs["early"]]["status"] == "republished", results
        assert results[jobs["early"]]["missing_steps"] == ["1", "batch"]
        assert results[jobs["lone"]]["status"] == "up-to-date", results
        for name, job in jobs.items():
            steps = sacct_steps(slurm_box, job)
            for step in ("batch", "0", long_step[name]):
                assert steps[step].get("energy_record") is not None, (name, step)
                assert "spool" not in (steps[step].get("energy_flags") or "")
            # the cancelled step's GPU energy is the fake's power over the measured window
            node = steps[long_step[name]]["energy_record"]["nodes"][0]
            gpu = [d for d in node["devices"] if d["kind"] == "gpu"]
            assert len(gpu) == 1 and gpu[0]["duration_s"] > 0.5
            assert gpu[0]["energy_j"] == pytest.approx(GPU_W * gpu[0]["duration_s"], rel=0.01)
        again = run_easlurm(slurm_box, *common)
        assert again.returncode == 0, again.stderr
        assert {r["status"] for r in json.loads(again.stdout)["jobs"]} == {"up-to-date"}
