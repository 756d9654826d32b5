"""A profiler must never hurt a job: whatever happens to the agent (missing, crashing, hanging, no
spool, a sensor lost), jobs end COMPLETED, slurmd stays healthy and the record is absent or flagged.
A bad SPEC is refused at submission. Records are root-owned: the job's user reads, nobody writes."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from spank_support import plugin_with_fake_sensors, run_easlurm, slurmd_log

pytestmark = pytest.mark.slurm

TEST_USER = "easlurm-spank"


def records(box: Any, job: str) -> dict[str, dict[str, Any]]:
    res = run_easlurm(box, "sacct", "-j", job, "--json", "--no-spool", timeout=60)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)["rows"]
    return {r["job_id"].split(".", 1)[1]: r for r in rows if "." in r["job_id"] and r.get("energy_record")}


def assert_nodes_healthy(box: Any) -> None:
    res = box.run(["sinfo", "-h", "-N", "-o", "%N %T"])
    for line in res.stdout.splitlines():
        _name, state = line.split()
        assert not state.startswith(("down", "drain", "fail", "not_responding")), line


def run_job(box: Any, tmp_path: Path, *sbatch: str, script: str = "srun sleep 1") -> str:
    job = box.sbatch(
        "-p",
        "a100",
        "--gres=gpu:a100:2",
        "--energy-profile=all",
        "-o",
        str(tmp_path / "out"),
        *sbatch,
        "--wrap",
        script,
    )
    assert box.wait_job(job) == "COMPLETED"
    return job


@pytest.mark.parametrize("how", ["missing", "crash"])
def test_agent_missing_or_crashing_leaves_no_record(slurm_box: Any, tmp_path: Path, how: str) -> None:
    agent = "/nonexistent/python3"
    if how == "crash":
        agent = str(tmp_path / "crash")
        Path(agent).write_text("#!/bin/sh\necho 'Traceback: simulated crash' >&2\nexit 1\n")
        Path(agent).chmod(0o755)
        os.chmod(tmp_path, 0o755)
    with plugin_with_fake_sensors(slurm_box, agent=agent):
        job = run_job(slurm_box, tmp_path)
    assert records(slurm_box, job) == {}
    log = slurmd_log(slurm_box, job)
    assert ("not executable" if how == "missing" else "simulated crash") in log
    assert_nodes_healthy(slurm_box)


def test_hanging_agent_never_delays_the_step_and_ends_itself(slurm_box: Any, tmp_path: Path) -> None:
    """A wedged GPU driver (nvmlShutdown never returns): the step goes on after `timeout_ms`, and the agent,
    left to finish in the background, is ended by its own spank.late_limit_s bound (SIGALRM)."""
    # awk, not bc: a minimal Debian has no bc
    script = 't0=$(date +%s.%N); srun sleep 1; t1=$(date +%s.%N); awk "BEGIN {print \\"step_s=\\" $t1 - $t0}"'
    hang = ("env=EASLURM_FAKE_NVML_HANG_SHUTDOWN=1", "env=EASLURM_SPANK__LATE_LIMIT_S=3")
    with plugin_with_fake_sensors(slurm_box, *hang, timeout_ms=500):
        job = run_job(slurm_box, tmp_path, script=script)
    step_s = float((tmp_path / "out").read_text().split("step_s=")[1].split()[0])
    assert step_s < 1.0 + 0.5 + 1.5  # sleep + timeout + srun overhead
    assert f"step {job}.0: agent still running after 500 ms; left to finish" in slurmd_log(slurm_box, job)
    pattern = f"easlurm.accounting.agent --job {job} "
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True, check=False)
        if not left.stdout.strip():
            break
        time.sleep(0.5)
    assert left.stdout.strip() == "", "agent outlived spank.late_limit_s"
    assert "0" not in records(slurm_box, job)  # it never got past the sensor: no record, no harm
    assert_nodes_healthy(slurm_box)


@pytest.mark.parametrize("spec", ["bogus", "interval=1ms", "gpu,gpu", "model=$(reboot)", "all,cpu"])
@pytest.mark.parametrize("command", ["sbatch", "srun"])
def test_bad_spec_is_refused_at_submission(slurm_box: Any, tmp_path: Path, command: str, spec: str) -> None:
    argv = [command, "-p", "a100", f"--energy-profile={spec}"]
    argv += ["-o", str(tmp_path / "out"), "--wrap", "true"] if command == "sbatch" else ["true"]
    res = slurm_box.run(argv, check=False)
    assert res.returncode != 0
    assert "invalid --energy-profile" in res.stderr
    assert res.stdout.strip() == ""  # no job id: nothing was submitted
    assert not (tmp_path / "out").exists()


def test_unusable_spool_still_ends_completed_and_flags_the_record(slurm_box: Any, tmp_path: Path) -> None:
    bad_spool = tmp_path / "not-a-dir"
    bad_spool.write_text("")
    with plugin_with_fake_sensors(slurm_box, spool=str(bad_spool)):
        job = run_job(slurm_box, tmp_path, "-N2", "--ntasks-per-node=1", script="srun sleep 1")
    recs = records(slurm_box, job)
    step0 = recs["0"]["energy_record"]
    assert step0["partial"] and step0["missing_nodes"] == [1]  # node records could not meet
    assert len(step0["nodes"]) == 1 and step0["gpu_energy_j"] > 0
    assert "spool" in slurmd_log(slurm_box, job)
    assert_nodes_healthy(slurm_box)


def test_lost_gpu_is_flagged(slurm_box: Any, tmp_path: Path) -> None:
    with plugin_with_fake_sensors(slurm_box, "env=EASLURM_FAKE_NVML_LOST=1:0.3"):
        job = run_job(slurm_box, tmp_path, script="srun sleep 2")
    row = records(slurm_box, job)["0"]
    assert "degraded:gpu1" in row["energy_flags"]
    devs = {d["name"]: d for d in row["energy_record"]["nodes"][0]["devices"]}
    assert devs["gpu1"]["error"] and devs["gpu0"]["error"] is None


@pytest.fixture
def test_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(TEST_USER)
    except KeyError:
        subprocess.run(["useradd", "-M", "-s", "/bin/sh", TEST_USER], check=True, capture_output=True)
        return pwd.getpwnam(TEST_USER)


def test_records_are_readable_by_the_user_and_writable_by_nobody_else(
    slurm_box: Any, tmp_path: Path, test_user: pwd.struct_passwd
) -> None:
    os.chmod(tmp_path, 0o777)
    with plugin_with_fake_sensors(slurm_box):
        res = subprocess.run(
            [
                "runuser",
                "-u",
                TEST_USER,
                "--",
                "sbatch",
                "--parsable",
                "-p",
                "a100",
                "--gres=gpu:a100:1",
                "--energy-profile=gpu",
                "-D",
                "/tmp",
                "-o",
                "/dev/null",
                "--wrap",
                "srun sleep 1",
            ],
            capture_output=True,
            text=True,
            env={**os.environ, **slurm_box.env},
            check=True,
        )
        job = res.stdout.strip().split(";")[0]
        assert slurm_box.wait_job(job) == "COMPLETED"
    job_dir = Path(slurm_box.dir) / "spool" / "easlurm" / job
    step_file = job_dir / "step-0.json"
    st = step_file.stat()
    assert st.st_uid == 0 and st.st_gid == test_user.pw_gid and st.st_mode & 0o777 == 0o640
    as_user = ["runuser", "-u", TEST_USER, "--"]
    assert subprocess.run([*as_user, "cat", str(step_file)], capture_output=True, check=False).returncode == 0
    assert (
        subprocess.run(
            [*as_user, "sh", "-c", f"echo x >> {step_file}"], capture_output=True, check=False
        ).returncode
        != 0
    )
    assert (
        subprocess.run(
            [*as_user, "touch", str(job_dir / "forged.json")], capture_output=True, check=False
        ).returncode
        != 0
    )
    other = ["runuser", "-u", "nobody", "--"]
    assert subprocess.run([*other, "cat", str(step_file)], capture_output=True, check=False).returncode != 0
    assert "0" in records(slurm_box, job)


def test_cancelled_job_energy_comes_from_the_spool(slurm_box: Any, tmp_path: Path) -> None:
    """scancel: every hook sees COMPLETING (no scontrol path); the step files still hold the records."""
    with plugin_with_fake_sensors(slurm_box):
        job = slurm_box.sbatch(
            "-p",
            "a100",
            "--gres=gpu:a100:2",
            "--energy-profile=all",
            "-o",
            str(tmp_path / "out"),
            "--wrap",
            "srun sleep 60",
        )
        end = time.monotonic() + 60
        while "RUNNING" not in slurm_box.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout:
            assert time.monotonic() < end
            time.sleep(0.3)
        time.sleep(3.0)  # the srun step and its agents are up
        slurm_box.run(["scancel", job])
        assert slurm_box.wait_job(job).startswith("CANCELLED")
    spool = Path(slurm_box.dir) / "spool" / "easlurm"
    res = run_easlurm(slurm_box, "sacct", "-j", job, "--json", "--spool", str(spool), timeout=60)
    assert res.returncode == 0, res.stderr
    rows = {r["job_id"].split(".", 1)[1]: r for r in json.loads(res.stdout)["rows"] if "." in r["job_id"]}
    # from the spool files, or (when sacctmgr could still set it) from AdminComment
    assert rows["0"]["gpu_energy_j"] > 0, rows["0"]
    assert rows["0"]["energy_record"]["nodes"][0]["devices"]
