"""Independent Slurm commands of one cycle run at once (docs/schedd-scale.md): the reads, and the site factor
updates where the client allows several in flight. What is recorded stays in the plan's order."""

from __future__ import annotations

import threading
from collections.abc import Mapping

import pytest
from schedd_fake import FakeSchedClient, job, node

from easlurm.errors import SlurmError
from easlurm.priority.apply import Action, Kind, execute
from easlurm.priority.daemon import Daemon, DaemonConfig
from easlurm.slurm.job_updates import Hold, Order
from easlurm.slurm.sched_client import SlurmJob, SlurmNode


class ConcurrentClient(FakeSchedClient):
    """Four updates in flight; the first two must overlap (a barrier: applied one by one, they time out);
    updates of job "5" fail."""

    update_workers = 4

    def __init__(self) -> None:
        super().__init__([job(str(i)) for i in range(12)], [node("h100-1", "h100")])
        self.barrier = threading.Barrier(2, timeout=10)
        self.lock = threading.Lock()
        self.updates = 0

    def update_job(self, job_id: str, fields: Mapping[str, str]) -> None:
        with self.lock:
            self.updates += 1
            first_two = self.updates <= 2
        if first_two:
            self.barrier.wait()
        if job_id == "5":
            raise SlurmError("slurm_update error: Invalid job id specified")
        with self.lock:
            super().update_job(job_id, fields)


def test_site_factors_are_applied_together_and_recorded_in_plan_order() -> None:
    client = ConcurrentClient()
    orders = [Action(Kind.ORDER, str(i), Order(100 - i), f"rank {i + 1}") for i in range(10)]
    hold = Action(Kind.HOLD, "11", Hold(99_999, "easlurm-hold:until=99999,begin=0"), "power-budget")
    out = execute([*orders, hold], client, None, dry_run=False)
    assert [a.job_id for a in out.done] == [str(i) for i in range(10) if i != 5] + ["11"]
    assert [(a.job_id, e) for a, e in out.failed] == [("5", "slurm_update error: Invalid job id specified")]
    assert client.updates == 11
    assert client.calls[-1][:2] == ("update", "11")  # the hold after every order, as planned


def test_one_update_at_a_time_where_the_client_says_so() -> None:
    client = FakeSchedClient([job(str(i)) for i in range(4)], [node("h100-1", "h100")])
    out = execute([Action(Kind.ORDER, str(i), Order(10 - i)) for i in range(4)], client, None, dry_run=False)
    assert [c[1] for c in client.calls] == ["0", "1", "2", "3"]
    assert len(out.done) == 4


def test_dry_run_applies_no_order() -> None:
    client = ConcurrentClient()
    out = execute([Action(Kind.ORDER, str(i), Order(10 - i)) for i in range(4)], client, None, dry_run=True)
    assert client.updates == 0 and len(out.done) == 4


class SlowReads(FakeSchedClient):
    """Each read waits for the others (a barrier of all four): read one after the other, they time out."""

    def __init__(self, fail_nodes: bool = False) -> None:
        super().__init__([job("1")], [node("h100-1", "h100")])
        self.barrier = threading.Barrier(4, timeout=10)
        self.fail_nodes = fail_nodes

    def jobs(self) -> list[SlurmJob]:
        self.barrier.wait()
        return super().jobs()

    def nodes(self) -> list[SlurmNode]:
        self.barrier.wait()
        if self.fail_nodes:
            raise SlurmError("sinfo failed: Unable to contact slurm controller (connect failure)")
        return super().nodes()

    def site_factors(self) -> dict[str, tuple[int, int]]:
        self.barrier.wait()
        return super().site_factors()

    def user_gpu_s(self, since_s: float) -> dict[str, float]:
        self.barrier.wait()
        return super().user_gpu_s(since_s)


def test_the_cycle_reads_queue_nodes_priorities_and_history_at_once() -> None:
    client = SlowReads()
    report = Daemon(client, DaemonConfig(policy="themis"), clock=lambda: 10_000.0).cycle()
    assert report.error is None and report.jobs_seen == 1
    assert report.snapshot is not None and report.snapshot.user_gpu_s == {"alice": 3600.0}


class SlowHistory(FakeSchedClient):
    """sacct answers only once `answer` is set."""

    def __init__(self) -> None:
        super().__init__([job("1")], [node("h100-1", "h100")])
        self.answer = threading.Event()
        self.asked = threading.Event()

    def user_gpu_s(self, since_s: float) -> dict[str, float]:
        self.asked.set()
        assert self.answer.wait(10), "sacct was never let through"
        return {"bob": 7200.0}


@pytest.mark.parametrize("policy", ["zeus", "pollux", "charon", "aurachronos"])
def test_a_policy_that_does_not_rank_by_history_does_not_wait_for_sacct(policy: str) -> None:
    """Its cycles go on with the last history while sacct runs; the cycle after the read has it."""
    client = SlowHistory()
    daemon = Daemon(client, DaemonConfig(policy=policy), clock=lambda: 10_000.0)
    first = daemon.cycle()
    assert first.error is None and first.snapshot is not None and first.snapshot.user_gpu_s == {}
    assert client.asked.wait(10)
    client.answer.set()
    assert daemon._history_refresh is not None
    daemon._history_refresh.result(timeout=10)
    second = daemon.cycle()
    assert second.snapshot is not None and second.snapshot.user_gpu_s == {"bob": 7200.0}


@pytest.mark.parametrize("policy", ["themis", "hades", "slurm"])
def test_a_policy_that_ranks_by_history_waits_for_it(policy: str) -> None:
    client = SlowHistory()
    client.answer.set()
    report = Daemon(client, DaemonConfig(policy=policy), clock=lambda: 10_000.0).cycle()
    assert report.snapshot is not None and report.snapshot.user_gpu_s == {"bob": 7200.0}


def test_a_failed_read_skips_the_cycle_and_changes_nothing() -> None:
    client = SlowReads(fail_nodes=True)
    report = Daemon(client, DaemonConfig(policy="hades"), clock=lambda: 10_000.0).cycle()
    assert report.error is not None and "sinfo failed" in report.error
    assert client.calls == []
