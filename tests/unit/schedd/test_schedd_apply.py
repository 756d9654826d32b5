"""Decision -> Slurm actions: ordered, idempotent, and never touching what the daemon does not own."""

from __future__ import annotations

import dataclasses
import itertools
import random
from pathlib import Path

from schedd_fake import FakeSchedClient, job, node

from easlurm.errors import SlurmError
from easlurm.priority import holds
from easlurm.priority.apply import (
    SITE_BASE,
    SITE_STEP,
    Kind,
    PlanContext,
    execute,
    order_factors,
    plan,
    release_all,
)
from easlurm.priority.snapshot import ClusterSnapshot, Decision, PendingJob, StartJob

NOW = 1_800_000_000.0
NODES = {"h100-1": node("h100-1", "h100"), "a100-1": node("a100-1", "a100")}


def pend(job_id: str) -> PendingJob:
    return PendingJob(job_id, "alice", 0.0, "vit-b16", 10, (64,), (1,))


def ctx(jobs, declared, factors=None, gate=False, requeued=()):  # type: ignore[no-untyped-def]
    return PlanContext(
        now_s=NOW,
        jobs={j.job_id: j for j in jobs},
        nodes=NODES,
        declared=frozenset(declared),
        site_factors=factors or {},
        hold_ttl_s=600.0,
        gate_all=gate,
        recently_requeued=frozenset(requeued),
    )


def snap(*ids: str) -> ClusterSnapshot:
    return ClusterSnapshot(time_s=NOW, nodes=(), pending=tuple(pend(i) for i in ids))


def test_order_follows_decision_and_is_idempotent() -> None:
    jobs = [job("1", gpu_type="h100"), job("2", gpu_type="h100"), job("3", gpu_type="h100")]
    d = Decision(starts=(StartJob("2", "h100-1", 1, 64, "h100"), StartJob("1", "h100-1", 1, 64, "h100")))
    acts = plan(d, snap("1", "2", "3"), ctx(jobs, {"1", "2", "3"}, factors={"3": (1500, 500)}))
    order = {a.job_id: int(a.fields["SiteFactor"]) for a in acts if a.kind is Kind.ORDER}
    assert order == {"2": SITE_BASE, "1": SITE_BASE - SITE_STEP, "3": 0}  # 3 loses its old boost
    ranked = plan(d, snap("1", "2", "3"), ctx(jobs, {"1", "2", "3"}), ranking=["3", "1", "2"])
    order = {a.job_id: int(a.fields["SiteFactor"]) for a in ranked if a.kind is Kind.ORDER}
    assert order == {"2": SITE_BASE, "1": SITE_BASE - SITE_STEP, "3": SITE_BASE - 2 * SITE_STEP}
    capped = plan(d, snap("1", "2", "3"), ctx(jobs, {"1", "2", "3"}), ranking=["3"], top_k=2)
    assert {a.job_id for a in capped if a.kind is Kind.ORDER} == {"1", "2"}
    # the env file is written before anything lets the job start (the plugin reads it at task start)
    assert [a.kind for a in acts if a.job_id == "2"] == [Kind.ENV, Kind.ORDER]
    env = next(a for a in acts if a.kind is Kind.ENV and a.job_id == "2").fields
    assert env["EASLURM_BATCH_SIZE"] == "64" and env["EASLURM_GPUS"] == "1"
    done = {"2": (0, SITE_BASE), "1": (0, SITE_BASE - SITE_STEP)}
    again = plan(d, snap("1", "2", "3"), ctx(jobs, {"1", "2", "3"}, factors=done))
    assert not [a for a in again if a.kind is Kind.ORDER]


def test_placement_changes_count_type_and_partition() -> None:
    j = job("1", gpus_per_node=1, gpu_type="h100", partition="h100")
    d = Decision(starts=(StartJob("1", "a100-1", 4, 256, "a100"),))
    place = next(a for a in plan(d, snap("1"), ctx([j], {"1"})) if a.kind is Kind.PLACE)
    assert place.fields == {"NumNodes": "1", "TresPerNode": "gres:gpu:a100:4", "Partition": "a100"}
    typed = job("2", gpus_per_node=2, gpu_type="h100", partition="all")
    d2 = Decision(starts=(StartJob("2", "h100-1", 2, 64, "h100"),))
    assert not [a for a in plan(d2, snap("2"), ctx([typed], {"2"})) if a.kind is Kind.PLACE]


