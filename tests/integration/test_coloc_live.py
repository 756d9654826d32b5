"""Co-location on the real local Slurm: two declared complementary jobs placed by `easlurm schedd` with
the zeus-share policy on shards of ONE GPU, and their energy records adding up to what that (fake) GPU
drew, each flagged apportioned and split by their SM utilisations. The jobs wait on h100-1 behind a
blocker of the test until the daemon moves them to h100-2, where the test holds all GPUs but one (zeus-share
gives a free GPU to a job alone first; it pairs a job that would otherwise wait). Names `coloc-it-*`."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from box_support import mine, wait_for
from spank_support import GPU_W, REPO, plugin_with_fake_sensors, run_easlurm

from easlurm.priority.daemon import Daemon, DaemonConfig
from easlurm.slurm.sched_client import CliSchedClient, parse_squeue_json

pytestmark = pytest.mark.slurm
NODE = "h100-2"
WAIT_NODE = "h100-1"
#: two launch-bound jobs (the oracle predicts a throughput gain of about 1.8x when they share a GPU)
SPECS = {"a": "share,model=bert-base,steps=20000,batch=16", "b": "share,model=distilbert,steps=20000,batch=8"}
UTIL_A, UTIL_B = 30, 60


@pytest.fixture
def blocked_wait_node(slurm_box: Any) -> Iterator[str]:
    """Every GPU of h100-1 held by the test, so that jobs pinned there wait for the daemon."""
    jid = str(
        slurm_box.sbatch(
            "-J",
            "coloc-it-block",
            "-p",
            "h100",
            f"--nodelist={WAIT_NODE}",
            "--gres=gpu:h100:8",
            "--wrap",
            "sleep 600",
        )
    )
    try:
        wait_for(lambda: mine(slurm_box, [jid])[jid].running, 120, "the blocker to run")
        yield jid
    finally:
        slurm_box.run(["scancel", jid], check=False)


def submit(box: Any, tmp_path: Path, name: str, util: int, seconds: float, registry: Path) -> str:
    script = tmp_path / f"{name}.sh"
    script.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES SLURM_SHARDS_ON_NODE=$SLURM_SHARDS_ON_NODE"
        export PYTHONPATH={REPO / "tests" / "fakes"} EASLURM_FAKE_NVML_PROCS_DIR={registry}
        {sys.executable} -m easlurm_fakes.gpu_load --util {util} --seconds {seconds}
        """)
    )
    return str(
        box.sbatch(
            "-J",
            f"coloc-it-{name}",
            "-p",
            "h100",
            f"--nodelist={WAIT_NODE}",
            "--gres=shard:1",
            f"--comment=energy-profile={SPECS[name]}",
            f"--energy-profile={SPECS[name]}",
            "-o",
            str(tmp_path / f"{name}.out"),
            str(script),
        )
    )


