"""Capture real `sacct -P` and `sacct --json` after a mixed workload on the local Slurm, replay them,
and compare the replay with what the cluster actually did."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from easlurm.sim.cluster import ClusterSpec
from easlurm.sim.replay import ReplayRequest, replay
from easlurm.sim.traces import TraceStats, open_trace

pytestmark = pytest.mark.slurm

#: Many fields, as an operator's export would have; SubmitLine last (it may hold newlines).
FORMAT = (
    "JobID,JobIDRaw,JobName,User,UID,Account,Partition,QOS,State,ExitCode,DerivedExitCode,Submit,Eligible,"
    "Start,End,Elapsed,ElapsedRaw,Timelimit,TimelimitRaw,NNodes,NCPUS,AllocCPUS,ReqCPUS,ReqMem,ReqTRES,"
    "AllocTRES,NodeList,Priority,Reservation,WorkDir,Constraints,Flags,ConsumedEnergyRaw,Comment,"
    "AdminComment,SystemComment,SubmitLine"
)
#: The box: 2 nodes of 8 A100 and 2 of 8 H100 (scripts/slurm-box).
BOX_CLUSTER = ClusterSpec.mixed([(2, 8, "a100-40gb"), (2, 8, "h100-sxm")])


def _wait_running(box: Any, job_id: str, timeout_s: float = 60.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        out = box.run(["squeue", "-h", "-j", job_id, "-o", "%T"], check=False).stdout.strip()
        if out == "RUNNING":
            return
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} did not start")


def _submit_mixed(box: Any, workdir: Path) -> dict[str, str]:
    common = ["--chdir", str(workdir), "-o", "/dev/null"]
    het = workdir / "het.sh"
    het.write_text("#!/bin/bash\n#SBATCH -J replay-het\nsleep 2\n")
    ids = {
        "named": box.sbatch(
            *common,
            "-J",
            "replay-resnet50",
            "-p",
            "a100",
            "--gres=gpu:a100:2",
            "-t",
            "5",
            "--wrap",
            "sleep 3",
        ),
        "big": box.sbatch(
            *common, "-J", "replay-big", "-p", "h100", "--gres=gpu:h100:4", "-t", "10", "--wrap", "sleep 4"
        ),
        "array": box.sbatch(
            *common,
            "-J",
            "replay-arr",
            "-p",
            "a100",
            "--gres=gpu:a100:1",
            "--array=0-2",
            "-t",
            "2",
            "--wrap",
            "sleep 2",
        ),
        "cancel": box.sbatch(
            *common, "-J", "replay-cancel", "-p", "h100", "--gres=gpu:h100:1", "--wrap", "sleep 300"
        ),
        "fail": box.sbatch(
            *common, "-J", "replay-fail", "-p", "a100", "--gres=gpu:a100:1", "--wrap", "sleep 1; exit 3"
        ),
        "het": box.sbatch(
            *common, "-p", "a100", "--gres=gpu:a100:1", ":", "-p", "h100", "--gres=gpu:h100:2", str(het)
        ),
        "multiline": box.sbatch(
            *common,
            "-J",
            "replay-multiline",
            "-p",
            "h100",
            "--gres=gpu:h100:1",
            "--wrap",
            "sleep 1\necho done | cat",
        ),
        "cpu": box.sbatch(*common, "-J", "replay-cpu", "-p", "cpu", "--wrap", "sleep 1"),
    }
    _wait_running(box, ids["cancel"])
    time.sleep(1.0)
    box.run(["scancel", ids["cancel"]])
    return ids


@pytest.fixture(scope="module")
def captured(slurm_box: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    workdir = tmp_path_factory.mktemp("replay_capture")
    ids = _submit_mixed(slurm_box, workdir)
    states = {name: slurm_box.wait_job(job_id, timeout_s=120) for name, job_id in ids.items()}
    time.sleep(1.0)  # the accounting of the last steps
    id_list = ",".join(ids.values())
    psv = workdir / "capture.psv"
    psv.write_text(slurm_box.run(["sacct", "-P", "-j", id_list, f"--format={FORMAT}"]).stdout)
    js = workdir / "capture.json"
    js.write_text(slurm_box.run(["sacct", "--json", "-j", id_list]).stdout)
    return {"ids": ids, "states": states, "psv": psv, "json": js}


def _read(path: Path) -> tuple[dict[str, Any], TraceStats]:
    stats = TraceStats()
    return {j.job_id: j for j in open_trace(path, stats=stats)}, stats


def test_both_captures_read_what_was_submitted(captured: dict[str, Any]) -> None:
    ids = captured["ids"]
    for fmt in ("psv", "json"):
        jobs, stats = _read(captured[fmt])
        assert stats.skipped_bad == 0
        by_name = {j.name: j for j in jobs.values() if j.array_job_id is None}
        assert by_name["replay-resnet50"].n_gpus == 2 and by_name["replay-resnet50"].gpu_type == "a100"
        assert by_name["replay-big"].n_gpus == 4 and by_name["replay-big"].gpu_type == "h100"
        assert by_name["replay-cancel"].state == "CANCELLED" and by_name["replay-cancel"].ran
        assert by_name["replay-fail"].state == "FAILED"
        assert by_name["replay-het"].het_components == 2 and by_name["replay-het"].n_gpus == 3
        assert by_name["replay-multiline"].n_gpus == 1 and by_name["replay-cpu"].n_gpus == 0
        tasks = sorted(j.array_task_id for j in jobs.values() if j.array_job_id == ids["array"])
        assert tasks == [0, 1, 2]
        assert captured["states"]["fail"] == "FAILED" and captured["states"]["cancel"].startswith("CANCELLED")
    text, _ = _read(captured["psv"])
    js, _ = _read(captured["json"])
    assert set(text) == set(js)
    for job_id, t in text.items():
        assert (t.start_s, t.end_s, t.n_gpus, t.gpu_type) == (
            js[job_id].start_s,
            js[job_id].end_s,
            js[job_id].n_gpus,
            js[job_id].gpu_type,
        )


@pytest.mark.parametrize("fmt", ["psv", "json"])
def test_replay_matches_what_the_cluster_did(captured: dict[str, Any], fmt: str) -> None:
    """Nine GPU jobs ran on an otherwise idle box: replayed with the same cluster and no noise, every
    policy completes them all with the recorded runtimes (JCT within the 1 s scheduling step), at the
    recorded busy energy when every job keeps the default power limit, and below it when Zeus caps them."""
    jobs, _ = _read(captured[fmt])
    res = replay(
        ReplayRequest(captured[fmt], BOX_CLUSTER, ["zeus", "pollux"], noise_sigma=0.0, compare_limits=True)
    )
    ran_gpu = [j for j in jobs.values() if j.n_gpus > 0 and j.ran]
    base = res.baseline["metrics"]
    assert res.mapping.mapped == len(ran_gpu) == base["completed_jobs"] == 9
    assert res.mapping.excluded["cpu_only"] == 1
    recorded_jct = sum(j.end_s - j.submit_s for j in ran_gpu) / len(ran_gpu)
    recorded_run = sum(j.end_s - j.start_s for j in ran_gpu) / len(ran_gpu)
    assert base["mean_jct_s"] == pytest.approx(recorded_jct)
    for policy in ("zeus", "zeus+nolimit", "pollux"):
        run = res.run(policy)["metrics"]
        assert run["completed_jobs"] == 9
        # on the idle replica every job starts within the 1 s step: never later than the box started it
        # (whose own scheduling delay grows on a loaded machine), never faster than it ran
        assert recorded_run - 1.5 <= run["mean_jct_s"] <= recorded_jct + 1.5
        if policy != "zeus":
            assert run["busy_energy_j"] == pytest.approx(base["busy_energy_j"], rel=0.10)
    # Zeus's limits (each step at most sched.max_slowdown slower) only take energy away
    assert res.run("zeus")["metrics"]["busy_energy_j"] < res.run("zeus+nolimit")["metrics"]["busy_energy_j"]
