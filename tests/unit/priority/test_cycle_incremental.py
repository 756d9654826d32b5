"""The daemon's cycle at scale reuses work: segment minima instead of sorts, one options cycle per snapshot,
PendingJobs and SPECs kept while their fields do not change. Each shortcut must give what the plain path
gives (docs/schedd-scale.md)."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import numpy as np
import pytest

from easlurm.energy.spec import parse_spec
from easlurm.model.oracle import Oracle
from easlurm.priority.options import expand
from easlurm.priority.packing import INF, SHORT_OPTIONS, Cycle, first_minima, job_minima
from easlurm.priority.policies import get_policy
from easlurm.priority.rank_words import rank_view
from easlurm.priority.slurm_snapshot import (
    PendingMemo,
    SnapshotInputs,
    SpecReader,
    build_snapshot,
    pending_job,
)
from easlurm.priority.snapshot import ClusterSnapshot, NodeState, PendingJob
from easlurm.slurm.sched_client import SlurmJob

VALUES = (0.0, -0.0, 1.0, 2.0, 3.0, INF, np.nan)


def sorted_heads(values: np.ndarray, job_of: np.ndarray) -> np.ndarray:
    """The sort the segment minima replace: per job, its first least value's position."""
    order = np.lexsort((values, job_of))
    first = np.ones(len(order), dtype=bool)
    first[1:] = job_of[order[1:]] != job_of[order[:-1]]
    return order[first]


