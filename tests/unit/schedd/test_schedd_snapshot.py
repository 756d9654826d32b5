"""Slurm records -> ClusterSnapshot: declared jobs are scheduled, everything else is load."""

from __future__ import annotations

import math
from pathlib import Path

from schedd_fake import job, node

from easlurm.energy.spec import parse_spec
from easlurm.priority.slurm_snapshot import (
    GpuFacts,
    SnapshotInputs,
    SpecReader,
    build_snapshot,
    first_node,
    spec_from_comment,
    spec_from_environment,
)
from easlurm.slurm.sched_client import SlurmNode, parse_sinfo_json, parse_squeue_json

FIX = Path(__file__).parents[2] / "fixtures" / "schedd"
FACTS = {"a100": GpuFacts(50.0, 400.0, 100.0), "h100": GpuFacts(70.0, 700.0, 200.0)}


def test_spec_sources() -> None:
    assert spec_from_comment("note energy-profile=model=gpt2,steps=5 x") == "model=gpt2,steps=5"
    assert spec_from_comment("nothing here") is None
    recorded = (FIX / "environment").read_bytes()
    assert spec_from_environment(recorded) == "model=resnet50,steps=100,batch=128:256,urgent"
    assert spec_from_environment(b"\x01\x00\x00\x00PATH=/bin\x00") is None
    # a bare `sbatch --energy-profile` is exported as the text "(null)" on 22.05: the default SPEC
    bare = b"\x02\x00\x00\x00PATH=/bin\x00_SLURM_SPANK_OPTION_easlurm_energy_profile=(null)\x00"
    assert spec_from_environment(bare) == ""


def test_spec_reader_state_dir(tmp_path: Path) -> None:
    d = tmp_path / "hash.7" / "job.17"
    d.mkdir(parents=True)
    (d / "environment").write_bytes((FIX / "environment").read_bytes())
    reader = SpecReader(str(tmp_path))
    spec = reader.spec(job("17"))
    assert spec is not None and spec.model == "resnet50" and spec.batch == (128, 256) and spec.urgent
    # the Comment wins over the environment; an invalid SPEC is ignored, not fatal
    assert reader.spec(job("17", comment="energy-profile=model=gpt2,steps=9,batch=8")).model == "gpt2"  # type: ignore[union-attr]
    assert reader.spec(job("18", comment="energy-profile=bogus=1")) is None
    assert reader.spec(job("19")) is None


def test_build_snapshot_from_recorded_queue() -> None:
    jobs = [j for j in parse_squeue_json((FIX / "squeue.json").read_text()) if j.pending or j.running]
    nodes = parse_sinfo_json((FIX / "sinfo.json").read_text())
    specs = {
        "17": parse_spec("model=vit-b16,steps=2000,batch=64:128,gpus=2:4"),
        "19": parse_spec("model=resnet50,steps=5000,batch=128:256,gpus=1:2:4,deadline=2h,urgent"),
        "20": parse_spec("model=resnet50,steps=10,batch=8"),  # user-held: never scheduled
        "22": parse_spec("model=bert-base,steps=1000,batch=32"),
    }
    snap = build_snapshot(
        SnapshotInputs(now_s=1_795_329_000.0, jobs=jobs, nodes=nodes, specs=specs),
        FACTS.get,
        predict_power_w=lambda jid, spec, t, n, b, nodes: 300.0 * n,
        power_budget_w=5000.0,
    )
    assert [n.name for n in snap.nodes] == ["a100-1", "a100-2", "h100-1", "h100-2"]  # cpu-1 has no GPU
    # 19 has a user begin time and 20 a user hold: only 22 is startable and declared
    assert [p.job_id for p in snap.pending] == ["22"]
    running = {r.job_id: r for r in snap.running}
    assert (
        running["17"].power_w == 600.0 and not running["17"].urgent
    )  # declared: predicted, may be preempted
    assert running["18"].power_w == 400.0 and running["18"].urgent  # undeclared: TDP, never a victim
    # 23 (undeclared, 8 x a100, eligible) fits the free a100 node: Slurm may start it any moment, so its
    # power at TDP is kept out of the budget the policy sees (21 waits for its own begin time: not counted)
    assert snap.power_budget_w == 5000.0 - 8 * (400.0 - 50.0)
    assert math.isclose(snap.power_w, 1000.0 + sum(n.free_gpus * n.idle_power_w for n in snap.nodes))


