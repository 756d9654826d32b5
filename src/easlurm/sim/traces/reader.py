"""Pick the reader for a trace file and put its jobs in submit order with a bounded buffer."""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from easlurm.errors import TraceError
from easlurm.sim.traces.csv_trace import CsvReader
from easlurm.sim.traces.record import TraceJob, TraceStats
from easlurm.sim.traces.sacct_json import SacctJsonReader
from easlurm.sim.traces.sacct_text import SacctTextReader
from easlurm.sim.traces.source import open_text, strip_suffixes
from easlurm.sim.traces.swf import SwfReader

log = logging.getLogger(__name__)

FORMATS = ("sacct", "sacct-json", "swf", "csv")


def detect_format(path: str | Path) -> str:
    """The format of a trace from its suffix, else from its first non-blank line."""
    suffix = strip_suffixes(path)
    by_suffix = {".json": "sacct-json", ".swf": "swf", ".csv": "csv", ".sacct": "sacct", ".psv": "sacct"}
    if suffix in by_suffix:
        return by_suffix[suffix]
    with open_text(path) as fh:
        for line in fh:
            s = line.strip()
            if not s:
                continue
            if s.startswith("{"):
                return "sacct-json"
            if s.startswith(";"):
                return "swf"
            if "|" in s:
                return "sacct"
            if "," in s and "submit" in s.lower():
                return "csv"
            if len(s.split()) == 18:
                return "swf"
            break
    raise TraceError(f"{path}: cannot tell the trace format (use --format {'/'.join(FORMATS)})")


def trace_format(path: str | Path, fmt: str = "auto", delimiter: str | None = None) -> str:
    """The format `open_trace` reads `path` as (a `delimiter` implies sacct)."""
    return ("sacct" if delimiter else detect_format(path)) if fmt == "auto" else fmt


def open_trace(
    path: str | Path,
    fmt: str = "auto",
    *,
    skip_bad: bool = False,
    stats: TraceStats | None = None,
    **options: Any,
) -> Iterable[TraceJob]:
    """A re-iterable-per-call reader of `path` (streaming: each iteration reads the file again).

    `options`: `columns` for header-less sacct dumps, `delimiter` for dumps made with
    `sacct --delimiter=` (implies sacct), `procs_per_gpu` for SWF.
    """
    if not Path(path).is_file():
        raise TraceError(f"{path}: trace file not found")
    delimiter = options.get("delimiter")
    kind = trace_format(path, fmt, delimiter)
    stats = stats if stats is not None else TraceStats()
    if kind == "sacct":
        return SacctTextReader(
            path, skip_bad=skip_bad, stats=stats, columns=options.get("columns"), delimiter=delimiter
        )
    if kind == "sacct-json":
        return SacctJsonReader(path, skip_bad=skip_bad, stats=stats)
    if kind == "swf":
        return SwfReader(path, skip_bad=skip_bad, stats=stats, procs_per_gpu=options.get("procs_per_gpu"))
    if kind == "csv":
        return CsvReader(path, skip_bad=skip_bad, stats=stats)
    raise TraceError(f"unknown trace format {fmt!r} (known: auto, {', '.join(FORMATS)})")


def in_submit_order(
    jobs: Iterable[TraceJob], window: int = 10_000, stats: TraceStats | None = None
) -> Iterator[TraceJob]:
    """Yield jobs sorted by submit time, holding at most `window` of them (see SubmitOrder)."""
    return iter(SubmitOrder(jobs, window, stats))


def _rank(job: TraceJob) -> tuple[int, float]:
    """Which of two records of one job to keep: one that ran to its end, then the latest end."""
    if job.ran or job.start_unknown:
        return 2, job.end_s if job.end_s is not None else float("-inf")
    return (1 if job.start_s is not None else 0), float("-inf")


class SubmitOrder:
    """Jobs sorted by submit time through a bounded buffer, duplicate job ids merged.

    sacct lists jobs by id, which is nearly submit order (arrays and requeues are the exceptions).
    A job older than one already yielded (further out of order than the window) is yielded at the
    time of the last yielded job and counted in `stats.reordered`, never dropped.

    One job listed twice (monthly dumps concatenated, a job shown again after a requeue) is one job:
    of the records of one id, the one that ran to its end is kept (the latest end among several) and
    the others are counted as `duplicate_id`. A copy that arrives after its job was already yielded
    is counted the same way. REQUEUED records (`sacct --duplicates`) pass through: the mapping
    counts them as earlier attempts. `held` is the number of jobs read but not yet yielded.
    """

    def __init__(
        self, jobs: Iterable[TraceJob], window: int = 10_000, stats: TraceStats | None = None
    ) -> None:
        self.jobs = jobs
        self.window = window
        self.stats = stats
        self.held = 0
        self._heap: list[tuple[float, int, TraceJob]] = []
        self._live: dict[str, tuple[float, int, TraceJob]] = {}  # id -> its entry in the heap
        self._dead: set[int] = set()  # seq of heap entries replaced by a better copy
        self._done: set[str] = set()  # ids already yielded
        self._last = float("-inf")

    def _duplicate(self, job: TraceJob, kept: TraceJob | None) -> None:
        if self.stats is not None:
            self.stats.exclude("duplicate_id")
        if self.stats is None or not self.stats.quiet:
            why = f"the copy at {kept.source} is kept" if kept else "that job was already replayed"
            log.warning("%s: job %s is listed again: %s", job.source, job.job_id, why)

    def _push(self, seq: int, job: TraceJob) -> None:
        if job.state != "REQUEUED":
            if job.job_id in self._done:
                self._duplicate(job, None)
                return
            other = self._live.get(job.job_id)
            if other is not None:
                if _rank(job) <= _rank(other[2]):
                    self._duplicate(job, other[2])
                    return
                self._dead.add(other[1])
                self.held -= 1
                self._duplicate(other[2], job)
            entry = (job.submit_s, seq, job)
            self._live[job.job_id] = entry
        else:
            entry = (job.submit_s, seq, job)
        heapq.heappush(self._heap, entry)
        self.held += 1

    def _pop(self) -> TraceJob | None:
        submit, seq, out = heapq.heappop(self._heap)
        if seq in self._dead:
            self._dead.discard(seq)
            return None
        self.held -= 1
        live = self._live.get(out.job_id)
        if live is not None and live[1] == seq:
            del self._live[out.job_id]
            self._done.add(out.job_id)
        if submit < self._last:
            if self.stats is not None:
                self.stats.reordered += 1
            if self.stats is None or not self.stats.quiet:
                log.warning(
                    "%s: submitted %.0f s before a job already replayed; moved to its time",
                    out.source,
                    self._last - submit,
                )
            return replace(out, submit_s=self._last)
        self._last = submit
        return out

    def __iter__(self) -> Iterator[TraceJob]:
        for seq, job in enumerate(self.jobs):
            self._push(seq, job)
            while self.held > self.window:
                out = self._pop()
                if out is not None:
                    yield out
        while self._heap:
            out = self._pop()
            if out is not None:
                yield out
