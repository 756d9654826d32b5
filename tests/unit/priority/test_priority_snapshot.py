"""Snapshots and decisions survive a JSON round trip (the daemon records them and replays them)."""

from __future__ import annotations

import json

import pytest

from easlurm.priority.snapshot import (
    ClusterSnapshot,
    Decision,
    NodeState,
    PendingJob,
    RunningJob,
    StartJob,
)


def _snapshot() -> ClusterSnapshot:
    return ClusterSnapshot(
        time_s=120.5,
        nodes=(
            NodeState("a0", "a100-40gb", 8, 3, 55.0, 400.0, 100.0),
            NodeState("h0", "h100-sxm", 8, 8, 70.0, 700.0),
        ),
        running=(
            RunningJob(
                "r1",
                "u1",
                "a0",
                "a100-40gb",
                5,
                256,
                1800.0,
                10.0,
                deadline_s=None,
                checkpoint_interval_s=60.0,
            ),
        ),
        pending=(
            PendingJob(
                "p1",
                "u2",
                100.0,
                "resnet50",
                1000,
                (256, 128),
                (2, 1, 4),
                ("a100",),
                (250.0,),
                remaining_steps=600.0,
                urgent=True,
                deadline_s=4000.0,
                precision="fp32-strict",
            ),
        ),
        user_gpu_s={"u1": 550.0},
        power_budget_w=4500.0,
    )


def test_snapshot_round_trips_through_json() -> None:
    snap = _snapshot()
    back = ClusterSnapshot.from_dict(json.loads(json.dumps(snap.to_dict())))
    assert back == snap
    assert back.pending[0].gpu_options == (2, 1, 4)
    assert back.to_dict()["schema_version"] == 1


def test_decision_round_trips_and_is_falsy_when_empty() -> None:
    d = Decision(
        starts=(StartJob("p1", "h0", 2, 256, "h100-sxm", 350.0, 700.0),), preempt=("r1",), hold=("p9",)
    )
    assert Decision.from_dict(json.loads(json.dumps(d.to_dict()))) == d
    assert d
    assert not Decision(hold=("x",))


def test_cluster_power_counts_idle_gpus_and_running_jobs() -> None:
    snap = _snapshot()
    assert snap.power_w == 3 * 55.0 + 8 * 70.0 + 1800.0


def test_work_lost_respects_checkpoints() -> None:
    r = RunningJob("r", "u", "a0", "a100-40gb", 2, 64, 500.0, start_s=100.0, checkpoint_interval_s=60.0)
    assert r.work_lost_gpu_s(250.0) == (250.0 - 220.0) * 2
    plain = RunningJob("r", "u", "a0", "a100-40gb", 2, 64, 500.0, start_s=100.0)
    assert plain.work_lost_gpu_s(250.0) == 150.0 * 2


def test_one_job_record_for_the_simulator_and_the_queue() -> None:
    """A simulated job (JobSpec) and a queued one (PendingJob) are the same JobRequest; queueing copies
    the request, with all of its steps left unless told otherwise; the trace's own fields stay behind."""
    from easlurm.errors import ConfigError
    from easlurm.priority.snapshot import JobRequest
    from easlurm.sim.job import JobSpec

    spec = JobSpec("j1", "u", 5.0, "gpt2", 300, (16, 32), (1, 2), shareable=True, partition="gpu")
    queued = PendingJob.queued(spec)
    assert isinstance(spec, JobRequest) and isinstance(queued, JobRequest)
    assert (queued.remaining_steps, queued.remaining_samples) == (300.0, 300.0 * 16)
    assert queued.shareable and queued.batch_options == (16, 32) and not hasattr(queued, "partition")
    again = PendingJob.queued(spec, remaining_steps=120.0, preemptions=1)
    assert (again.remaining_steps, again.preemptions) == (120.0, 1)
    with pytest.raises(ConfigError, match="job x: total_steps must be > 0"):
        PendingJob("x", "u", 0.0, "gpt2", 0, (16,), (1,))
