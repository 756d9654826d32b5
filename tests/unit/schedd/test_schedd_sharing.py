"""Co-location on gres/shard: parsing recorded 22.05 output, Slurm's first-fit choice of GPU, the
placement fields that aim a shareable job at one GPU, and pairs read back from Slurm's allocation."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from schedd_fake import job, node

from easlurm.energy.spec import parse_spec
from easlurm.priority.apply import Kind, PlanContext, plan
from easlurm.priority.sharing import colocations, first_fit, gpu_use, share_placement, sharing_mode
from easlurm.priority.slurm_snapshot import GpuFacts, SnapshotInputs, build_snapshot
from easlurm.priority.snapshot import ClusterSnapshot, Decision, PendingJob, StartJob
from easlurm.slurm.gres import parse_idx, shards_of_gres
from easlurm.slurm.sched_client import parse_sinfo_json, parse_squeue_json

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "schedd"
NOW = 1_800_000_000.0


def shard_node(name: str = "h100-2", per_gpu: int = 3, used: int = 0) -> object:
    return dataclasses.replace(node(name, "h100", used=used), total_shards=8 * per_gpu)


def running(job_id: str, idx: tuple[int, ...], shards: int = 0, node_name: str = "h100-2") -> object:
    return job(
        job_id,
        "RUNNING",
        nodes=node_name,
        gpus_per_node=0 if shards else len(idx),
        gpu_type=None if shards else "h100",
        shards=shards,
        gpu_indices=idx,
    )


def pending_shard(job_id: str, shards: int = 1) -> object:
    return job(job_id, gpus_per_node=0, shards=shards)


def test_recorded_shard_jobs_and_nodes_parse() -> None:
    """squeue/sinfo --json captured on the box: a lone job on 2 shards of GPU 0, a whole-GPU job on GPUs
    1-2, a partner on the last shard of GPU 0; sinfo's shard count in gres_used is not the shards used."""
    jobs = {j.job_id: j for j in parse_squeue_json((FIX / "squeue_shards.json").read_text())}
    assert (jobs["32"].shards, jobs["32"].gpu_indices, jobs["32"].n_gpus) == (2, (0,), 0)
    assert (jobs["33"].shards, jobs["33"].gpu_indices, jobs["33"].n_gpus) == (0, (1, 2), 2)
    assert (jobs["34"].shards, jobs["34"].gpu_indices) == (1, (0,))
    assert jobs["35"].pending and jobs["35"].shards == 1 and jobs["35"].gpu_indices == ()
    nodes = {n.name: n for n in parse_sinfo_json((FIX / "sinfo_shards.json").read_text())}
    h = nodes["h100-2"]
    assert (h.total_gpus, h.total_shards, h.shards_per_gpu) == (8, 24, 3)
    assert (h.used_gpus, h.free_gpus) == (3, 5)  # GPUs 1-2 whole, GPU 0 on shards
    assert nodes["cpu-1"].total_shards == 0 and sharing_mode(nodes["cpu-1"]) == "none"
    assert sharing_mode(h) == "time-slice"
    assert colocations(jobs.values()) == {"32": "34", "34": "32"}


def test_gres_strings() -> None:
    assert shards_of_gres("gres:shard:2") == (2, ())
    assert shards_of_gres("gpu:h100:2(IDX:1-2),shard:1(IDX:0)") == (1, (0,))
    assert shards_of_gres("gpu:h100:8,shard:h100:24") == (24, ())
    assert shards_of_gres("gpu:h100:8") == (0, ())
    assert parse_idx("gpu:h100:6(IDX:0-1,4)") == (0, 1, 4)
    assert parse_idx("gpu:h100:0(IDX:N/A)") == ()


