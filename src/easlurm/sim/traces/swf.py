"""Streaming reader for the Standard Workload Format (Parallel Workloads Archive), header comments included.

SWF counts processors, not GPUs: a job's GPUs are ceil(processors / procs_per_gpu) (allocated
processors, else requested); procs_per_gpu is the caller's, else the log's `; ProcsPerGPU:` header, else 1
(the replay refuses a log nobody said this of: easlurm.sim.traces.swf_gpus). Times are seconds from the log start;
the `; UnixStartTime:` header, when it holds a number, makes them absolute (archive logs also say
`UNKNOWN`: times stay relative). -1 means unknown: a job with an unknown wait but a known run time
ran (its start is unknown, its work is not); a cancelled job (status 5) with no run time never did.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from pathlib import Path

from easlurm.inputs import MAX_EPOCH_S
from easlurm.sim.traces.record import TraceJob, TraceStats
from easlurm.sim.traces.sane import problem
from easlurm.sim.traces.source import open_text
from easlurm.sim.traces.swf_gpus import PROCS_PER_GPU_KEY, header_int

log = logging.getLogger(__name__)

FIELDS = (
    "job_number",
    "submit_time",
    "wait_time",
    "run_time",
    "allocated_processors",
    "average_cpu_time",
    "used_memory",
    "requested_processors",
    "requested_time",
    "requested_memory",
    "status",
    "user_id",
    "group_id",
    "executable_number",
    "queue_number",
    "partition_number",
    "preceding_job_number",
    "think_time",
)
_STATUS = {1: "COMPLETED", 0: "FAILED", 5: "CANCELLED", 2: "PARTIAL", 3: "PARTIAL", 4: "PARTIAL"}


class SwfReader:
    """Iterate the jobs of an SWF file; `header` holds the `; Key: value` comments read so far."""

    def __init__(
        self,
        path: str | Path,
        *,
        skip_bad: bool = False,
        stats: TraceStats | None = None,
        procs_per_gpu: int | None = None,
    ) -> None:
        self.path = str(path)
        self.skip_bad = skip_bad
        self.stats = stats if stats is not None else TraceStats()
        self.stats.path = self.path
        self._ppg_given = procs_per_gpu is not None
        self.procs_per_gpu = max(1, int(procs_per_gpu or 1))
        self.header: dict[str, str] = {}
        self.origin_s = 0.0  # UnixStartTime, when the header gives one

    def _header_line(self, line: str, where: str) -> None:
        key, sep, value = line[1:].partition(":")
        key, value = key.strip(), value.strip()
        if not sep or not key or " " in key or key in self.header:
            return
        self.header[key] = value
        if key == PROCS_PER_GPU_KEY and not self._ppg_given:
            self.procs_per_gpu = header_int(self.header, key) or 1
        if key == "UnixStartTime":
            try:
                origin = float(value)
            except ValueError:
                origin = math.nan
            if math.isfinite(origin) and origin >= 0:
                self.origin_s = origin
            elif not self.stats.quiet:
                log.warning(
                    "%s: UnixStartTime %r is not a time: times stay relative to the log start", where, value
                )

    def __iter__(self) -> Iterator[TraceJob]:
        with open_text(self.path) as fh:
            for lineno, raw in enumerate(fh, start=1):
                line = raw.strip()
                if not line:
                    continue
                where = f"{self.path}:{lineno}"
                if line.startswith(";"):
                    self._header_line(line, where)
                    continue
                self.stats.rows += 1
                job = self._parse(line.split(), where)
                if job is not None:
                    self.stats.jobs += 1
                    yield job

    def _parse(self, parts: list[str], where: str) -> TraceJob | None:
        if len(parts) != len(FIELDS):
            self.stats.bad(f"{where}: has {len(parts)} fields, SWF has {len(FIELDS)}", self.skip_bad)
            return None
        values: dict[str, float] = {}
        for name, text in zip(FIELDS, parts):
            try:
                values[name] = float(text)
            except ValueError:
                values[name] = math.nan
            if not math.isfinite(values[name]) or abs(values[name]) > MAX_EPOCH_S:
                self.stats.bad(f"{where}: field {name}: {text!r} is not a number in range", self.skip_bad)
                return None
        if values["submit_time"] < 0:
            self.stats.bad(f"{where}: field submit_time: unknown (-1)", self.skip_bad)
            return None

        def known(name: str) -> float | None:
            return values[name] if values[name] >= 0 else None

        submit_s = self.origin_s + values["submit_time"]
        wait, run = known("wait_time"), known("run_time")
        status = known("status")
        if status == 5 and not run:
            run = None  # cancelled before it ran: its "run" is no work
        cancelled_pending = status == 5 and run is None
        start_s = submit_s + wait if wait is not None and not cancelled_pending else None
        end_s = start_s + run if start_s is not None and run is not None else None
        procs = known("allocated_processors") or known("requested_processors") or 0
        user = known("user_id")
        partition = known("partition_number")
        job = TraceJob(
            job_id=str(int(values["job_number"])),
            submit_s=submit_s,
            user=str(int(user)) if user is not None else None,
            partition=str(int(partition)) if partition is not None else None,
            start_s=start_s,
            end_s=end_s,
            runtime_s=run,
            timelimit_s=known("requested_time"),
            n_gpus=math.ceil(procs / self.procs_per_gpu),
            n_cpus=int(procs) or None,
            state=_STATUS.get(int(status)) if status is not None else None,
            source=where,
        )
        why = problem(job)
        if why:
            self.stats.bad(f"{where}: {why}", self.skip_bad)
            return None
        return job
