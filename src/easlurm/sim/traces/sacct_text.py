"""Streaming reader for `sacct -P` / `sacct -p` dumps: a file's rows as the replay's TraceJobs.

`easlurm.slurm.sacct_text` turns the text into rows (header, `-p`, repeated headers, multi-line fields,
stray delimiters) and `easlurm.slurm.sacct_jobs` reads each row; here step rows (`123.batch`, `123.0`,
`123.extern`) are folded into their job, arrays (`123_4`; pending ranges `123_[1-9%2]` expanded, one
job per task) become one job per task, heterogeneous components (`123+0`, `123+1`) are merged into one
job, easlurm energy records in AdminComment are decoded, and every row is counted in TraceStats (a
malformed one raises TraceError naming file, line and field, or is skipped with --skip-bad).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from datetime import tzinfo
from pathlib import Path

from easlurm.errors import TraceError
from easlurm.sim.traces.record import TraceJob, TraceStats
from easlurm.sim.traces.sacct_record import merged_jobs, trace_jobs
from easlurm.sim.traces.source import open_text
from easlurm.slurm.sacct_jobs import job_of_fields
from easlurm.slurm.sacct_text import (
    BadRow,
    RepeatedHeader,
    SacctRow,
    SacctTextError,
    read_header,
    sacct_rows,
)

log = logging.getLogger(__name__)


class SacctTextReader:
    """Iterate the jobs of a `sacct -P` dump; one instance per file, single use."""

    def __init__(
        self,
        path: str | Path,
        *,
        skip_bad: bool = False,
        stats: TraceStats | None = None,
        columns: Sequence[str] | None = None,
        delimiter: str | None = None,
        tz: tzinfo | None = None,
    ) -> None:
        """`tz`: the time zone the dump's times were printed in (default: this process's, see
        easlurm.slurm.times); give it for a dump recorded on a machine in another zone."""
        if delimiter == "":
            raise TraceError("--delimiter: empty")
        self.delimiter = delimiter or "|"
        self.tz = tz
        self.path = str(path)
        self.skip_bad = skip_bad
        self.stats = stats if stats is not None else TraceStats()
        self.stats.path = self.path
        self.columns = [c.strip().lower() for c in columns] if columns else None
        self._given = [c.strip() for c in columns] if columns else []
        self._names: dict[str, str] = {}

    def __iter__(self) -> Iterator[TraceJob]:
        with open_text(self.path) as fh:
            yield from self._jobs(iter(fh))

    def _jobs(self, lines: Iterator[str]) -> Iterator[TraceJob]:
        try:
            header, lines = read_header(lines, self.path, self.delimiter, self._given or None)
        except SacctTextError as exc:
            raise TraceError(str(exc)) from None
        self._names = header.names
        missing = {"start", "end", "alloctres", "reqtres", "user", "partition", "state", "timelimit"}
        self.stats.missing_fields.update(m for m in missing if m not in header.index)
        yield from merged_jobs(self._parsed(sacct_rows(lines, header, self.path)), self.stats)

    def _parsed(
        self, items: Iterator[SacctRow | BadRow | RepeatedHeader]
    ) -> Iterator[tuple[str | None, list[TraceJob]]]:
        """(het job id or None, TraceJobs) per job row; the other records are counted (steps folded,
        repeated headers) or reported as bad (raised unless --skip-bad)."""
        for item in items:
            if isinstance(item, RepeatedHeader):
                self.stats.repeated_headers += 1  # concatenated dumps: not a record, not a job
                continue
            self.stats.rows += 1
            if isinstance(item, BadRow):
                self.stats.bad(item.message, self.skip_bad)
                continue
            m = item.jobid
            if m.group("step") is not None:
                self.stats.steps_folded += 1
                continue
            where = f"{self.path}:{item.line}"
            try:
                jobs = self._parse_row(item.lower, where)
            except TraceError as exc:
                self.stats.bad(f"{where}: {exc}", self.skip_bad)
                continue
            yield (m.group("base") if m.group("het") is not None else None), jobs

    def _parse_row(self, row: dict[str, str], where: str) -> list[TraceJob]:
        """The TraceJobs of one row keyed by lower-case field name."""
        try:
            job = job_of_fields(row, self._names, tz=self.tz)
        except ValueError as exc:
            raise TraceError(str(exc)) from None
        if job.submit_s is None:
            name = self._names.get("submit", "Submit")
            raise TraceError(f"field {name}: missing ({(row.get('submit') or '').strip()!r})")
        ran = job.start_s is not None and job.end_s is not None
        return trace_jobs(job, where, job.elapsed_s if ran else None)
