"""A policy keeps each pending job's row (its options, remaining work, submit time) from one decision to the
next (packing.JobRows): a decision on kept rows must be the decision a fresh policy makes on the same
snapshot, when jobs stay, leave, come back changed under the same id, or the node layout changes. The
other shortcuts of a decision give what the plain rule gives: the vectorised best fit, and the check for
nodes that never power down, which reads only the nodes that changed."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from easlurm.model import Oracle
from easlurm.priority.packing import Cycle, JobRows
from easlurm.priority.policies import get_policy
from easlurm.priority.snapshot import ClusterSnapshot, NodeState, PendingJob

A100 = NodeState("a0", "a100-40gb", 8, 2, 55.0, 400.0, 100.0)
H100 = NodeState("h0", "h100-sxm", 8, 8, 70.0, 700.0, 200.0)
MODELS = ("resnet50", "bert-base", "vit-b16")


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    return Oracle()


def _job(i: int, **kw: object) -> PendingJob:
    base: dict[str, object] = dict(
        job_id=f"j{i}",
        user=f"u{i % 3}",
        submit_s=float(10 * i),
        model=MODELS[i % 3],
        total_steps=1000 + 100 * i,
        batch_options=(64, 128),
        gpu_options=(1, 2, 4) if i % 2 else (2, 1),
        precision="fp32-strict",
        default_power_limit=i % 5 == 0,
    )
    base.update(kw)
    return PendingJob(**base)  # type: ignore[arg-type]


def _snapshots() -> list[ClusterSnapshot]:
    """A queue over five decisions: jobs stay (the same objects), one leaves, one comes back under its id
    with less work left (a preempted job requeued), new ones arrive, and a node's layout changes."""
    jobs = [_job(i) for i in range(12)]
    requeued = dataclasses.replace(jobs[3], remaining_steps=40.0, preemptions=1)
    h100_capped = dataclasses.replace(H100, min_power_limit_w=300.0)
    queues = [
        (tuple(jobs[:8]), (A100, H100)),
        (tuple(jobs[:8]), (A100, dataclasses.replace(H100, free_gpus=3))),
        ((requeued, *jobs[:3], *jobs[4:10]), (A100, H100)),
        ((requeued, *jobs[5:12]), (A100, h100_capped)),
        (tuple(jobs[6:12]), (A100, h100_capped)),
    ]
    return [
        ClusterSnapshot(time_s=500.0 + 300.0 * k, nodes=nodes, pending=pending)
        for k, (pending, nodes) in enumerate(queues)
    ]


@pytest.mark.parametrize("policy", ["zeus", "pollux", "hades", "static-cap-70"])
def test_decisions_on_kept_rows_are_a_fresh_policys(policy: str, oracle: Oracle) -> None:
    kept = get_policy(policy)
    for snap in _snapshots():
        fresh = get_policy(policy)
        assert kept.decide(snap, oracle) == fresh.decide(snap, oracle)
        a, b = kept.cycle(snap, oracle), fresh.cycle(snap, oracle)
        for name in ("job_of", "n_gpus", "batch", "code", "limit_w", "power_w", "time_s", "feasible"):
            assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), name
        assert np.array_equal(a.age_s, b.age_s)


def test_a_job_back_under_its_id_is_read_again(oracle: Oracle) -> None:
    """The requeued copy of a job (same id, less work left) gets its own remaining work, not the row kept
    for the first copy: its options' run times shrink by the work's ratio."""
    policy = get_policy("pollux")
    first = _job(1)
    again = dataclasses.replace(first, remaining_steps=first.remaining_steps / 4)
    snap = ClusterSnapshot(time_s=100.0, nodes=(A100, H100), pending=(first,))
    before = policy.cycle(snap, oracle).time_s
    after = policy.cycle(dataclasses.replace(snap, pending=(again,)), oracle).time_s
    assert np.allclose(after, before / 4)


def _fit_loop(cyc: Cycle, code: int, k: int, nodes: np.ndarray | None) -> int:
    """Best fit as a loop over the nodes (the rule pick_node vectorises): the first node of least key."""
    choice, best = -1, (np.inf,)
    for i, free in enumerate(cyc.node_free):
        if free >= k and cyc.node_code[i] == code and (nodes is None or nodes[i]):
            key = cyc._fit_key(i)
            if key < best:
                choice, best = i, key
    return choice


@pytest.mark.parametrize("seed", range(3))
def test_pick_node_is_the_first_best_fit(seed: int, oracle: Oracle) -> None:
    """On random free GPUs, types, masks and (consolidating) power ranks and idle times, ties included."""
    rng = np.random.default_rng(seed)
    cyc = get_policy("pollux").cycle(
        ClusterSnapshot(time_s=0.0, nodes=(A100, H100), pending=(_job(1),)), oracle
    )
    for _ in range(300):
        n = int(rng.integers(1, 12))
        cyc.node_free = [int(x) for x in rng.integers(0, 9, n)]
        cyc.node_code = rng.integers(0, 2, n)
        consolidating = bool(rng.integers(0, 2))
        cyc.node_rank = rng.integers(0, 3, n) if consolidating else None
        cyc.node_idle_since = rng.choice([-np.inf, 0.0, 5.0, 9.0], n) if consolidating else None
        mask = rng.integers(0, 2, n).astype(bool) if rng.integers(0, 2) else None
        code, k = int(rng.integers(0, 2)), int(rng.integers(1, 9))
        assert cyc.pick_node(code, k, mask) == _fit_loop(cyc, code, k, mask)


def test_never_powered_down_sees_a_changed_node() -> None:
    policy = get_policy("zeus")
    on = (A100, H100)
    assert policy._never_powered_down(on)
    off = (A100, dataclasses.replace(H100, power_state="off", powered_down_s=0.0))
    assert not policy._never_powered_down(off)
    assert policy._never_powered_down((A100, dataclasses.replace(H100, free_gpus=1)))
    assert not policy._never_powered_down((A100, dataclasses.replace(H100, suspend_time_s=600.0)))


def test_rows_of_departed_jobs_are_dropped(oracle: Oracle) -> None:
    """3,000 jobs pass through a queue of 10: the rows kept stay within twice the queue plus the slack."""
    policy = get_policy("pollux")
    jobs = [_job(i % 12, job_id=f"k{i}") for i in range(3000)]
    most = 0
    for k in range(0, len(jobs) - 10, 10):
        policy.cycle(
            ClusterSnapshot(time_s=float(k), nodes=(A100, H100), pending=tuple(jobs[k : k + 10])), oracle
        )
        most = max(most, len(policy._rows._rows))
    assert 1000 < most <= 2 * 10 + JobRows.ROWS_SLACK