@pytest.mark.parametrize("seed", range(4))
def test_first_minima_picks_what_the_sort_picks_ties_nan_and_inf_included(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(500):
        n = int(rng.integers(1, 30))
        job_of = np.sort(rng.integers(0, 6, n))
        values = rng.choice(VALUES, n)
        want, got = sorted_heads(values, job_of), first_minima(values, job_of)
        finite = np.isfinite(values[want])
        assert (np.isfinite(values[got]) == finite).all()
        assert (got[finite] == want[finite]).all()
        shuffled = rng.permutation(job_of)  # not contiguous: the sort itself
        assert (first_minima(values, shuffled) == sorted_heads(values, shuffled)).all()


@pytest.mark.parametrize("seed", range(4))
def test_first_minima_of_one_job_is_what_the_sort_picks(seed: int) -> None:
    """One job's options (a decision per arrival on a short queue): its first least value, NaN and inf
    included; a job whose options are all NaN keeps its first."""
    rng = np.random.default_rng(seed)
    for _ in range(500):
        n = int(rng.integers(1, 30))
        job_of = np.full(n, int(rng.integers(0, 3)))
        values = rng.choice(VALUES, n)
        want, got = sorted_heads(values, job_of), first_minima(values, job_of)
        assert len(got) == 1
        if np.isfinite(values[want]).all():
            assert (got == want).all()
        else:
            assert not np.isfinite(values[got]).any()
    assert (first_minima(np.array([np.nan, np.nan]), np.array([4, 4])) == [0]).all()


@pytest.mark.parametrize("seed", range(4))
def test_job_minima_equals_minimum_at(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(500):
        n = int(rng.integers(0, 30))
        job_of = np.sort(rng.integers(0, 7, n))
        values = rng.choice(
            VALUES[2:6], n
        )  # minimum.at and reduceat agree on NaN; the test avoids its warning
        mask = rng.random(n) < 0.6
        want = np.full(7, INF)
        np.minimum.at(want, job_of[mask], values[mask])
        assert np.array_equal(job_minima(values, mask, job_of, 7), want)


def bare_cycle(
    n_gpus: np.ndarray, code: np.ndarray, n_nodes: np.ndarray | None, free: list[int], node_code: np.ndarray
) -> Cycle:
    """A cycle holding only what `fits` reads: each option's GPUs, type and node count, each node's free GPUs and type."""
    zeros = np.zeros(len(n_gpus))
    return Cycle(
        snapshot=cast(Any, None),
        cache=cast(Any, None),
        jobs=(),
        job_of=np.zeros(len(n_gpus), dtype=np.int64),
        n_gpus=n_gpus,
        batch=zeros,
        code=code,
        limit_w=zeros,
        power_w=zeros,
        time_s=zeros,
        feasible=np.zeros(len(n_gpus), dtype=bool),
        node_free=free,
        node_code=node_code,
        node_idle_w=np.zeros(len(free)),
        n_nodes=n_nodes,
    )


def test_fits_short_on_a_known_case() -> None:
    """Free GPUs 8, 3 and 0 on type 0, none of type 1: the fewest nodes that hold k, and only that count fits."""
    k, m = np.array([8, 8, 9, 9, 11, 12, 1, 0]), np.array([1, 2, 2, 1, 2, 3, 1, 1])
    cyc = bare_cycle(k, np.array([0, 0, 0, 0, 0, 0, 1, 0]), m, [8, 3, 0], np.array([0, 0, 0]))
    want = [True, False, True, False, True, False, False, True]
    assert cyc.fits_short(k, cyc.code, m, None).tolist() == want
    assert cyc.fits_array(k, cyc.code, m, None).tolist() == want
    mask = np.array([False, True, True])  # the 8-GPU node left out: 3 GPUs on one node
    assert cyc.fits_short(k, cyc.code, m, mask).tolist() == [False] * 6 + [False, True]


@pytest.mark.parametrize("seed", range(4))
def test_fits_short_is_the_array_path(seed: int) -> None:
    """On random options (GPU counts, node counts or none, types with no node) and nodes (free GPUs with
    ties, node masks), below and above SHORT_OPTIONS: the plain-Python path says what the arrays say."""
    rng = np.random.default_rng(seed)
    for _ in range(400):
        n = int(rng.integers(0, 2 * SHORT_OPTIONS))
        n_nodes = int(rng.integers(0, 10))
        k, code = rng.integers(1, 17, n), rng.integers(0, 3, n)
        m = rng.integers(1, 4, n) if rng.integers(0, 2) else None
        free = [int(x) for x in rng.choice([0, 1, 2, 4, 8], n_nodes)]
        cyc = bare_cycle(k, code, m, free, rng.integers(0, 2, n_nodes))
        mask = rng.integers(0, 2, n_nodes).astype(bool) if rng.integers(0, 2) else None
        want = cyc.fits_array(k, code, m, mask)
        got = cyc.fits_short(k, code, m, mask)
        assert got.dtype == want.dtype == np.bool_
        assert np.array_equal(got, want)
        assert np.array_equal(cyc.fits(nodes=mask), want)
        rows = slice(n // 3, n)
        sub = None if m is None else m[rows]
        assert np.array_equal(cyc.fits(rows, mask), cyc.fits_array(k[rows], code[rows], sub, mask))
        cyc.node_code = rng.integers(0, 3, n_nodes)  # another layout: the node types are read again
        assert np.array_equal(cyc.fits_short(k, code, m, mask), cyc.fits_array(k, code, m, mask))


def test_expand_of_one_job_is_the_general_expansion() -> None:
    """One job's options (its range, job 0) are what the general expansion gives that job first in a queue."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        offs, lens = rng.integers(0, 50, 2), rng.integers(0, 20, 2)
        idx, job_of = expand(offs[:1], lens[:1])
        both_idx, both_job_of = expand(offs, lens)
        n = int(lens[0])
        assert idx.dtype == job_of.dtype == both_idx.dtype == np.int64
        assert np.array_equal(idx, both_idx[:n]) and np.array_equal(job_of, both_job_of[:n])
    assert expand(np.array([7]), np.array([3]))[0].tolist() == [7, 8, 9]


@pytest.mark.parametrize("seed", range(4))
def test_best_of_one_job_in_plain_python_is_the_array_path(seed: int) -> None:
    """A cycle of one job (up to SHORT_OPTIONS options) picks its option in plain Python: the array path's
    pick on random values with ties (0.0 and -0.0 among them), NaN, inf and -inf, and random masks."""
    rng = np.random.default_rng(seed)
    values_of = (*VALUES, -INF, -1.0)
    for _ in range(500):
        n = int(rng.integers(0, SHORT_OPTIONS + 1))
        cyc = bare_cycle(np.ones(n, dtype=np.int64), np.zeros(n, dtype=np.int64), None, [8], np.array([0]))
        cyc.jobs = (cast(Any, None),)
        metric, ok = rng.choice(values_of, n), rng.random(n) < 0.7
        want = cyc.best_array(metric, ok)
        got = cyc.best(metric, ok)
        assert got.dtype == np.int64 and got.tolist() == want.tolist()
        cyc.feasible = ok
        assert cyc.best(metric).tolist() == want.tolist()
    one = bare_cycle(np.ones(4, dtype=np.int64), np.zeros(4, dtype=np.int64), None, [8], np.array([0]))
    one.jobs = (cast(Any, None),)
    ok = np.array([False, True, True, True])
    assert one.best(np.array([0.5, np.nan, 2.0, 2.0]), ok).tolist() == [2]
    assert one.best(np.array([0.5, -INF, 2.0, 2.0]), ok).tolist() == [-1]


def slurm_job(job_id: str, **kw: object) -> SlurmJob:
    base: dict[str, object] = {
        "job_id": job_id,
        "name": f"j{job_id}",
        "user": "alice",
        "state": "PENDING",
        "reason": "Priority",
        "partition": "h100",
        "nodes": "",
        "node_count": 1,
        "submit_s": 1000.0 + int(job_id),
        "start_s": None,
        "eligible_s": 1000.0,
        "priority": 1000,
        "gpus_per_node": 1,
        "gpu_type": "h100",
        "comment": "energy-profile=model=vit-b16,steps=2000,batch=64:128,gpus=1:2",
        "requeue": True,
    }
    base.update(kw)
    return SlurmJob(**base)  # type: ignore[arg-type]


def test_pending_memo_keeps_a_job_while_its_fields_hold_and_remakes_it_when_one_changes() -> None:
    memo, spec = PendingMemo(), parse_spec("model=vit-b16,steps=2000,batch=64:128,gpus=1:2")
    job = slurm_job("7")
    first = memo.get(job, spec, None, True)
    memo.end_cycle()
    assert memo.get(job, spec, None, True) is first
    assert first == pending_job(job, spec, None, True)
    memo.end_cycle()
    requeued = dataclasses.replace(job, restarts=1)
    again = memo.get(requeued, spec, None, True)
    assert again is not first and again.preemptions == 1
    assert memo.get(requeued, spec, None, False).gpu_types == ("h100",)  # 22.05: the typed job keeps it
    other = parse_spec("model=vit-b16,steps=4000,batch=64,gpus=1")
    assert memo.get(requeued, other, None, False).total_steps == 4000
    memo.end_cycle()
    memo.end_cycle()  # a cycle without the job: forgotten
    assert memo.get(requeued, other, None, False) is not again


def test_spec_reader_follows_an_edited_comment() -> None:
    reader = SpecReader(None)
    job = slurm_job("8")
    spec = reader.spec(job)
    assert spec is not None and spec.steps == 2000
    assert reader.spec(job) is spec
    edited = dataclasses.replace(job, comment="energy-profile=model=vit-b16,steps=5000,batch=64")
    spec2 = reader.spec(edited)
    assert spec2 is not None and spec2.steps == 5000
    assert reader.spec(dataclasses.replace(job, comment="no declaration")) is None
    back = reader.spec(job)
    assert back is not None and back.steps == 2000


def snapshot(n: int, free: int = 3) -> ClusterSnapshot:
    jobs = [slurm_job(str(i), gpus_per_node=1 + i % 2) for i in range(n)]
    specs = {j.job_id: parse_spec(j.comment.split("=", 1)[1]) for j in jobs}
    nodes = (
        NodeState("h100-1", "h100", 8, free, 70.0, 700.0, 200.0),
        NodeState("a100-1", "a100", 8, 8, 50.0, 400.0, 150.0),
    )
    pending = build_snapshot(SnapshotInputs(5000.0, jobs, [], specs), lambda t: None).pending
    return ClusterSnapshot(time_s=5000.0, nodes=nodes, running=(), pending=pending)


@pytest.mark.parametrize("name", ["zeus", "pollux", "hades", "aurachronos", "charon"])
def test_one_cycle_per_snapshot_the_decision_and_ranking_are_those_of_fresh_policies(name: str) -> None:
    """The daemon decides, then ranks as if GPUs were free, on the same snapshot: the second call reuses the
    first's options, and neither sees the other's changes (free GPUs taken, feasibility)."""
    oracle, snap = Oracle(), snapshot(40)
    policy = get_policy(name)
    decision = policy.decide(snap, oracle)
    ranked = rank_view(policy, snap, oracle)
    again = policy.decide(snap, oracle)
    assert decision.starts and again == decision == get_policy(name).decide(snap, oracle)
    assert ranked.order == rank_view(get_policy(name), snap, oracle).order
    assert policy.cycle(snap, oracle).node_free == [n.free_gpus for n in snap.nodes]


def test_a_new_snapshot_is_not_served_the_last_cycle() -> None:
    oracle, policy = Oracle(), get_policy("zeus")
    full = policy.decide(snapshot(10, free=0), oracle)
    assert all(s.gpu_type != "h100" for s in full.starts)
    free = policy.decide(snapshot(10, free=8), oracle)
    assert any(s.gpu_type == "h100" for s in free.starts)


def test_pending_jobs_from_the_memo_equal_fresh_ones() -> None:
    jobs = [slurm_job(str(i), gpus_per_node=1 + i % 2) for i in range(30)]
    specs = {j.job_id: parse_spec(j.comment.split("=", 1)[1]) for j in jobs}
    inputs = SnapshotInputs(5000.0, jobs, [], specs)
    memo = PendingMemo()
    plain = build_snapshot(inputs, lambda t: None).pending
    assert build_snapshot(inputs, lambda t: None, memo=memo).pending == plain
    kept: tuple[PendingJob, ...] = build_snapshot(inputs, lambda t: None, memo=memo).pending
    assert kept == plain


def test_jobs_declaring_the_same_spec_share_one_parse_and_a_bad_one_is_logged_per_job(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reader = SpecReader(None)
    a, b = reader.spec(slurm_job("1")), reader.spec(slurm_job("2"))
    assert a is not None and a is b
    bad = "energy-profile=model=vit-b16,steps=-3"
    assert reader.spec(slurm_job("3", comment=bad)) is None
    assert reader.spec(slurm_job("4", comment=bad)) is None
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["job 3", "job 4"]
