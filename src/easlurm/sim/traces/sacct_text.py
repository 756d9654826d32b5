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
from collections.abc import Iterable, Iterator, Sequence
from datetime import tzinfo
from pathlib import Path

from easlurm.errors import TraceError
from easlurm.sim.traces.record import TraceJob, TraceStats
from easlurm.sim.traces.sacct_record import merged_jobs, trace_jobs
from easlurm.sim.traces.source import open_text
from easlurm.slurm.sacct_columns import jobs_of_columns, plain_id
from easlurm.slurm.sacct_jobs import SacctJob, job_of_fields
from easlurm.slurm.sacct_text import (
    BadRow,
    RepeatedHeader,
    SacctHeader,
    SacctRow,
    SacctTextError,
    read_header,
    record_blocks,
    record_of,
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
        columnar: bool = True,
    ) -> None:
        """`tz`: the time zone the dump's times were printed in (default: this process's, see
        easlurm.slurm.times); give it for a dump recorded on a machine in another zone. `columnar`: read
        job rows a block at a time, column by column (easlurm.slurm.sacct_columns), the rows it cannot
        take one by one; False reads every row one by one (the same jobs: tests compare the two)."""
        self.columnar = columnar
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
        if self.columnar:
            parsed = self._blocks(record_blocks(lines, header, self.path), header)
        else:
            parsed = self._parsed(sacct_rows(lines, header, self.path))
        yield from merged_jobs(parsed, self.stats)

    def _blocks(
        self, blocks: Iterator[list[tuple[int, list[str]] | BadRow]], header: SacctHeader
    ) -> Iterator[tuple[str | None, list[TraceJob]]]:
        """`_parsed` of each block's records: job rows with plain ids read column by column (a row the
        columns cannot take, one by one), the others as `_parsed` reads them; in the dump's order."""
        job_i, submit_i = header.index[header.jobcol], header.index["submit"]
        for block in blocks:
            plain = {
                k: item[1]
                for k, item in enumerate(block)
                if not isinstance(item, BadRow) and plain_id(item[1][job_i].strip())
            }
            read = jobs_of_columns(list(plain.values()), header.index, header.names, tz=self.tz)
            jobs = dict(zip(plain, read))
            for k, item in enumerate(block):
                job = jobs.get(k)
                if isinstance(item, BadRow) or job is None:
                    row = item if isinstance(item, BadRow) else record_of(item[0], item[1], header, self.path)
                    yield from self._parsed((row,))
                    continue
                self.stats.rows += 1
                where = f"{self.path}:{item[0]}"
                try:
                    yield None, self._trace_jobs(job, where, item[1][submit_i].strip())
                except TraceError as exc:
                    self.stats.bad(f"{where}: {exc}", self.skip_bad)

    def _parsed(
        self, items: Iterable[SacctRow | BadRow | RepeatedHeader]
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
        return self._trace_jobs(job, where, (row.get("submit") or "").strip())

    def _trace_jobs(self, job: SacctJob, where: str, submit: str) -> list[TraceJob]:
        """The TraceJobs of a row's job; TraceError without a submit time (`submit`: the row's text)."""
        if job.submit_s is None:
            raise TraceError(f"field {self._names.get('submit', 'Submit')}: missing ({submit!r})")
        ran = job.start_s is not None and job.end_s is not None
        return trace_jobs(job, where, job.elapsed_s if ran else None)