def test_untyped_request_is_pinned_by_node_and_keeps_its_prefix() -> None:
    """An untyped request (`--gres=gpu:2`) is never rewritten typed (Slurm refuses that); its count is
    changed in the job's own prefix and the type pinned by the chosen node, also when the count matches."""
    same = job("2", gpus_per_node=2, gres_request="gres:gpu:2")
    d = Decision(starts=(StartJob("2", "h100-1", 2, 64, "h100"),))
    place = next(a for a in plan(d, snap("2"), ctx([same], {"2"})) if a.kind is Kind.PLACE)
    assert place.fields == {"NodeList": "h100-1"}
    fewer = job("3", gpus_per_node=2, gres_request="gres/gpu:2")  # 24.11+ shows gres/
    d3 = Decision(starts=(StartJob("3", "h100-1", 1, 64, "h100"),))
    place = next(a for a in plan(d3, snap("3"), ctx([fewer], {"3"})) if a.kind is Kind.PLACE)
    assert place.fields == {"NumNodes": "1", "TresPerNode": "gres/gpu:1", "NodeList": "h100-1"}
    pinned = job("4", gpus_per_node=2, required_nodes="h100-1")  # already only on h100 nodes
    d4 = Decision(starts=(StartJob("4", "h100-1", 2, 64, "h100"),))
    assert not [a for a in plan(d4, snap("4"), ctx([pinned], {"4"})) if a.kind is Kind.PLACE]


def test_a_spread_start_asks_slurm_for_its_nodes() -> None:
    """A job the policy spreads 1 + 1 over two nodes gets NumNodes=2, one GPU per node and both nodes;
    an uneven spread (2 + 1) cannot be asked in GPUs per node and is dropped this cycle; a job already
    asking for that spread is left alone."""
    nodes = {"h100-1": node("h100-1", "h100"), "h100-2": node("h100-2", "h100")}
    spread = StartJob("1", "h100-1", 2, 64, "h100", nodes=("h100-1", "h100-2"), node_gpus=(1, 1))
    j = job("1", gpus_per_node=2, gres_request="gres:gpu:2")
    c = dataclasses.replace(ctx([j], {"1"}), nodes=nodes)
    acts = plan(Decision(starts=(spread,)), snap("1"), c)
    place = next(a for a in acts if a.kind is Kind.PLACE)
    assert place.fields == {"NumNodes": "2", "TresPerNode": "gres:gpu:1", "NodeList": "h100-1,h100-2"}
    assert place.reason == "2xh100 on 2 nodes"
    uneven = StartJob("1", "h100-1", 3, 64, "h100", nodes=("h100-1", "h100-2"), node_gpus=(2, 1))
    assert not [
        a
        for a in plan(Decision(starts=(uneven,)), snap("1"), c)
        if a.job_id == "1" and a.kind is not Kind.ORDER
    ]
    done = job("1", gpus_per_node=1, node_count=2, gpu_type="h100")
    c_done = dataclasses.replace(ctx([done], {"1"}), nodes=nodes)
    place = next(a for a in plan(Decision(starts=(spread,)), snap("1"), c_done) if a.kind is Kind.PLACE)
    assert place.fields == {"NodeList": "h100-1,h100-2"}


def test_hints_only_after_slurm_accepts_the_placement(tmp_path: Path) -> None:
    """The placement update comes before the env file; when Slurm refuses it, no file is written and the
    refusal is recorded against both actions."""

    class Refusing(FakeSchedClient):
        def update_job(self, job_id: str, fields: dict[str, str]) -> None:  # type: ignore[override]
            if "TresPerNode" in fields:
                raise SlurmError("Invalid GRES specification (with and without type identification)")
            super().update_job(job_id, fields)

    j = job("1", gpus_per_node=2, gres_request="gres:gpu:2")
    d = Decision(starts=(StartJob("1", "h100-1", 1, 64, "h100"),))
    acts = plan(d, snap("1"), ctx([j], {"1"}))
    assert [a.kind for a in acts if a.job_id == "1"][:2] == [Kind.PLACE, Kind.ENV]
    env_dir = tmp_path
    out = execute(acts, Refusing([j], list(NODES.values())), env_dir, dry_run=False)
    assert not (env_dir / "job-1.env").exists()
    failed = {a.kind: e for a, e in out.failed}
    assert "Invalid GRES" in failed[Kind.PLACE] and "refused the placement" in failed[Kind.ENV]
    out = execute(acts, FakeSchedClient([j], list(NODES.values())), env_dir, dry_run=False)
    assert not out.failed and "EASLURM_GPUS=1" in (env_dir / "job-1.env").read_text()