def test_first_fit_skips_whole_gpus_and_full_shards() -> None:
    """Slurm 22.05 gives shard:N the lowest-index GPU with N shards free that no gpu job holds."""
    assert first_fit(8, 3, set(), {}, 2) == 0
    assert first_fit(8, 3, {0}, {1: 2}, 2) == 2
    assert first_fit(8, 3, {0}, {1: 2}, 1) == 1
    assert first_fit(2, 3, {0}, {1: 3}, 1) is None


def test_lone_start_takes_all_but_one_shard_on_the_node() -> None:
    jobs = {"1": running("1", (0,)), "2": running("2", (1,), shards=2), "9": pending_shard("9")}
    start = StartJob("9", "h100-2", 1, 64, "h100")
    fields = share_placement(jobs["9"], start, shard_node(), jobs)
    assert fields == {"TresPerNode": "gres:shard:2", "NodeList": "h100-2"}
    assert first_fit(8, 3, *gpu_use(jobs.values(), "h100-2"), 2) == 2  # beside no other lone job
    # already asking for it: nothing to change
    placed = dataclasses.replace(jobs["9"], shards=2, required_nodes="h100-2")
    assert share_placement(placed, start, shard_node(), {**jobs, "9": placed}) == {}


def test_join_only_where_slurm_puts_the_last_shard_on_the_partners_gpu() -> None:
    """The partner's GPU must be the first GPU with a free shard; otherwise the join is not issued."""
    partner_first = {"1": running("1", (0,), shards=2), "9": pending_shard("9")}
    start = StartJob("9", "h100-2", 1, 64, "h100", colocate_with="1")
    assert share_placement(partner_first["9"], start, shard_node(), partner_first) == {"NodeList": "h100-2"}
    lower_free = {"1": running("1", (3,), shards=2), "9": pending_shard("9")}
    start = StartJob("9", "h100-2", 1, 64, "h100", colocate_with="1")
    assert share_placement(lower_free["9"], start, shard_node(), lower_free) is None
    lower_busy = {
        "0": running("0", (0, 1, 2)),
        "1": running("1", (3,), shards=2),
        "9": pending_shard("9", shards=2),
    }
    fields = share_placement(lower_busy["9"], start, shard_node(), lower_busy)
    assert fields == {"TresPerNode": "gres:shard:1", "NodeList": "h100-2"}
    # a partner elsewhere, or not on shards, or a node without enough shards: no placement
    assert share_placement(lower_busy["9"], start, shard_node("h100-1"), lower_busy) is None
    whole = {"1": running("1", (0,)), "9": pending_shard("9")}
    assert share_placement(whole["9"], start, shard_node(), whole) is None
    assert share_placement(partner_first["9"], start, shard_node(per_gpu=2), partner_first) is None


def test_pairs_come_from_the_allocation_not_the_decision() -> None:
    """A join that Slurm put on another GPU is no pair; three jobs on one GPU pair none of them."""
    assert colocations([running("1", (3,), shards=2), running("9", (0,), shards=1)]) == {}
    jobs = [running("1", (0,), shards=1), running("2", (0,), shards=1), running("3", (0,), shards=1)]
    assert colocations(jobs) == {}
    assert colocations([running("1", (0,), shards=2), running("2", (0,), shards=1, node_name="h100-1")]) == {}


def test_snapshot_marks_shareable_jobs_pairs_and_sharing_nodes() -> None:
    spec = parse_spec("share,model=vit-b16,steps=100,batch=64")
    plain = parse_spec("model=vit-b16,steps=100,batch=64")
    jobs = [
        running("1", (0,), shards=2),
        running("2", (0,), shards=1),
        pending_shard("3"),
        job("4"),  # declared `share` but on --gres=gpu: stays exclusive
        pending_shard("5"),  # on shards without `share`
    ]
    inputs = SnapshotInputs(
        now_s=NOW,
        jobs=jobs,
        nodes=[shard_node(used=1), node("h100-1", "h100")],
        specs={"1": spec, "2": spec, "3": spec, "4": spec, "5": plain},
    )
    snap = build_snapshot(inputs, lambda t: GpuFacts(60.0, 700.0, 200.0))
    nodes = {n.name: n for n in snap.nodes}
    assert nodes["h100-2"].sharing == "time-slice" and nodes["h100-1"].sharing == "none"
    run = {r.job_id: r for r in snap.running}
    assert run["1"].shareable and run["1"].colocated_with == "2" and run["1"].n_gpus == 1
    assert run["2"].colocated_with == "1"
    pend = {p.job_id: p for p in snap.pending}
    assert pend["3"].shareable and pend["3"].gpu_options == (1,)
    assert not pend["4"].shareable and not pend["5"].shareable


