"""Publication at scale on the real local cluster: a job of 200 quick profiled steps keeps every step's
energy and the job's total. AdminComment carries the newest steps in detail and each run's total over all
of them, naming the steps it left out; those steps' records are in the spool. `easlurm sacct` shows all
of them with the spool, and without it shows the same job total and flags the rows it cannot fill."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from spank_support import plugin_with_fake_sensors, run_easlurm

from easlurm.accounting.admin_codec import READABLE
from easlurm.accounting.step_record import ADMIN_COMMENT_MAX_CHARS, ADMIN_COMMENT_MAX_STEPS

pytestmark = pytest.mark.slurm

STEPS = 200


def sacct_rows(box: Any, job: str, *opts: str) -> dict[str, dict[str, Any]]:
    """`easlurm sacct -j JOB --json` rows by job id (`JOB`, `JOB.0`, `JOB.batch` ...)."""
    res = run_easlurm(box, "sacct", "-j", job, "--json", *opts, timeout=120)
    assert res.returncode == 0, res.stderr
    return {r["job_id"]: r for r in json.loads(res.stdout)["rows"]}


def all_published(box: Any, job: str, spool: Path, timeout_s: float = 90) -> dict[str, dict[str, Any]]:
    """The rows once every step has its energy (an agent left to finish in the background on a loaded
    node publishes after the job ended)."""
    want = [f"{job}.{i}" for i in range(STEPS)] + [f"{job}.batch"]
    deadline = time.monotonic() + timeout_s
    while True:
        rows = sacct_rows(box, job, f"--spool={spool}")
        if all(rows.get(k, {}).get("total_energy_j") for k in want) or time.monotonic() > deadline:
            return rows
        time.sleep(2)


def test_a_job_of_200_steps_keeps_every_step_and_the_total(slurm_box: Any, tmp_path: Path) -> None:
    script = tmp_path / "steps.sh"
    script.write_text(
        textwrap.dedent(f"""\
        #!/bin/bash
        for i in $(seq {STEPS}); do srun -n1 -N1 true; done
        """)
    )
    with plugin_with_fake_sensors(slurm_box) as spool:
        job = slurm_box.sbatch(
            "-p",
            "a100",
            "-N1",
            "--gres=gpu:a100:1",
            "--energy-profile=gpu",
            "-o",
            str(tmp_path / "out"),
            str(script),
        )
        assert slurm_box.wait_job(job, timeout_s=300) == "COMPLETED"
        rows = all_published(slurm_box, job, spool)
    steps = {k: r for k, r in rows.items() if k.startswith(f"{job}.") and not k.endswith(".extern")}
    assert len(steps) == STEPS + 1
    assert [k for k, r in steps.items() if not r["total_energy_j"]] == []
    total = rows[job]
    assert total["energy_flags"].startswith("job-total") and "detail-omitted" not in total["energy_flags"]
    # the batch step spans the srun steps on the same GPU: the total is the batch step's, at least
    assert total["total_energy_j"] >= steps[f"{job}.batch"]["total_energy_j"] > 0

    admin = slurm_box.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "AdminComment"]).stdout.strip()
    assert admin.startswith(READABLE + "easlurm2:") and len(admin) <= ADMIN_COMMENT_MAX_CHARS

    bare = sacct_rows(slurm_box, job, "--no-spool")
    omitted = sorted(k for k, r in bare.items() if r["energy_flags"] == "omitted")
    carried = [k for k, r in bare.items() if k in steps and r["total_energy_j"]]
    assert len(carried) <= ADMIN_COMMENT_MAX_STEPS and len(carried) + len(omitted) == STEPS + 1
    assert all(bare[k]["total_energy_j"] is None for k in omitted)
    assert bare[job]["energy_flags"].endswith(f",detail-omitted:{len(omitted)}")
    assert bare[job]["total_energy_j"] == pytest.approx(total["total_energy_j"], rel=1e-6)
