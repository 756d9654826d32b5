"""The reader-neutral trace record and the bookkeeping of what a reader kept, folded, skipped or dropped."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from easlurm.errors import TraceError
from easlurm.slurm.states import FINAL_JOB_STATES

log = logging.getLogger(__name__)

#: Slurm states whose job actually ran to an end (recorded start and end are both known).
ENDED_STATES = FINAL_JOB_STATES | {"REQUEUED", "REVOKED"}


@dataclass(frozen=True)
class TraceJob:
    """One job (allocation) of a trace, in absolute epoch seconds; None where the trace does not say.

    Readers fold step rows into their job, expand array ranges and merge heterogeneous components,
    so one TraceJob is one unit the simulator schedules.
    """

    job_id: str
    submit_s: float
    user: str | None = None
    partition: str | None = None
    start_s: float | None = None
    end_s: float | None = None
    runtime_s: float | None = None
    timelimit_s: float | None = None
    n_gpus: int = 0
    gpu_type: str | None = None
    n_nodes: int | None = None
    n_cpus: int | None = None
    state: str | None = None
    exit_code: int | None = None
    cancelled_by: str | None = None
    name: str | None = None
    qos: str | None = None
    model: str | None = None  # a zoo model name when the trace names one
    total_steps: int | None = None  # optimizer steps, when the trace records them
    measured_energy_j: float | None = None  # all devices, from easlurm records
    measured_gpu_energy_j: float | None = None
    array_job_id: str | None = None
    array_task_id: int | None = None
    het_components: int = 1
    allocated: bool | None = None  # False when the trace says no node was assigned ("None assigned")
    source: str = ""  # "file:line" of the row the job came from, for messages

    @property
    def ran(self) -> bool:
        """True when the job started and ended, so its recorded runtime is real."""
        return self.start_s is not None and self.end_s is not None and self.end_s >= self.start_s

    @property
    def never_started(self) -> bool:
        """True for a job that got no allocation: pending at dump time, or cancelled while pending.

        sacct prints Start = End (the cancel time) for a job cancelled while pending, with NodeList
        `None assigned`; replaying it would turn its wait into a zero-length run. A job whose start
        is unknown but whose run time is known (SWF wait -1) did run.
        """
        if self.allocated is False:
            return True
        if self.start_s is None:
            # an SWF job with an unknown wait (-1) but a known run time ran: its start is unknown
            return self.runtime_s is None
        return self.state == "CANCELLED" and self.end_s is not None and self.end_s <= self.start_s

    @property
    def start_unknown(self) -> bool:
        """True for a job that ran (its run time is known) but whose start the trace does not say."""
        return self.start_s is None and self.runtime_s is not None and self.allocated is not False

    @property
    def recorded_runtime_s(self) -> float | None:
        if self.runtime_s is not None:
            return self.runtime_s
        if self.ran:
            assert self.start_s is not None and self.end_s is not None
            return self.end_s - self.start_s
        return None


@dataclass
class TraceStats:
    """What a reader saw: nothing is dropped silently, every row ends up in one of these counts."""

    path: str = ""
    rows: int = 0
    jobs: int = 0
    steps_folded: int = 0
    skipped_bad: int = 0
    bad_examples: list[str] = field(default_factory=list)
    excluded: Counter[str] = field(default_factory=Counter)
    missing_fields: set[str] = field(default_factory=set)
    reordered: int = 0
    stopped_early: bool = False  # --max-jobs: the rest of the file was not read
    #: header lines met again inside the file (concatenated dumps): neither jobs nor malformed records
    repeated_headers: int = 0

    max_examples: int = 20
    quiet: bool = False  # a later pass over the same file: count, but do not warn again

    def bad(self, message: str, skip_bad: bool) -> None:
        """Record a malformed row: raise unless skipping, then count it and keep the first messages."""
        if not skip_bad:
            raise TraceError(message)
        self.skipped_bad += 1
        if len(self.bad_examples) < self.max_examples:
            self.bad_examples.append(message)
        if not self.quiet:
            log.warning("skipped: %s", message)

    def exclude(self, reason: str, n: int = 1) -> None:
        """Count a well-formed job that the replay cannot use (CPU-only, never started, ...)."""
        self.excluded[reason] += n

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "rows": self.rows,
            "jobs": self.jobs,
            "steps_folded": self.steps_folded,
            "skipped_bad": self.skipped_bad,
            "bad_examples": list(self.bad_examples),
            "excluded": dict(sorted(self.excluded.items())),
            "missing_fields": sorted(self.missing_fields),
            "reordered": self.reordered,
            "stopped_early": self.stopped_early,
            "repeated_headers": self.repeated_headers,
        }