def test_pending_job_options_and_measured_power() -> None:
    spec = parse_spec("model=vit-b16,steps=100,batch=64:128,gpus=1:2:4,deadline=1h,urgent")
    pend = job("5", gpus_per_node=2, gpu_type="h100", submit_s=500.0)
    run = job(
        "6",
        state="RUNNING",
        nodes="a100-[1-2]",
        node_count=2,
        gpus_per_node=4,
        gpu_type="a100",
        start_s=900.0,
    )
    snap = build_snapshot(
        SnapshotInputs(
            now_s=1000.0,
            jobs=[pend, run],
            nodes=[node("a100-1", "a100", used=4), node("a100-2", "a100", used=4), node("h100-1", "h100")],
            specs={"5": spec},
            measured_power_w={"6": 1234.0},
        ),
        FACTS.get,
    )
    p = snap.pending[0]
    assert p.gpu_options == (2, 1, 4)  # the current request first
    assert p.malleable and p.gpu_types is None and p.urgent and p.deadline_s == 500.0 + 3600.0
    r = snap.running[0]
    assert r.node == "a100-1" and r.n_gpus == 8 and r.power_w == 1234.0
    assert first_node("h100-[3,5]") == "h100-3" and first_node("x-1,x-2") == "x-1"


def test_running_job_carries_its_prediction_beside_its_measured_power() -> None:
    """Charon learns its margin from measured / predicted power of running jobs: the live snapshot gives both."""
    spec = parse_spec("model=vit-b16,steps=100,batch=64,gpus=4")
    running = [
        job("6", state="RUNNING", nodes="a100-1", gpus_per_node=4, gpu_type="a100", start_s=900.0),
        job("7", state="RUNNING", nodes="a100-2", gpus_per_node=4, gpu_type="a100", start_s=900.0),
    ]
    snap = build_snapshot(
        SnapshotInputs(
            now_s=1000.0,
            jobs=running,
            nodes=[node("a100-1", "a100", used=4), node("a100-2", "a100", used=4)],
            specs={"6": spec, "7": spec},
            measured_power_w={"6": 1234.0},
        ),
        FACTS.get,
        predict_power_w=lambda jid, spec, t, n, b, nodes: 250.0 * n,
    )
    r = {x.job_id: x for x in snap.running}
    assert (r["6"].power_w, r["6"].predicted_power_w) == (1234.0, 1000.0)
    assert (r["7"].power_w, r["7"].predicted_power_w) == (1000.0, None)  # not measured: nothing to learn


def test_budget_keeps_headroom_for_uncontrolled_jobs_slurm_can_start() -> None:
    """An undeclared pending job that fits free GPUs now is counted at TDP before the policy starts
    anything (else a budget policy starts a job and sheds it when the uncontrolled one starts); one that
    cannot fit, is held, or waits for its begin time is not."""
    nodes = [SlurmNode("h100-1", "MIXED", (), ("h100",), "h100", 8, 6)]
    free2 = job("1", gpus_per_node=2, gpu_type=None, priority=100)
    too_big = job("2", gpus_per_node=4, gpu_type="h100", priority=90)
    held = job("3", gpus_per_node=1, priority=0, reason="JobHeldUser")
    later = job("4", gpus_per_node=1, eligible_s=2e9, reason="BeginTime")
    declared = job("5", gpus_per_node=1)
    specs = {"5": parse_spec("model=resnet50,steps=10,batch=8")}
    inputs = SnapshotInputs(now_s=1e9, jobs=[free2, too_big, held, later, declared], nodes=nodes, specs=specs)
    snap = build_snapshot(inputs, FACTS.get, power_budget_w=3000.0)
    assert snap.power_budget_w == 3000.0 - 2 * (700.0 - 70.0)
    assert build_snapshot(inputs, FACTS.get).power_budget_w is None


def test_a_running_job_spread_over_nodes_is_predicted_with_its_spread() -> None:
    """Slurm started a declared job on 2 nodes x 4 GPUs: the snapshot keeps its node count and the oracle
    predicts it spread (the network all-reduce), not packed on one node."""
    from easlurm.model.oracle import Oracle
    from easlurm.priority.slurm_snapshot import oracle_power

    spread = job(
        "30",
        "RUNNING",
        nodes="a100-[1-2]",
        node_count=2,
        gpus_per_node=4,
        gpu_type="a100",
        start_s=900.0,
        comment="energy-profile=model=bert-large,steps=100,batch=32",
    )
    seen: list[tuple[int, int]] = []

    def predict(jid: str, spec: object, t: str, n: int, b: int, nodes: int) -> float:
        seen.append((n, nodes))
        return 100.0 * n

    snap = build_snapshot(
        SnapshotInputs(
            now_s=1000.0,
            jobs=[spread],
            nodes=[node("a100-1", "a100", used=4), node("a100-2", "a100", used=4)],
            specs={"30": parse_spec("model=bert-large,steps=100,batch=32")},
        ),
        FACTS.get,
        predict_power_w=predict,
    )
    assert seen == [(8, 2)]
    assert snap.running[0].n_gpus == 8 and snap.running[0].n_nodes == 2
    oracle = Oracle()
    power = oracle_power(oracle)
    spec = parse_spec("model=bert-large,steps=100,batch=32")
    packed, two = power("30", spec, "a100", 8, 32, 1), power("30", spec, "a100", 8, 32, 2)
    assert packed is not None and two is not None and two != packed
