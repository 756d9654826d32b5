"""`easlurm seff` and `easlurm report` on jobs run on the real local cluster (requeued, multi-node,
shared-GPU and unprofiled): their energies add up to the step records the agents wrote, and a what-if
line agrees with `easlurm predict` for the same placement."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from box_support import wait_for
from spank_support import REPO, plugin_with_fake_sensors, run_easlurm

from easlurm.accounting.sacct_rows import job_total
from easlurm.accounting.spool import read_step_files
from easlurm.accounting.step_record import StepRecord

pytestmark = pytest.mark.slurm
SPEC = "gpu,model=resnet50,batch=256,steps=50"


def records(spool: Path, job: str) -> list[StepRecord]:
    return [rec for _, rec in read_step_files(spool / job).values()]


def run_total_j(spool: Path, job: str, run: int) -> float:
    total = job_total([s for s in records(spool, job) if s.run == run])
    assert total is not None and total.total_energy_j is not None
    return total.total_energy_j


def seff(box: Any, job: str, *args: str) -> dict[str, Any]:
    res = run_easlurm(box, "seff", job, "--json", *args, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def shard_job(box: Any, tmp_path: Path, name: str, util: int, seconds: float, registry: Path) -> str:
    script = tmp_path / f"{name}.sh"
    script.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        export PYTHONPATH={REPO / "tests" / "fakes"} EASLURM_FAKE_NVML_PROCS_DIR={registry}
        {sys.executable} -m easlurm_fakes.gpu_load --util {util} --seconds {seconds}
        """)
    )
    script.chmod(0o755)
    return str(
        box.sbatch(
            "-J", f"seff-it-{name}", "-p", "h100", "--nodelist=h100-2", "--gres=shard:1",
            "--energy-profile=gpu,share,model=resnet50,batch=64", "-o", "/dev/null", str(script),
        )
    )  # fmt: skip


def requeue_once(box: Any, job: str) -> None:
    """Requeue a running job and have it start again at once (a requeued job waits ~120 s otherwise)."""
    wait_for(
        lambda: box.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip() == "RUNNING", 60, "run 0"
    )
    time.sleep(5)
    box.run(["scontrol", "requeue", job])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        box.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=False)
        if box.run(["squeue", "-h", "-j", job, "-o", "%T"], check=False).stdout.strip() == "RUNNING":
            return
        time.sleep(1)
    raise AssertionError(f"job {job} did not run again after its requeue")


