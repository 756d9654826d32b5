"""Requeued jobs on the real local cluster: every run keeps its own step records (keyed by
SLURM_RESTART_COUNT), the job row shows the run's total and the earlier runs' energy, the job's output
holds no easlurm line, and a spool directory left from an unrelated earlier job never blocks profiling."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from spank_support import GPU_W, plugin_with_fake_sensors, run_easlurm

pytestmark = pytest.mark.slurm


def sacct_doc(box: Any, *args: str) -> dict[str, Any]:
    res = run_easlurm(box, "sacct", *args, "--json", timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def wait_state(box: Any, job: str, state: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        res = box.run(["squeue", "-h", "-j", job, "-o", "%T"], check=False)
        if res.stdout.strip() == state:
            return
        time.sleep(0.2)
    raise AssertionError(f"job {job} not {state} after {timeout_s}s")


def runs_of(doc: dict[str, Any]) -> list[dict[str, dict[str, Any]]]:
    """Rows grouped per run (sacct -D order): [{'job': row, 'batch': row, '0': row}, ...]."""
    runs: list[dict[str, dict[str, Any]]] = []
    for row in doc["rows"]:
        _job, _, step = row["job_id"].partition(".")
        if not step:
            runs.append({"job": row})
        else:
            runs[-1][step] = row
    return runs


def test_requeued_job_keeps_each_runs_energy_and_a_job_total(slurm_box: Any, tmp_path: Path) -> None:
    """sbatch --requeue 'srun sleep 4; sleep 6', requeued after ~7 s: each run's step 0 has its own GPU
    energy (2 GPUs at GPU_W, within 1%), the first run's batch step (ended by the requeue) has a record,
    the job rows carry totals and the second run's RequeueEnergy is the first run's total."""
    tmp_path.chmod(0o755)
    out = tmp_path / "out"
    with plugin_with_fake_sensors(slurm_box):
        job = slurm_box.sbatch(
            "-p",
            "a100",
            "-N1",
            "--gres=gpu:a100:2",
            "--requeue",
            "--open-mode=append",
            "--energy-profile=gpu",
            "-o",
            str(out),
            "--wrap",
            "srun sleep 4; sleep 6",
        )
        wait_state(slurm_box, job, "RUNNING")
        time.sleep(7)
        slurm_box.run(["scontrol", "requeue", job])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # a requeued job waits ~120 s unless its start time is reset
            slurm_box.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=False)
            res = slurm_box.run(["squeue", "-h", "-j", job, "-o", "%T"], check=False)
            if res.stdout.strip() == "RUNNING":
                break
            time.sleep(1)
        assert slurm_box.wait_job(job, timeout_s=90) == "COMPLETED"
    deadline = time.monotonic() + 60
    while True:
        runs = runs_of(sacct_doc(slurm_box, "-j", job, "-D"))
        have = [r.get(s, {}).get("energy_record") is not None for r in runs for s in ("0", "batch")]
        if (len(runs) == 2 and all(have)) or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert len(runs) == 2, runs
    for n, run in enumerate(runs):
        rec = run["0"]["energy_record"]
        assert rec is not None and rec["run"] == n, run["0"]
        assert 3.0 < rec["duration_s"] < 6.0
        gpus = [d for node in rec["nodes"] for d in node["devices"] if d["kind"] == "gpu"]
        assert len(gpus) == 2
        for dev in gpus:  # the fake's known power over the device's window
            assert dev["energy_j"] == pytest.approx(GPU_W * dev["duration_s"], rel=0.01), dev
        assert run["batch"]["energy_record"]["run"] == n
        assert run["job"]["total_energy_j"] is not None
        assert "job-total" in run["job"]["energy_flags"]
    first_batch = runs[0]["batch"]
    assert "ended:" in first_batch["energy_flags"], first_batch  # cut short by the requeue
    # the job row counts node 0 once: the batch step (whole run) is the total, step 0 is inside it
    assert runs[1]["job"]["gpu_energy_j"] == pytest.approx(runs[1]["batch"]["gpu_energy_j"], rel=1e-6)
    assert runs[0]["job"]["requeue_energy_j"] is None
    assert runs[1]["job"]["requeue_energy_j"] == pytest.approx(runs[0]["job"]["total_energy_j"], rel=1e-6)
    # without -D: the last run only, with its own energy
    last = sacct_doc(slurm_box, "-j", job)["rows"]
    assert [r["job_id"] for r in last].count(job) == 1
    step0 = next(r for r in last if r["job_id"] == f"{job}.0")
    assert step0["energy_record"]["run"] == 1
    assert "easlurm" not in out.read_text(), out.read_text()


def test_stale_spool_directory_of_an_earlier_job_is_moved_aside(slurm_box: Any, tmp_path: Path) -> None:
    """A spool directory with this job id left from an unrelated earlier job (controller state lost):
    the job is profiled normally, the old directory is kept under another name, nothing in the output."""
    tmp_path.chmod(0o755)
    out = tmp_path / "out"
    with plugin_with_fake_sensors(slurm_box) as spool:
        job = slurm_box.sbatch(
            "-p", "a100", "-N1", "--gres=gpu:a100:1", "--hold", "--energy-profile=gpu", "-o", str(out),
            "--wrap", "srun sleep 2",
        )  # fmt: skip
        for step in ("batch", "0"):
            stale = spool / job / step / "node-0"
            stale.mkdir(parents=True, mode=0o750)
            (stale / "run.json").write_text("{}\n")
            (spool / job / f"step-{step}.json").write_text('{"schema_version": 1}\n')
        slurm_box.run(["scontrol", "release", job])
        assert slurm_box.wait_job(job, timeout_s=60) == "COMPLETED"
    deadline = time.monotonic() + 60
    while True:
        rows = {r["job_id"]: r for r in sacct_doc(slurm_box, "-j", job, "--no-spool")["rows"]}
        if rows.get(f"{job}.0", {}).get("energy_record") or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert rows[f"{job}.0"]["gpu_energy_j"] is not None and rows[f"{job}.0"]["gpu_energy_j"] > 0, rows
    assert list(spool.glob(f"{job}.stale-*")), "the old directory is kept for the admin"
    assert "easlurm" not in out.read_text(), out.read_text()


@pytest.mark.parametrize("how", ["scancel", "time-limit"])
def test_cancelled_and_timed_out_jobs_keep_their_records(slurm_box: Any, tmp_path: Path, how: str) -> None:
    """A job cancelled while running, and one killed at its time limit: the steps' records are in the
    spool (sacct reads them), flagged with how they ended, and nothing reaches the job's output."""
    tmp_path.chmod(0o755)
    out = tmp_path / "out"
    with plugin_with_fake_sensors(slurm_box) as spool:
        limit = ["--time=0:10"] if how == "time-limit" else []
        job = slurm_box.sbatch(
            "-p", "a100", "-N1", "--gres=gpu:a100:1", *limit, "--energy-profile=gpu", "-o", str(out),
            "--wrap", "srun sleep 300",
        )  # fmt: skip
        wait_state(slurm_box, job, "RUNNING")
        if how == "scancel":
            time.sleep(4)
            slurm_box.run(["scancel", job])
        assert slurm_box.wait_job(job, timeout_s=150) in ("CANCELLED", "TIMEOUT")
    deadline = time.monotonic() + 60
    while True:
        rows = {r["job_id"]: r for r in sacct_doc(slurm_box, "-j", job, "--spool", str(spool))["rows"]}
        if rows.get(f"{job}.0", {}).get("energy_record") or time.monotonic() > deadline:
            break
        time.sleep(2)
    step0 = rows[f"{job}.0"]
    assert step0["gpu_energy_j"] is not None and step0["gpu_energy_j"] > 0, rows
    assert "ended:" in step0["energy_flags"], step0
    assert rows[job]["total_energy_j"] is not None
    assert "easlurm" not in out.read_text(), out.read_text()
