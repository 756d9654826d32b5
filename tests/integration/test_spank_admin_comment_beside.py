"""easlurm beside a site's AdminComment, live: a job whose AdminComment holds a site's value (set by an
operator with scontrol while it runs) runs two profiled steps. A plain value: after the job, sacct shows
it first, byte for byte, and easlurm's record after it, which `easlurm sacct` (without the spool) and seff
read. A jobstats value (`JS1:` + base64 of gzipped JSON, which its reader decodes to the end of the
field): easlurm writes nothing, the value stays exactly as set, and `easlurm sacct` reads the steps'
energy from the spool. With `spank.store: spool` easlurm writes nothing there either."""

from __future__ import annotations

import base64
import gzip
import json
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from spank_support import plugin_with_fake_sensors, run_easlurm

from easlurm.accounting.admin_codec import READABLE, SEPARATOR
from easlurm.accounting.step_record import decode_admin_comment

pytestmark = pytest.mark.slurm

SUMMARY = {"nodes": {"a100-1": {"cpus": 1, "gpu_utilization": {"0": 93.1}, "used_memory": 2_000_000}}}
JOBSTATS = "JS1:" + base64.b64encode(gzip.compress(json.dumps(SUMMARY).encode(), mtime=0)).decode()
#: A site's value that is not tag:base64 (capitals, spaces, punctuation): easlurm's part goes after it
SITE = "site:owner=Ops;keep=1 (rack 12, ask ops)"


def jobstats_reads(value: str) -> Any:
    """jobstats' own reading of the field (jobstats.py): JS1:, then base64, then gzip of the rest."""
    assert value.startswith("JS1:")
    return json.loads(gzip.decompress(base64.b64decode(value[4:])))


def admin_comment(box: Any, job: str) -> str:
    return box.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "AdminComment"]).stdout.rstrip("\n")


def run_job_with_site_value(box: Any, tmp_path: Path, site: str = JOBSTATS) -> str:
    """A job that waits until its AdminComment holds `site`, then runs two profiled srun steps."""
    go = tmp_path / "go"
    script = tmp_path / "job.sh"
    script.write_text(
        textwrap.dedent(f"""\
            #!/bin/sh
            while [ ! -e {go} ]; do sleep 0.1; done
            srun --energy-profile=gpu,cpu sleep 1 || exit 3
            srun --energy-profile=gpu,cpu true || exit 4
            sleep 4  # a loaded host's agent may publish after srun returns: while the job still runs
            """)
    )
    job = box.sbatch("-p", "a100", "-N1", "--gres=gpu:a100:1", "-o", str(tmp_path / "out"), str(script))
    deadline = time.monotonic() + 60
    while box.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip() != "RUNNING":
        assert time.monotonic() < deadline, "job did not start"
        time.sleep(0.2)
    box.run(["scontrol", "update", f"JobId={job}", f"AdminComment={site}"])
    go.touch()
    assert box.wait_job(job, timeout_s=90) == "COMPLETED", (tmp_path / "out").read_text()
    return job


def test_easlurm_record_beside_a_site_value(slurm_box: Any, tmp_path: Path) -> None:
    with plugin_with_fake_sensors(slurm_box, timeout_ms=5000):
        job = run_job_with_site_value(slurm_box, tmp_path, SITE)
    deadline = time.monotonic() + 30
    while len(decode_admin_comment(value := admin_comment(slurm_box, job))) < 2:
        assert time.monotonic() < deadline, value[:200]
        time.sleep(0.5)
    # the second publication read the first back and replaced easlurm's part only
    assert value.startswith(SITE + SEPARATOR + READABLE + "easlurm2:"), value[:200]
    assert value.count(SEPARATOR) == 1 and value.count(READABLE) == 1
    res = run_easlurm(slurm_box, "sacct", "-j", job, "--no-spool", "--json")
    assert res.returncode == 0, res.stderr
    rows = {r["job_id"]: r for r in json.loads(res.stdout)["rows"]}
    for key in ("0", "1"):
        step = rows[f"{job}.{key}"]
        assert step["energy_record"] and step["gpu_energy_j"] > 0
        assert "spool" not in (step["energy_flags"] or "")  # read from AdminComment
    res = run_easlurm(slurm_box, "seff", job, "--json", "--no-spool")
    assert res.returncode == 0, res.stderr
    card = json.loads(res.stdout)
    assert card["total_energy_j"] == pytest.approx(rows[job]["total_energy_j"], rel=1e-9)


def test_a_jobstats_value_is_left_alone(slurm_box: Any, tmp_path: Path) -> None:
    """Nothing can follow a value its reader base64-decodes to the end of the field (Python >= 3.12's
    b64decode reads past padding): easlurm leaves it exactly as set and keeps its record in the spool."""
    with plugin_with_fake_sensors(slurm_box, timeout_ms=5000):
        job = run_job_with_site_value(slurm_box, tmp_path)
        deadline = time.monotonic() + 30
        while True:
            res = run_easlurm(slurm_box, "sacct", "-j", job, "--json")
            assert res.returncode == 0, res.stderr
            rows = {r["job_id"]: r for r in json.loads(res.stdout)["rows"]}
            if all(rows.get(f"{job}.{k}", {}).get("energy_record") for k in ("0", "1")):
                break
            assert time.monotonic() < deadline, res.stdout[:400]
            time.sleep(0.5)
    for key in ("0", "1"):
        step = rows[f"{job}.{key}"]
        assert step["gpu_energy_j"] > 0 and "spool" in (step["energy_flags"] or "")  # read from the spool
    value = admin_comment(slurm_box, job)
    assert value == JOBSTATS  # byte for byte, nothing of easlurm's
    assert jobstats_reads(value) == SUMMARY


def test_store_spool_leaves_admin_comment_to_the_site(slurm_box: Any, tmp_path: Path) -> None:
    with plugin_with_fake_sensors(slurm_box, "env=EASLURM_SPANK__STORE=spool", timeout_ms=5000):
        job = run_job_with_site_value(slurm_box, tmp_path)
    res = run_easlurm(slurm_box, "sacct", "-j", job, "--json")
    assert res.returncode == 0, res.stderr
    rows = {r["job_id"]: r for r in json.loads(res.stdout)["rows"]}
    assert rows[f"{job}.0"]["energy_record"] and rows[f"{job}.0"]["gpu_energy_j"] > 0
    res = run_easlurm(slurm_box, "seff", job, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["total_energy_j"] > 0
    assert admin_comment(slurm_box, job) == JOBSTATS  # nothing of easlurm's, the site's value as set