def test_hold_release_and_foreign_holds() -> None:
    mine = job("1", reason="BeginTime", admin_comment=holds.HoldMark(int(NOW + 500)).encode())
    user = job("2", priority=0, reason="JobHeldUser")
    fresh = job("3")
    d = Decision(hold=("3", "2"))
    acts = plan(d, snap("1", "3"), ctx([mine, user, fresh], {"1", "2", "3"}))
    kinds = {(a.kind, a.job_id) for a in acts}
    assert (Kind.RELEASE, "1") in kinds  # no longer to hold: headroom returned
    assert (Kind.HOLD, "3") in kinds
    assert not [a for a in acts if a.job_id == "2"]  # user hold: never touched
    other_scope = plan(d, snap("3"), ctx([mine, fresh], {"3"}))
    assert not [a for a in other_scope if a.job_id == "1"]  # another daemon's (or scope's) hold
    # gate: under a budget every declared job not started now is held
    gated = plan(Decision(), snap("1", "3"), ctx([mine, fresh], {"1", "3"}, gate=True))
    assert {a.job_id for a in gated if a.kind is Kind.HOLD} == {"3"}  # 1's hold is fresh enough
    assert not [a for a in gated if a.kind is Kind.RELEASE]
    deferred = job("4", reason="BeginTime", eligible_s=NOW + 20)
    adopted = plan(Decision(), snap("3"), ctx([fresh, deferred], {"3", "4"}, gate=True))
    assert {a.job_id for a in adopted if a.kind is Kind.HOLD} == {"3", "4"}
    assert not [a for a in plan(Decision(), snap("3"), ctx([deferred], {"4"})) if a.job_id == "4"]
    many = [job(str(i)) for i in range(10, 20)]
    capped = plan(
        Decision(hold=("15",)),
        snap(*(j.job_id for j in many)),
        ctx(many, set(), gate=True),
        ranking=["12", "11"],
        max_holds=3,
    )
    assert [a.job_id for a in capped if a.kind is Kind.HOLD] == ["15", "12", "11"]


def test_requeue_only_declared_requeueable_outside_cooldown() -> None:
    jobs = [
        job("1", state="RUNNING"),
        job("2", state="RUNNING", requeue=False),
        job("3", state="RUNNING"),
        job("4", state="RUNNING"),
    ]
    d = Decision(preempt=("1", "2", "3", "4"))
    acts = plan(d, snap(), ctx(jobs, {"1", "2", "4"}, requeued={"4"}))
    assert [a.job_id for a in acts if a.kind is Kind.REQUEUE] == ["1"]


def test_execute_dry_run_and_failures(tmp_path: Path) -> None:
    client = FakeSchedClient([job("1"), job("2")], [])
    d = Decision(starts=(StartJob("1", "h100-1", 1, 128, "h100"),), hold=("2",))
    acts = plan(d, snap("1", "2"), ctx(client.jobs(), {"1", "2"}))
    out = execute(acts, client, tmp_path, dry_run=True)
    assert len(out.done) == len(acts) and client.calls == [] and not list(tmp_path.iterdir())
    out = execute(acts, client, tmp_path, dry_run=False)
    assert not out.failed and client.calls
    assert (tmp_path / "job-1.env").read_text().splitlines()[0] == "EASLURM_BATCH_SIZE=128"
    assert holds.held_by_us(client.get("2"), NOW)
    undo = release_all(client.jobs(), NOW)
    assert [a.job_id for a in undo] == ["2"]
    execute(undo, client, None, dry_run=False)
    assert client.get("2").admin_comment == "" and client.get("2").reason == "Priority"


def test_a_hold_ends_after_one_ttl_on_an_idle_cluster() -> None:
    """Under a budget a job is held; once held a full TTL while nothing runs (nothing will free power for
    it), it is released and never held again; while something runs, the hold is extended."""
    from easlurm.priority.apply import IDLE_TTL_RELEASE
    from easlurm.priority.snapshot import RunningJob

    mark = holds.HoldMark(int(NOW + 10), None, int(NOW - 600), holds.WHY_GATE).encode()
    held = job("1", reason="BeginTime", admin_comment=mark)
    acts = plan(Decision(hold=("1",)), snap("1"), ctx([held], {"1"}, gate=True))
    assert [(a.kind, a.reason) for a in acts if a.job_id == "1"] == [(Kind.RELEASE, IDLE_TTL_RELEASE)]
    spent = PlanContext(**{**ctx([job("1")], {"1"}, gate=True).__dict__, "ttl_spent": frozenset({"1"})})
    assert not [a for a in plan(Decision(hold=("1",)), snap("1"), spent) if a.kind is Kind.HOLD]
    running = job("1", state="RUNNING")  # once it runs, a budget policy does not shed it either
    spent = PlanContext(**{**ctx([running], {"1"}, gate=True).__dict__, "ttl_spent": frozenset({"1"})})
    assert not [a for a in plan(Decision(preempt=("1",)), snap(), spent) if a.kind is Kind.REQUEUE]
    busy = ClusterSnapshot(
        time_s=NOW,
        nodes=(),
        running=(RunningJob("9", "bob", "h100-1", "h100", 8, 64, 5000.0, NOW - 60),),
        pending=(pend("1"),),
    )
    acts = plan(Decision(hold=("1",)), busy, ctx([held], {"1"}, gate=True))
    hold = next(a for a in acts if a.job_id == "1")
    assert hold.kind is Kind.HOLD and hold.reason == holds.WHY_POLICY
    assert holds.HoldMark.decode(hold.fields["AdminComment"]).since_s == int(NOW - 600)  # type: ignore[union-attr]