def test_plan_places_lone_and_join_and_drops_a_join_slurm_would_misplace() -> None:
    jobs = {
        "1": running("1", (2,), shards=2),
        "7": pending_shard("7"),
        "8": pending_shard("8"),
    }
    pend = tuple(PendingJob(j, "alice", 0.0, "vit-b16", 10, (64,), (1,), shareable=True) for j in "78")
    snap = ClusterSnapshot(time_s=NOW, nodes=(), pending=pend)
    ctx = PlanContext(
        now_s=NOW,
        jobs=jobs,
        nodes={"h100-2": shard_node(used=1)},
        declared=frozenset(jobs),
        site_factors={},
        hold_ttl_s=600.0,
    )
    lone = StartJob("7", "h100-2", 1, 64, "h100")
    acts = plan(Decision(starts=(lone,)), snap, ctx)
    place = [a for a in acts if a.kind is Kind.PLACE]
    assert [(a.job_id, dict(a.fields)) for a in place] == [
        ("7", {"TresPerNode": "gres:shard:2", "NodeList": "h100-2"})
    ]
    # GPUs 0 and 1 are free, so Slurm would put job 8's shard on GPU 0, not beside job 1 on GPU 2
    join = StartJob("8", "h100-2", 1, 64, "h100", colocate_with="1")
    acts = plan(Decision(starts=(join,)), snap, ctx)
    assert not [a for a in acts if a.job_id == "8" and a.kind in (Kind.PLACE, Kind.ENV)]
    busy = {**jobs, "0": running("0", (0, 1))}
    acts = plan(Decision(starts=(join,)), snap, dataclasses.replace(ctx, jobs=busy))
    assert [dict(a.fields) for a in acts if a.kind is Kind.PLACE] == [{"NodeList": "h100-2"}]
    assert any(a.kind is Kind.ENV and a.job_id == "8" for a in acts)


def test_plan_passes_a_shared_gpus_limit_as_a_lone_jobs() -> None:
    """A shared GPU has one limit: the join carries it, and the daemon hands it to the joining job the way
    it hands a lone job its limit (EASLURM_POWER_LIMIT_W in its env file, which the agent applies at step
    start to the GPU both jobs run on)."""
    jobs = {"0": running("0", (0, 1)), "1": running("1", (2,), shards=2), "8": pending_shard("8")}
    pend = (PendingJob("8", "alice", 0.0, "vit-b16", 10, (64,), (1,), shareable=True),)
    snap = ClusterSnapshot(time_s=NOW, nodes=(), pending=pend)
    ctx = PlanContext(
        now_s=NOW,
        jobs=jobs,
        nodes={"h100-2": shard_node(used=1)},
        declared=frozenset(jobs),
        site_factors={},
        hold_ttl_s=600.0,
    )
    join = StartJob("8", "h100-2", 1, 64, "h100", power_limit_w=245.0, colocate_with="1")
    lone = dataclasses.replace(join, colocate_with=None)
    envs = []
    for start in (join, lone):
        acts = plan(Decision(starts=(start,)), snap, ctx)
        envs += [dict(a.fields) for a in acts if a.kind is Kind.ENV and a.job_id == "8"]
    assert len(envs) == 2 and envs[0] == envs[1]
    assert envs[0]["EASLURM_POWER_LIMIT_W"] == "245"
