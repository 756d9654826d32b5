"""Node 0's agent dies in a 2-node step: the step is never silently blank. `easlurm sacct` (with the
spool) shows it `partial`, naming node 0, with node 1's energy in the step and in the job's total, and
`easlurm accounting republish` publishes that partial step into the accounting database."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from spank_support import GPU_W, plugin_with_fake_sensors, run_easlurm

pytestmark = pytest.mark.slurm


def rows_of(box: Any, job: str, *spool: str) -> dict[str, dict[str, Any]]:
    res = run_easlurm(box, "sacct", "-j", job, "--json", *(spool or ("--no-spool",)), timeout=60)
    assert res.returncode == 0, res.stderr
    return {r["job_id"]: r for r in json.loads(res.stdout)["rows"]}


def test_node0_agent_killed_leaves_a_partial_step_that_republish_publishes(
    slurm_box: Any, tmp_path: Path
) -> None:
    # node 0's agent of step 0 is killed at once (SIGKILL: no record, no step file); every other agent runs
    agent = tmp_path / "agent"
    agent.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" --step 0 "*" --node-id 0 "*) kill -9 $$ ;; esac\n'
        f'exec {sys.executable} "$@"\n'
    )
    agent.chmod(0o755)
    os.chmod(tmp_path, 0o755)
    with plugin_with_fake_sensors(slurm_box, agent=str(agent)) as spool:
        job = slurm_box.sbatch(
            "-p",
            "a100",
            "-N2",
            "--ntasks-per-node=1",
            "--gres=gpu:a100:1",
            "--energy-profile=gpu",
            "-o",
            str(tmp_path / "out"),
            "--wrap",
            "srun sleep 2",
        )
        assert slurm_box.wait_job(job) == "COMPLETED"
    node1 = spool / job / "0" / "node-1.json"
    assert node1.exists() and not (spool / job / "step-0.json").exists()

    # a reader without the spool: step 0 has no record, and the job's total says it lacks it
    bare = rows_of(slurm_box, job)
    assert bare[f"{job}.0"]["energy_flags"] == "no-record", bare[f"{job}.0"]
    assert {"partial", "no-record:0"} <= set(bare[job]["energy_flags"].split(",")), bare[job]

    # sacct reads the orphaned node file: partial, node 0 named, node 1's energy in the step and the job
    rows = rows_of(slurm_box, job, "--spool", str(spool))
    step0 = rows[f"{job}.0"]
    flags = step0["energy_flags"].split(",")
    assert "partial" in flags and "missing-nodes:0" in flags, flags
    rec = step0["energy_record"]
    assert rec["missing_nodes"] == [0] and [n["node_id"] for n in rec["nodes"]] == [1]
    gpu = [d for n in rec["nodes"] for d in n["devices"] if d["kind"] == "gpu"]
    assert len(gpu) == 1 and gpu[0]["energy_j"] == pytest.approx(GPU_W * gpu[0]["duration_s"], rel=0.01)
    total = rows[job]
    assert total["gpu_energy_j"] >= rows[f"{job}.batch"]["gpu_energy_j"] + step0["gpu_energy_j"] * 0.999

    # republish adopts the orphan: the database then holds the partial step (slurmctld forgets the job
    # after MinJobAge=30 on the box; until then the write waits)
    common = ["accounting", "republish", "-j", job, "--spool", str(spool), "--json"]
    res = run_easlurm(slurm_box, *common, "--wait", "150s")
    assert res.returncode == 0, res.stdout + res.stderr
    [result] = json.loads(res.stdout)["jobs"]
    assert result["status"] == "republished" and "0" in result["missing_steps"], result
    published = rows_of(slurm_box, job)[f"{job}.0"]
    assert (
        "missing-nodes:0" in published["energy_flags"].split(",") and "spool" not in published["energy_flags"]
    )
    assert published["gpu_energy_j"] == pytest.approx(step0["gpu_energy_j"])
    again = run_easlurm(slurm_box, *common)
    assert json.loads(again.stdout)["jobs"][0]["status"] == "up-to-date", again.stdout