def test_two_shareable_jobs_share_one_gpu_and_split_its_energy(
    slurm_box: Any, blocked_wait_node: str, tmp_path: Path
) -> None:
    """The daemon starts A alone on shards of a GPU of h100-2 and B on the last shard of the same GPU;
    A's and B's GPU energy add up to the GPU's within 1 %, B's share is 2/3 of the GPU while both ran."""
    os.chmod(tmp_path, 0o755)
    registry = tmp_path / "procs"
    registry.mkdir(mode=0o777)
    wait_for(
        lambda: (
            not [j for j in parse_squeue_json(slurm_box.run(["squeue", "--json"]).stdout) if NODE in j.nodes]
        ),
        180,
        f"{NODE} to be free of other tests' jobs",
    )
    cfg = DaemonConfig(
        policy="zeus-share", interval_s=1.0, name_prefix="coloc-it-", nodes=(NODE,), decision_log=None
    )
    daemon = Daemon(CliSchedClient(env=slurm_box.env), cfg)
    ids: list[str] = []
    with plugin_with_fake_sensors(slurm_box, f"env=EASLURM_FAKE_NVML_PROCS_DIR={registry}") as spool:
        try:
            held = str(
                slurm_box.sbatch(
                    "-J",
                    "coloc-it-hold",
                    "-p",
                    "h100",
                    f"--nodelist={NODE}",
                    "--gres=gpu:h100:7",
                    "--wrap",
                    "sleep 600",
                )
            )
            ids.append(held)
            wait_for(
                lambda: mine(slurm_box, [held])[held].running, 120, f"the test's job on 7 GPUs of {NODE}"
            )
            a = submit(slurm_box, tmp_path, "a", UTIL_A, 40, registry)
            ids.append(a)

            def cycle_until_running(job_id: str) -> None:
                def step() -> bool:
                    daemon.cycle()
                    return mine(slurm_box, [job_id])[job_id].running

                wait_for(step, 90, f"job {job_id} to be started by the daemon", step_s=1.0)

            cycle_until_running(a)
            wait_for(lambda: any(registry.glob("*.json")), 60, "A's GPU workload")
            b = submit(slurm_box, tmp_path, "b", UTIL_B, 8, registry)
            ids.append(b)
            cycle_until_running(b)
            jobs = mine(slurm_box, [a, b])
            assert jobs[a].nodes == jobs[b].nodes == NODE
            assert (jobs[a].shards, jobs[b].shards) == (2, 1)  # all 3 shards of one GPU
            assert len(jobs[a].gpu_indices) == 1 and jobs[a].gpu_indices == jobs[b].gpu_indices
            report = daemon.cycle()
            assert report.snapshot is not None
            pairs = {r.job_id: r.colocated_with for r in report.snapshot.running}
            assert pairs[a] == b and pairs[b] == a
            for job_id in (a, b):
                assert slurm_box.wait_job(job_id, timeout_s=120) == "COMPLETED"
        finally:
            slurm_box.run(["scancel", *ids], check=False)
    ids = [a, b]
    gpu = jobs[a].gpu_indices[0]
    for name in ("a", "b"):
        assert f"CUDA_VISIBLE_DEVICES={gpu} " in (tmp_path / f"{name}.out").read_text()
    records = {}
    for job_id in ids:
        path = spool / job_id / "step-batch.json"
        wait_for(path.exists, 60, f"{path}")
        records[job_id] = json.loads(path.read_text())
    devices, windows = {}, []
    for job_id, rec in records.items():
        (node,) = rec["nodes"]
        (dev,) = [d for d in node["devices"] if d["kind"] == "gpu"]
        assert dev["name"] == f"gpu{gpu}" and dev["apportioned"] == "utilisation"
        # the GPU split by utilisation; the node's CPU package and DRAM (shared by the two jobs too) by CPU time
        gpu_flags = [f for f in rec["apportioned"] if f.startswith("gpu")]
        assert gpu_flags == [f"gpu{gpu}:utilisation"], rec["apportioned"]
        assert all(
            f.endswith((":cpu-time", ":shared-unknown")) for f in rec["apportioned"] if f not in gpu_flags
        )
        devices[job_id] = dev
        windows.append((node["start_time"], node["start_time"] + node["duration_s"]))
    (a_lo, a_hi), (b_lo, b_hi) = windows
    assert a_lo < b_lo < b_hi < a_hi  # B ran inside A's window: the union is A's window
    known_j = GPU_W * (a_hi - a_lo)
    total_j = devices[a]["energy_j"] + devices[b]["energy_j"]
    print(
        f"\nshared GPU: A {devices[a]['energy_j']:.0f} J + B {devices[b]['energy_j']:.0f} J = {total_j:.0f} J, "
        f"GPU drew {known_j:.0f} J ({100 * (total_j / known_j - 1):+.2f} %)"
    )
    assert total_j == pytest.approx(known_j, rel=0.01)
    # B's workload ran inside A's: B holds 60/(30+60) of the GPU while its workload ran, nothing else. B's
    # record reaches back to its step's start (the lead-in before its agent's first sample, which a loaded
    # node starts after B's workload), so the whole workload is inside its window; the expected share is
    # over the part of the workload inside that window all the same.
    wl = {d["sm_util"]: d for d in (json.loads(p.read_text()) for p in registry.glob("*.json"))}
    for rec in records.values():
        assert rec["nodes"][0]["start_time"] == pytest.approx(rec["nodes"][0]["step_start_time"], abs=1e-3)
    assert b_lo <= wl[UTIL_B]["start_s"] and wl[UTIL_B]["end_s"] <= b_hi, (b_lo, b_hi, wl[UTIL_B])
    b_run_s = min(wl[UTIL_B]["end_s"], b_hi) - max(wl[UTIL_B]["start_s"], b_lo)
    expected_b = GPU_W * b_run_s * UTIL_B / (UTIL_A + UTIL_B)
    assert devices[b]["energy_j"] == pytest.approx(expected_b, rel=0.03)
    assert devices[a]["share"] < 1.0 and devices[b]["share"] < 1.0
    # what a user sees
    res = run_easlurm(slurm_box, "sacct", "-j", ",".join(ids), "-P", "-o", "JobID,GPUEnergy,EnergyFlags")
    assert res.returncode == 0, res.stderr
    flagged = [ln for ln in res.stdout.splitlines() if ".batch|" in ln]
    # EnergyFlags joins the apportioned devices with "+" (the node's DRAM split by CPU time beside the GPU)
    apportioned = [f for ln in flagged for f in ln.split("|")[-1].split(",") if f.startswith("apportioned:")]
    assert len(flagged) == 2 and len(apportioned) == 2, res.stdout
    assert all(f"gpu{gpu}:utilisation" in f.removeprefix("apportioned:").split("+") for f in apportioned), (
        res.stdout
    )
