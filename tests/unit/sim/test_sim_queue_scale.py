"""The simulator at scale: a decision reads only the head of the queue, whatever its length; the queue
keeps its order (requeued jobs first) with O(1) changes; a replay's job stream does not accumulate."""

from __future__ import annotations

from typing import Any

import numpy as np

from easlurm.priority.policies import get_policy
from easlurm.priority.snapshot import ClusterSnapshot, Decision, PendingJob
from easlurm.sim.cluster import ClusterSpec
from easlurm.sim.engine import SimConfig, Simulator, Truth
from easlurm.sim.engine.pending import PendingQueue
from easlurm.sim.job import JobSpec
from easlurm.sim.philly_shape import PHILLY_GPU_COUNTS, PHILLY_RUNTIME_QUANTILES_S, draw_jobs
from easlurm.sim.runner import make_oracles


def _job(i: int, submit_s: float = 0.0) -> JobSpec:
    return JobSpec(
        job_id=f"j{i}",
        user=f"u{i % 3}",
        submit_s=submit_s,
        model="resnet50",
        total_steps=200,
        batch_options=(256,),
        gpu_options=(8,),
        precision="fp32-strict",
    )


class _Counting:
    """Zeus, recording how many pending jobs each decision was handed."""

    def __init__(self) -> None:
        self.inner = get_policy("zeus")
        self.seen: list[int] = []

    def decide(self, snapshot: ClusterSnapshot, oracle: Any) -> Decision:
        self.seen.append(len(snapshot.pending))
        return self.inner.decide(snapshot, oracle)


def _undersized_run(n_jobs: int, depth: int | None) -> tuple[Simulator, _Counting]:
    """`n_jobs` 8-GPU jobs submitted a second apart to one 8-GPU node: the queue grows to nearly all."""
    seen, real = make_oracles(0.0, 0)
    truth = Truth(real)
    cluster = ClusterSpec.mixed([(1, 8, "a100-40gb")]).resolved(real.catalogue)
    g = real.catalogue.get("a100-40gb")
    policy = _Counting()
    sim = Simulator(
        cluster,
        [_job(i, float(i)) for i in range(n_jobs)],
        policy,
        oracle=seen,
        truth=truth,
        config=SimConfig(
            type_facts={"a100-40gb": (float(g.idle_w), float(g.tdp_w), g.min_power_limit_w)},
            queue_depth=depth,
        ),
    )
    sim.run()
    return sim, policy


def test_a_decision_reads_at_most_the_queue_depth_however_long_the_queue() -> None:
    """400 jobs queue on one node: with a depth of 25, no decision is handed more than 25 jobs and the
    jobs handed out over the run are at most 25 per decision (without the bound they grow with the
    queue: the same run reads over five times more); every job still runs, in submission order."""
    sim, policy = _undersized_run(400, 25)
    assert sim.pending.longest > 300
    assert max(policy.seen) == 25
    assert sim.pending.scanned <= 25 * sim.decisions
    assert all(r.end_s is not None for r in sim.records.values())
    starts = [sim.records[f"j{i}"].start_s for i in range(400)]
    assert starts == sorted(starts)
    whole, whole_policy = _undersized_run(400, None)
    assert max(whole_policy.seen) > 300
    assert whole.pending.scanned > 5 * sim.pending.scanned


def test_an_arrival_past_the_head_calls_no_policy() -> None:
    """400 jobs queue on one node with a depth of 25: a job that arrives behind 25 waiting jobs (its user
    known) changes nothing a decision sees, so the policy is called at most twice per job (at a job's
    end, and on the next tick after its own starts) plus once per arrival that joins the head; without a
    bound every arrival calls it too (over 300 calls more); the jobs start at the same times either way."""
    sim, policy = _undersized_run(400, 25)
    whole, _ = _undersized_run(400, None)
    assert len(policy.seen) == sim.decisions
    assert sim.decisions <= 2 * 400 + 25
    assert whole.decisions >= sim.decisions + 300
    starts = [sim.records[f"j{i}"].start_s for i in range(400)]
    assert starts == [whole.records[f"j{i}"].start_s for i in range(400)]


def test_pending_queue_keeps_requeued_jobs_first_latest_first() -> None:
    """Arrivals queue in order; a requeued job goes to the front, the last requeued first; a started
    job leaves wherever it is; head(n) reads n jobs and counts them."""
    q = PendingQueue()
    jobs = {f"j{i}": PendingJob.queued(_job(i)) for i in range(5)}
    for job_id, job in jobs.items():
        q.add(job_id, job)
    q.pop("j0")
    q.pop("j1")
    q.requeue("j0", jobs["j0"])
    q.requeue("j1", jobs["j1"])
    assert [j.job_id for j in q] == ["j1", "j0", "j2", "j3", "j4"]
    assert [j.job_id for j in q.head(3)] == ["j1", "j0", "j2"]
    assert q.scanned == 3
    assert q.pop("j2") is jobs["j2"] and "j2" not in q and len(q) == 4
    assert q.get("j9") is None and q.pop("j9") is None


def test_philly_shape_draws_the_tables_sizes_and_run_times() -> None:
    """100,000 draws: each GPU count's share within 0.5 points of the table's, and each size class's
    median run time within 20% of the table's median (quantile p = 0.5)."""
    gpus, runtime = draw_jobs(100_000, np.random.default_rng(7))
    total = sum(PHILLY_GPU_COUNTS.values())
    for size, count in PHILLY_GPU_COUNTS.items():
        assert abs(np.mean(gpus == size) - count / total) < 0.005
    for cls, q in PHILLY_RUNTIME_QUANTILES_S.items():
        upper = min((c for c in PHILLY_RUNTIME_QUANTILES_S if c > cls), default=10**9)
        mask = (gpus >= cls) & (gpus < upper)
        assert abs(np.median(runtime[mask]) / q[10] - 1.0) < 0.2
    assert runtime.min() >= 1
