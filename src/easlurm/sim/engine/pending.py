"""The simulator's pending queue: queue order kept in O(1) per change, a decision reads only its head."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain, islice

from easlurm.priority.snapshot import PendingJob

#: pending jobs a decision sees, in queue order (Slurm's default_queue_depth does the same at each event,
#: 100 jobs by default): a queue that grows without bound then costs each decision the same
DEFAULT_QUEUE_DEPTH = 1000


class PendingQueue:
    """Pending jobs in queue order: requeued (preempted) jobs first, the last requeued first, then the
    others in arrival order. Adding, requeueing, finding and removing a job are O(1); `head(n)` walks
    `n` jobs, never the whole queue, and counts them in `scanned` (what tests check)."""

    def __init__(self) -> None:
        self._requeued: dict[str, PendingJob] = {}  # in requeue order: read reversed
        self._arrived: dict[str, PendingJob] = {}
        self.scanned = 0  # jobs handed out by head(), over the run
        self.longest = 0  # the most jobs pending at once

    def add(self, job_id: str, job: PendingJob) -> None:
        """A new job, at the back of the queue."""
        self._arrived[job_id] = job
        self.longest = max(self.longest, len(self))

    def requeue(self, job_id: str, job: PendingJob) -> None:
        """A preempted job, back at the front of the queue (thesis 5.3.2.4)."""
        self._arrived.pop(job_id, None)
        self._requeued.pop(job_id, None)
        self._requeued[job_id] = job
        self.longest = max(self.longest, len(self))

    def get(self, job_id: str) -> PendingJob | None:
        job = self._requeued.get(job_id)
        return job if job is not None else self._arrived.get(job_id)

    def pop(self, job_id: str) -> PendingJob | None:
        job = self._requeued.pop(job_id, None)
        return job if job is not None else self._arrived.pop(job_id, None)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._requeued or job_id in self._arrived

    def __len__(self) -> int:
        return len(self._requeued) + len(self._arrived)

    def __bool__(self) -> bool:
        return bool(self._requeued) or bool(self._arrived)

    def __iter__(self) -> Iterator[PendingJob]:
        """Every pending job in queue order (the whole queue: not for a decision)."""
        return chain(reversed(self._requeued.values()), self._arrived.values())

    def head(self, n: int | None) -> tuple[PendingJob, ...]:
        """The first `n` pending jobs in queue order (all of them when `n` is None)."""
        jobs = tuple(iter(self) if n is None else islice(iter(self), n))
        self.scanned += len(jobs)
        return jobs
