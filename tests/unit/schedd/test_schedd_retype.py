"""A typed pending job is moved to another GPU type only where Slurm can do it: 22.05.8 accepts the
`TresPerNode=` update but keeps the old type in the job's TRES, and the job pends forever (BadConstraints)."""

from __future__ import annotations

from schedd_fake import job

from easlurm.energy.spec import parse_spec
from easlurm.priority.slurm_snapshot import pending_job
from easlurm.slurm.sched_client import CliSchedClient

MALLEABLE = parse_spec("model=vit-b16,steps=100,batch=64,gpus=1:2")


def test_a_malleable_typed_job_keeps_its_type_where_slurm_cannot_retype() -> None:
    typed = job("1", gpu_type="h100")
    assert pending_job(typed, MALLEABLE, retype=False).gpu_types == ("h100",)
    assert pending_job(typed, MALLEABLE, retype=True).gpu_types is None  # any type the cluster has
    untyped = job("2")
    assert pending_job(untyped, MALLEABLE, retype=False).gpu_types is None  # pinned by node, not by type


def test_the_client_says_by_version() -> None:
    client = CliSchedClient(env={})
    for version, can in (((22, 5, 8), False), ((24, 11, 5), True), ((26, 5, 5), True)):
        client._version = version
        assert client.retypes_pending_jobs() is can
