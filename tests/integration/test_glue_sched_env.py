"""The scheduler daemon's choice reaches the job: `<spool>/sched/job-<id>.env`, written by the daemon's
own plan/execute path, becomes EASLURM_* variables in the batch script and its srun steps (the SPANK
plugin's user_init). A foreign-owned, writable, oversized or symlinked file is ignored, malformed lines
are skipped, and the job still completes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from easlurm.priority.apply import Kind, PlanContext, execute, plan
from easlurm.priority.snapshot import ClusterSnapshot, Decision, StartJob
from easlurm.slurm.sched_client import CliSchedClient

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
SCRIPT = (
    "env | grep ^EASLURM_ | sort | sed s/^/batch:/; srun -n1 env | grep ^EASLURM_ | sort | sed s/^/step:/"
)


@pytest.fixture
def env_dir(slurm_box: Any) -> Iterator[Path]:
    """The box plugin's scheduler directory (<spool>/sched); the files this test wrote are removed after."""
    subprocess.run(
        [str(REPO / "spank" / "install-box"), str(slurm_box.dir), sys.executable],
        check=True,
        capture_output=True,
    )
    d = Path(slurm_box.dir) / "spool" / "easlurm" / "sched"
    before = set(d.glob("job-*.env")) if d.exists() else set()
    yield d
    for p in set(d.glob("job-*.env")) - before:
        p.unlink(missing_ok=True)


def held_job(box: Any, out: Path, *extra: str) -> str:
    return str(
        box.sbatch("--hold", "-J", "glue-env", "-p", "cpu", "-n1", "-o", str(out), *extra, "--wrap", SCRIPT)
    )


def run_released(box: Any, job: str, timeout_s: float = 90.0) -> str:
    box.run(["scontrol", "release", job])
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        res = box.run(["squeue", "-h", "-j", job, "-o", "%T"], check=False)
        if res.returncode != 0 or not res.stdout.strip():
            break
        time.sleep(0.3)
    return str(box.wait_job(job, timeout_s=max(10.0, end - time.monotonic())))


def seen(out: Path) -> dict[str, dict[str, str]]:
    """{'batch': {...}, 'step': {...}}: the EASLURM_* variables each context printed."""
    got: dict[str, dict[str, str]] = {"batch": {}, "step": {}}
    for line in out.read_text().splitlines():
        where, _, kv = line.partition(":")
        if where in got and "=" in kv:
            k, _, v = kv.partition("=")
            if "__" not in k:  # EASLURM_<SECTION>__<KEY> are configuration, inherited from the submitter
                got[where][k] = v
    return got


def slurmd_log_mentions(box: Any, text: str) -> bool:
    return any(text in p.read_text(errors="replace") for p in (Path(box.dir) / "log").glob("slurmd-*.log"))


def test_glue_daemon_choice_reaches_job_environment(slurm_box: Any, env_dir: Path, tmp_path: Path) -> None:
    """A pending declared job; the daemon's plan for a start (batch 128 on 2 GPUs, power limit) is applied
    through its execute(); the batch script and its srun step both see EASLURM_BATCH_SIZE and EASLURM_GPUS."""
    out = tmp_path / "out"
    job = held_job(slurm_box, out, "--energy-profile=model=resnet50,steps=100,batch=64:128:256,gpus=1:2:4")
    start = StartJob(job, "cpu-1", n_gpus=2, batch=128, gpu_type="a100", power_limit_w=275.0)
    ctx = PlanContext(
        now_s=time.time(),
        jobs={},
        nodes={},
        declared=frozenset({job}),
        site_factors={},
        hold_ttl_s=600.0,
    )
    actions = plan(Decision(starts=(start,)), ClusterSnapshot(time_s=time.time(), nodes=()), ctx)
    assert [a.kind for a in actions] == [Kind.ENV]
    outcome = execute(actions, CliSchedClient(env=slurm_box.env), env_dir, dry_run=False)
    assert not outcome.failed
    assert run_released(slurm_box, job) == "COMPLETED"
    got = seen(out)
    want = {
        "EASLURM_BATCH_SIZE": str(start.batch),
        "EASLURM_GPUS": str(start.n_gpus),
        "EASLURM_GPU_TYPE": start.gpu_type,
        "EASLURM_POWER_LIMIT_W": "275",
    }
    for where in ("batch", "step"):
        assert {k: got[where].get(k) for k in want} == want, (where, out.read_text())


def test_glue_job_without_file_gets_nothing(slurm_box: Any, env_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    job = held_job(slurm_box, out)
    assert not (env_dir / f"job-{job}.env").exists()
    assert run_released(slurm_box, job) == "COMPLETED"
    assert seen(out) == {"batch": {}, "step": {}}


def test_glue_bad_env_files_are_ignored(slurm_box: Any, env_dir: Path, tmp_path: Path) -> None:
    """Foreign owner, group-writable, symlink, hard link, oversized: ignored whole (logged); malformed
    lines: skipped, the good ones kept. Every job completes."""
    env_dir.mkdir(mode=0o755, exist_ok=True)
    good = "EASLURM_BATCH_SIZE=64\nEASLURM_GPUS=4\n"
    target = tmp_path / "elsewhere.env"
    target.write_text(good)
    cases: dict[str, str] = {}
    outs: dict[str, Path] = {}
    for name in ("foreign", "writable", "symlink", "hardlink", "oversized", "malformed"):
        outs[name] = tmp_path / f"out-{name}"
        cases[name] = held_job(slurm_box, outs[name])
    path = {name: env_dir / f"job-{job}.env" for name, job in cases.items()}
    path["foreign"].write_text(good)
    os.chown(path["foreign"], 65534, 65534)
    path["writable"].write_text(good)
    os.chmod(path["writable"], 0o664)
    path["symlink"].symlink_to(target)
    hard_src = env_dir / f".glue-{cases['hardlink']}.src"
    hard_src.write_text(good)
    os.link(hard_src, path["hardlink"])
    path["oversized"].write_text(good + "EASLURM_PAD=x\n" * 400)
    path["malformed"].write_text(
        "LD_PRELOAD=/tmp/evil.so\nEASLURM_GPUS=$(id)\neaslurm_gpus=2\nEASLURM_BATCH_SIZE=32\n"
        "EASLURM_GPU_TYPE=a100 h100\nEASLURM_GPUS=3\r\n" + "EASLURM_V=" + "9" * 65 + "\n"
    )
    try:
        for name in ("foreign", "writable", "symlink", "hardlink", "oversized", "malformed"):
            assert run_released(slurm_box, cases[name]) == "COMPLETED", name
        for name in ("foreign", "writable", "symlink", "hardlink", "oversized"):
            assert seen(outs[name]) == {"batch": {}, "step": {}}, (name, outs[name].read_text())
            assert slurmd_log_mentions(slurm_box, f"job {cases[name]}: scheduler settings ignored"), name
        got = seen(outs["malformed"])
        assert got["batch"] == got["step"] == {"EASLURM_BATCH_SIZE": "32"}, outs["malformed"].read_text()
        assert slurmd_log_mentions(slurm_box, f"job {cases['malformed']}: 6 malformed line(s)")
    finally:
        hard_src.unlink(missing_ok=True)
        for name in cases:
            slurm_box.run(["scancel", cases[name]], check=False)
