"""Publication: node 0 gathers the nodes' records within its bound, every publication carries every step
of the job, a late node fills itself in, steps ending together share one publication, and without a
spool each step merges into what slurmctld holds."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from agent_fakes import FakeClient, ctx, run_node
from agent_fakes import spool as spool

from easlurm.accounting.publish import publish_from_spool
from easlurm.accounting.step_record import StepRecord, decode_admin_comment
from easlurm.errors import SlurmError


def test_two_nodes_meet_in_the_spool_and_node0_publishes(spool: Path) -> None:
    client = FakeClient()
    assert run_node(ctx(spool, node_id=1), client) is None  # other nodes only write their record
    assert client.published == []
    step = run_node(ctx(spool, node_id=0), client)
    assert step is not None and not step.partial
    assert [n.node_id for n in step.nodes] == [0, 1]
    assert step.gpu_energy_j == pytest.approx(2 * 2 * 600.0)
    on_disk = StepRecord.from_dict(json.loads((spool / "42" / "step-0.json").read_text()))
    assert on_disk.to_dict() == step.to_dict()
    ((how, job, text),) = client.published
    assert how == "scontrol" and job == 42
    assert [s.to_dict() for s in decode_admin_comment(text)] == [step.to_dict()]


def test_missing_node_makes_a_partial_record_within_the_bound(spool: Path) -> None:
    client = FakeClient()
    t0 = time.monotonic()
    step = run_node(ctx(spool, node_id=0, nnodes=3, timeout_s=0.4), client)
    assert time.monotonic() - t0 < 1.0
    assert step is not None and step.partial and step.missing_nodes == [1, 2]
    assert decode_admin_comment(client.published[0][2])[0].missing_nodes == [1, 2]


def test_each_publication_carries_every_step_of_the_job(spool: Path) -> None:
    client = FakeClient()
    run_node(ctx(spool, nnodes=1, step="0"), client)
    run_node(ctx(spool, nnodes=1, step="1"), client)
    run_node(ctx(spool, nnodes=5, step="batch"), client)  # batch: one node whatever the job size
    last = decode_admin_comment(client.published[-1][2])
    assert sorted(s.step for s in last) == ["0", "1", "batch"]
    assert not any(s.partial for s in last)


def test_finished_job_goes_to_the_database(spool: Path) -> None:
    client = FakeClient(finished=True)
    run_node(ctx(spool, nnodes=1), client)
    assert [p[0] for p in client.published] == ["sacctmgr"]


def test_a_late_node_fills_itself_into_the_partial_step_record(spool: Path) -> None:
    """Node 0 gave up waiting for node 1 (overloaded); node 1's record, when it comes, is added and
    republished, so the step ends up complete instead of partial for good."""
    client = FakeClient()
    early = run_node(ctx(spool, node_id=0, timeout_s=0.2), client)
    assert early is not None and early.missing_nodes == [1]
    assert run_node(ctx(spool, node_id=1, timeout_s=0.2), client) is None
    on_disk = StepRecord.from_dict(json.loads((spool / "42" / "step-0.json").read_text()))
    assert not on_disk.partial and [n.node_id for n in on_disk.nodes] == [0, 1]
    (last,) = decode_admin_comment(client.published[-1][2])
    assert not last.partial and last.gpu_energy_j == pytest.approx(2 * 2 * 600.0)
    assert len(client.published) == 2


def test_a_node_on_time_publishes_nothing_itself(spool: Path) -> None:
    client = FakeClient()
    run_node(ctx(spool, node_id=1), client)
    run_node(ctx(spool, node_id=0), client)
    run_node(ctx(spool, node_id=1), client)  # record again after node 0 had it: nothing to add
    assert len(client.published) == 1


def test_steps_ending_together_share_one_publication(spool: Path) -> None:
    """Step files written while another agent held the lock: the first publisher carries them all, and
    the others find their file already published instead of calling scontrol once each."""
    for step in "01234":
        run_node(ctx(spool, nnodes=1, step=step))  # records written, nothing published yet
    client = FakeClient()
    for step in "01234":
        assert publish_from_spool(ctx(spool, nnodes=1, step=step), client)
    assert len(client.published) == 1
    assert sorted(s.step for s in decode_admin_comment(client.published[0][2])) == list("01234")
    run_node(ctx(spool, nnodes=1, step="2"), client)  # a changed file is published again
    assert len(client.published) == 2


def test_a_failed_publication_is_retried_by_the_next_agent(spool: Path) -> None:
    run_node(ctx(spool, nnodes=1, step="0"))
    broken = FakeClient()
    broken.set_admin_comment = lambda *_: (_ for _ in ()).throw(SlurmError("slurmctld unreachable"))  # type: ignore[method-assign]
    assert not publish_from_spool(ctx(spool, nnodes=1, step="0"), broken)
    client = FakeClient()
    assert publish_from_spool(ctx(spool, nnodes=1, step="0"), client)
    assert len(client.published) == 1


def test_unsafe_spool_is_not_used_but_records_are_still_published(spool: Path) -> None:
    """Without a spool, each step merges into what slurmctld already holds for the job."""
    spool.chmod(0o777)
    client = FakeClient()
    step = run_node(ctx(spool, nnodes=1), client)
    assert step is not None and step.nodes[0].total_energy_j is not None
    run_node(ctx(spool, nnodes=1, step="batch"), client)
    assert not (spool / "42").exists()
    assert sorted(s.step for s in decode_admin_comment(client.published[-1][2])) == ["0", "batch"]