def _check_order(factors: list[int]) -> None:
    assert all(SITE_STEP <= f <= SITE_BASE for f in factors)
    assert all(a - b >= SITE_STEP for a, b in itertools.pairwise(factors))


def test_order_factors_keep_the_most_factors_that_still_order_the_queue() -> None:
    """Against every subset on small queues: the factors order the queue with a step's gap in bounds, and
    as many current factors are kept as any valid assignment could keep."""
    rng = random.Random(7)
    grid = [SITE_BASE - k * SITE_STEP for k in range(12)] + [0, 500, SITE_BASE + SITE_STEP]
    for _ in range(400):
        n = rng.randint(1, 7)
        positions = sorted(rng.sample(range(n + 2), n))
        current = [rng.choice(grid) for _ in positions]
        factors = order_factors(positions, current, positions[-1] + 1)
        _check_order(factors)
        kept = sum(f == c for f, c in zip(factors, current))
        best = 0
        for size in range(n, 0, -1):
            for chosen in itertools.combinations(range(n), size):
                if _room_for(chosen, positions, current, positions[-1] + 1):
                    best = size
                    break
            if best:
                break
        assert kept >= best


def _room_for(chosen, positions, current, n):  # type: ignore[no-untyped-def]
    """Whether the chosen factors can stay: each in bounds with room for the ranks above and below it."""
    ranks = [positions[k] for k in chosen]
    values = [current[k] for k in chosen]
    if any(
        v < SITE_STEP + (n - 1 - r) * SITE_STEP or v + r * SITE_STEP > SITE_BASE
        for r, v in zip(ranks, values)
    ):
        return False
    return all(
        a - b >= (q - p) * SITE_STEP for (p, a), (q, b) in zip(zip(ranks, values), zip(ranks[1:], values[1:]))
    )


def test_a_ranking_that_lost_its_started_jobs_updates_only_the_new_ranks() -> None:
    """64 ranked jobs; the first 8 start, 8 more join at the end: only those 8 get a factor (not all 64
    again), the 56 left keep theirs; then the next 8 start with the factors they already have."""
    ids = [str(i) for i in range(1, 81)]
    jobs = [job(i, gpu_type="h100") for i in ids]
    first = plan(Decision(), snap(*ids), ctx(jobs, set(ids)), ranking=ids[:64])
    factors = {a.job_id: (0, int(a.fields["SiteFactor"])) for a in first if a.kind is Kind.ORDER}
    assert len(factors) == 64 and factors["1"][1] == SITE_BASE
    left = jobs[8:]
    second = plan(Decision(), snap(*ids[8:]), ctx(left, set(ids[8:]), factors=factors), ranking=ids[8:72])
    orders = {a.job_id: int(a.fields["SiteFactor"]) for a in second if a.kind is Kind.ORDER}
    assert sorted(orders, key=int) == ids[64:72]
    factors.update({j: (0, f) for j, f in orders.items()})
    _check_order([factors[j][1] for j in ids[8:72]])
    starts = tuple(StartJob(j, "h100-1", 1, 64, "h100") for j in ids[8:16])
    third = plan(
        Decision(starts=starts), snap(*ids[8:]), ctx(left, set(ids[8:]), factors=factors), ranking=ids[16:72]
    )
    assert not [a for a in third if a.kind is Kind.ORDER]
    # a job ranked first that Slurm holds lower than the rest is moved, the others stay
    moved = plan(
        Decision(), snap(*ids[8:]), ctx(left, set(ids[8:]), factors=factors), ranking=[ids[71], *ids[8:71]]
    )
    assert [a.job_id for a in moved if a.kind is Kind.ORDER] == [ids[71]]