def test_seff_and_report_on_real_jobs(slurm_box: Any, tmp_path: Path) -> None:
    """Four jobs: requeued (1 GPU, two runs), multi-node (2 nodes x 1 GPU, srun step on both), two sharing
    one GPU through shards, and one without --energy-profile. The card's total is job_total of the
    records of its run, the requeue energy is the first run's total, per-device energies add up to each
    step's, the unprofiled job says so (exit 0), a what-if equals `easlurm predict`'s ratio, and the
    report's total is the sum over every run of every job."""
    tmp_path.chmod(0o755)
    registry = tmp_path / "procs"
    registry.mkdir(mode=0o777)
    box = slurm_box
    with plugin_with_fake_sensors(box, f"env=EASLURM_FAKE_NVML_PROCS_DIR={registry}") as spool:
        requeued = box.sbatch(
            "-J", "seff-it-requeue", "-p", "a100", "-N1", "--gres=gpu:a100:1", "--requeue", "-o", "/dev/null",
            f"--energy-profile={SPEC}", "--wrap", "srun sleep 3; sleep 6",
        )  # fmt: skip
        multi = box.sbatch(
            "-J", "seff-it-multi", "-p", "a100", "-N2", "--ntasks-per-node=1", "--gres=gpu:a100:1",
            "-o", "/dev/null", f"--energy-profile={SPEC}", "--wrap", "srun sleep 3",
        )  # fmt: skip
        plain = box.sbatch("-J", "seff-it-plain", "-p", "a100", "-o", "/dev/null", "--wrap", "sleep 1")
        share_a = shard_job(box, tmp_path, "a", 30, 10, registry)
        wait_for(lambda: any(registry.glob("*.json")), 60, "A's GPU workload")
        share_b = shard_job(box, tmp_path, "b", 60, 4, registry)
        requeue_once(box, requeued)
        jobs = [requeued, multi, plain, share_a, share_b]
        for job in jobs:
            assert box.wait_job(job, timeout_s=120) == "COMPLETED", job
        wanted = {requeued: {"batch", "0", "batch+r1", "0+r1"}, multi: {"batch", "0"}}
        wanted.update({share_a: {"batch"}, share_b: {"batch"}})
        for job, keys in wanted.items():
            wait_for(lambda j=job, k=keys: k <= {r.key for r in records(spool, j)}, 90, f"records of {job}")
        time.sleep(3)  # the last AdminComment update

    # requeued: the last run shown, the first run's energy as requeue energy
    card = seff(box, requeued)
    assert (card["run"], card["runs"]) == (1, 2)
    assert card["total_energy_j"] == pytest.approx(run_total_j(spool, requeued, 1), rel=1e-9)
    assert card["requeue_energy_j"] == pytest.approx(run_total_j(spool, requeued, 0), rel=1e-9)
    assert card["energy_per_work_step_j"] == pytest.approx(card["total_energy_j"] / 50)
    first = seff(box, requeued, "--run", "1")
    assert (first["run"], first["run_number"]) == (0, 1)
    assert first["total_energy_j"] == pytest.approx(card["requeue_energy_j"], rel=1e-9)

    # multi-node: step 0 ran on both nodes; its devices add up to the step, the job to job_total
    card = seff(box, multi)
    assert card["total_energy_j"] == pytest.approx(run_total_j(spool, multi, 0), rel=1e-9)
    (step0,) = [s for s in card["steps"] if s["step"] == "0"]
    assert len(set(step0["hosts"])) == 2
    assert sum(d["energy_j"] for d in step0["devices"] if d["in_total"]) == pytest.approx(
        step0["total_energy_j"]
    )
    assert all(d["peak_power_w"] is not None and d["limit_w"] == 400 for d in step0["devices"])
    assert card["idle_gpus"] == []

    # the what-if "on 1 GPU" agrees with easlurm predict for the same two placements: the job's own ran
    # spread over its 2 nodes
    (half,) = [w for w in card["whatif"] if w["label"] == "on 1 GPU"]
    predicted = []
    for gpus, nodes in (("2", "2"), ("1", "1")):
        res = run_easlurm(
            box, "predict", "--model", "resnet50", "--gpu", "a100", "--gpus", gpus, "--nodes", nodes,
            "--batch", "256", "--json",
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        (placement,) = json.loads(res.stdout)["placements"]
        predicted.append(placement)
    own, one = predicted
    assert half["energy_change"] == pytest.approx(
        one["energy_per_step_j"] / own["energy_per_step_j"] - 1, rel=1e-9
    )
    assert half["time_change"] == pytest.approx(one["step_time_s"] / own["step_time_s"] - 1, rel=1e-9)
    assert {w["gpu"] for w in card["whatif"]} >= {"a100-40gb", "h100-sxm"}  # the cluster's other GPU type

    # shared GPU: each job holds its share; the two shares add up to the GPU's energy
    cards = [seff(box, j) for j in (share_a, share_b)]
    for c, j in zip(cards, (share_a, share_b), strict=True):
        assert c["total_energy_j"] == pytest.approx(run_total_j(spool, j, 0), rel=1e-9)
        assert c["shards"] == 1 and any("shared GPU" in n for n in c["notes"])
        assert all(d["apportioned"] for s in c["steps"] for d in s["devices"] if d["kind"] == "gpu")
        # a shard's AllocTRES names no GPU type: the card takes its node's GRES type
        assert c["gpu_type"] == "h100" and c["gpu_limit_w"] == 700, c["notes"]
        assert "GPU type h100: from the GRES of node h100-2 (shards name no type)" in c["notes"]
    # the sharing what-if (alone on a whole GPU against shared) is the co-location model's
    res = run_easlurm(box, "model", "corun", "resnet50:64", "resnet50:64", "--gpu", "h100-sxm", "--json")
    assert res.returncode == 0, res.stderr
    (pair, _) = json.loads(res.stdout)["jobs"]
    for c in cards:
        alone = {w["label"]: w for w in c["whatif"]}["alone on a whole GPU"]
        assert alone["time_change"] == pytest.approx(pair["speed"] - 1, rel=1e-6)
        assert alone["energy_change"] == pytest.approx(
            pair["power_alone_w"] * pair["speed"] / pair["power_shared_w"] - 1, rel=1e-6
        )
        assert {w["label"] for w in c["whatif"]} >= {"alone on 1 x a100-40gb"}
    res = run_easlurm(box, "seff", share_a)
    assert res.returncode == 0 and "alone on a whole GPU: " in res.stdout, res.stderr
    # the card leads with its advice: right after the header, in the words of the chosen what-if
    advice = cards[0]["advice"]
    assert advice is not None and advice["max_slowdown"] == 0.05
    (line,) = [ln for ln in res.stdout.splitlines() if ln.startswith("Advice: ")]
    assert line == f"Advice: {advice['text']}"
    assert res.stdout.index("Advice: ") < res.stdout.index("\nEnergy ")
    print(f"\n$ easlurm seff {share_a}\n{res.stdout}")

    # unprofiled: a clear line, exit 0
    res = run_easlurm(box, "seff", plain)
    assert res.returncode == 0 and "no energy records" in res.stdout, res.stdout + res.stderr
    res = run_easlurm(box, "seff", "999999")
    assert res.returncode == 2 and "not in the accounting records" in res.stderr

    # the human card shows the what-if lines as "<label>: -N % energy, +N % time"
    res = run_easlurm(box, "seff", multi)
    assert res.returncode == 0 and "on 1 GPU: " in res.stdout and "% energy" in res.stdout, res.stderr
    print(f"\n$ easlurm seff {multi}\n{res.stdout}")

    # the report: every run of every job, profiled or not
    ids = ",".join(jobs)
    res = run_easlurm(
        box, "report", "-S", "now-1hour", "-j", ids, "--by", "partition", "--co2", "300", "--json"
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    expected = sum(run_total_j(spool, j, r) for j in (requeued, multi, share_a, share_b) for r in (0, 1)
                   if j == requeued or r == 0)  # fmt: skip
    total = doc["total"]
    assert total["energy_j"] == pytest.approx(expected, rel=1e-9)
    assert total["requeue_energy_j"] == pytest.approx(run_total_j(spool, requeued, 0), rel=1e-9)
    assert (total["jobs"], total["runs"], total["profiled_runs"]) == (5, 6, 5)
    assert total["co2_g"] == pytest.approx(expected / 3.6e6 * 300)
    assert {g["key"] for g in doc["groups"]} == {"a100", "h100"}
    assert sum(g["energy_j"] for g in doc["groups"]) == pytest.approx(total["energy_j"])
    # by GPU type: the shard jobs count under their node's type (their AllocTRES names none)
    res = run_easlurm(box, "report", "-S", "now-1hour", "-j", ids, "--by", "gpu-type", "--json")
    assert res.returncode == 0, res.stderr
    by_type = {g["key"]: g for g in json.loads(res.stdout)["groups"]}
    assert set(by_type) == {"a100", "h100", "none"} and by_type["h100"]["jobs"] == 2
    plot = tmp_path / "report.png"
    res = run_easlurm(
        box, "report", "-S", "now-1hour", "-j", ids, "--by", "gpu-type", "--markdown", "--plot", str(plot)
    )
    assert res.returncode == 0 and "| TOTAL |" in res.stdout, res.stderr
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"\n$ easlurm report --by gpu-type --markdown\n{res.stdout}")


def test_seff_shows_gpu_utilisation_and_memory_where_measured(slurm_box: Any) -> None:
    """The agents read NVML's utilisation and memory with the energy samples: a job on all eight GPUs of
    a node shows the fake driver's figures on the even GPUs, and "not measured" on the odd ones, whose
    utilisation the driver does not support (NOT_SUPPORTED): no crash, and their energy is measured."""
    box = slurm_box
    extra = (
        "env=EASLURM_FAKE_NVML_UTIL=75",
        "env=EASLURM_FAKE_NVML_NO_UTIL=1,3,5,7",
        "env=EASLURM_FAKE_NVML_MEMORY_USED_MB=20000",
        "env=EASLURM_FAKE_NVML_MEMORY_GB=80",
    )
    with plugin_with_fake_sensors(box, *extra) as spool:
        job = str(
            box.sbatch(
                "-J", "seff-it-util", "-p", "h100", "-N1", "--gres=gpu:h100:8", "-o", "/dev/null",
                "--energy-profile=gpu", "--wrap", "sleep 4",
            )
        )  # fmt: skip
        assert box.wait_job(job, timeout_s=120) == "COMPLETED"
        wait_for(lambda: "batch" in {r.key for r in records(spool, job)}, 90, f"records of {job}")
        time.sleep(3)  # the last AdminComment update
    card = seff(box, job)
    (batch,) = [s for s in card["steps"] if s["step"] == "batch"]
    gpus = [d for d in batch["devices"] if d["kind"] == "gpu"]
    assert len(gpus) == 8
    for d in gpus:
        index = int(d["device"].removeprefix("gpu"))
        assert d["energy_j"] is not None and d["energy_j"] > 0, d
        assert d["mean_util_pct"] == (None if index % 2 else 75.0), d
        assert (d["peak_memory_bytes"], d["memory_total_bytes"]) == (20000 * 2**20, 80 * 10**9), d
    odd = ", ".join(f"{d['device']}@{d['host']}" for d in gpus if int(d["device"][3:]) % 2)
    assert f"GPU utilisation: not measured on {odd}" in card["notes"]
    res = run_easlurm(box, "seff", job, "--devices")
    assert res.returncode == 0, res.stderr
    rows = [ln.split() for ln in res.stdout.splitlines() if ln.startswith("batch")]
    assert {(r[2], r[7], r[8]) for r in rows} == {
        (d["device"], "-" if int(d["device"][3:]) % 2 else "75%", "20.97GB/80.00GB") for d in gpus
    }
    print(f"\n$ easlurm seff {job} --devices\n{res.stdout}")
