"""A job's SPEC says how it trains (precision=, shard=, ckpt=): the policies predict it that way, and with
shard=auto the oracle picks, for each option, the cheapest sharding and checkpointing that fits."""

from __future__ import annotations

from typing import Any

import pytest

from easlurm.energy.spec import parse_spec
from easlurm.model import Oracle
from easlurm.priority.policies import get_policy
from easlurm.priority.slurm_snapshot import pending_job
from easlurm.priority.snapshot import ClusterSnapshot, NodeState, PendingJob
from easlurm.slurm.sched_client import SlurmJob

H100 = NodeState("h0", "h100-sxm", 8, 8, 70.0, 700.0, 200.0)


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    return Oracle()


def _slurm_job(comment: str) -> SlurmJob:
    fields: dict[str, Any] = {
        "job_id": "7",
        "name": "llm",
        "user": "alice",
        "state": "PENDING",
        "reason": "Priority",
        "partition": "h100",
        "nodes": "",
        "node_count": 1,
        "submit_s": 0.0,
        "start_s": None,
        "eligible_s": 0.0,
        "priority": 1000,
        "gpus_per_node": 8,
        "gpu_type": "h100",
        "comment": comment,
        "requeue": True,
    }
    return SlurmJob(**fields)


def _pending(spec_text: str) -> PendingJob:
    return pending_job(_slurm_job(f"energy-profile={spec_text}"), parse_spec(spec_text), None, True)


def test_the_spec_reaches_the_pending_job() -> None:
    job = _pending("model=llama3-8b,steps=100,batch=16,gpus=8,precision=bf16,shard=auto")
    assert (job.precision, job.sharding, job.act_ckpt) == ("amp-bf16", "auto", "auto")
    job = _pending("model=llama3-8b,steps=100,batch=16,gpus=8,shard=fsdp,ckpt=1")
    assert (job.precision, job.sharding, job.act_ckpt) == ("bf16", "zero3", "full")
    plain = _pending("model=llama3-8b,steps=100,batch=16,gpus=8")
    assert (plain.sharding, plain.act_ckpt) == ("none", "")


def test_an_llm_job_that_allows_sharding_starts_where_an_unsharded_one_cannot(oracle: Oracle) -> None:
    """llama3-8b does not fit one H100 node replicated; allowed to shard, the policy starts it there."""
    policy = get_policy("zeus")

    def starts(job: PendingJob) -> list[Any]:
        snap = ClusterSnapshot(time_s=100.0, nodes=(H100,), running=(), pending=(job,))
        return list(policy.decide(snap, oracle).starts)

    assert starts(_pending("model=llama3-8b,steps=100,batch=16,gpus=8")) == []
    (start,) = starts(_pending("model=llama3-8b,steps=100,batch=16,gpus=8,shard=auto"))
    assert start.n_gpus == 8
    assert starts(_pending("model=llama3-8b,steps=100,batch=16,gpus=8,shard=zero3,ckpt=full"))
