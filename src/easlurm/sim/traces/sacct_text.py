"""Streaming reader for `sacct -P` / `sacct -p` dumps: any columns in any order, quirks included.

Handled: header names matched case-insensitively (100+ columns fine), `--noheader` dumps with the
columns given, trailing `|` of `-p`, repeated headers of concatenated dumps, multi-line fields (sacct
does not escape newlines: a short line is joined with the next ones), the delimiter (`|` or
`--delimiter`) inside free text (JobName, Constraints, SubmitLine...: the row is placed by the
shapes of the other columns, or refused), step rows (`123.batch`, `123.0`, `123.extern`) folded
into their job, arrays (`123_4`; pending ranges `123_[1-9%2]` expanded, one job per task),
heterogeneous components (`123+0`, `123+1`) merged into one job, `CANCELLED by N`, `Unknown`/`None`
times, `D-HH:MM:SS` elapsed, TRES strings, and easlurm energy records in AdminComment.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Iterator, Sequence
from datetime import tzinfo
from pathlib import Path

from easlurm.errors import TraceError
from easlurm.sim.traces.record import TraceJob, TraceStats
from easlurm.sim.traces.sacct_fields import FREE_TEXT, Misplaced, place_fields, shape_of
from easlurm.sim.traces.sacct_record import merge_het, trace_jobs
from easlurm.sim.traces.source import open_text
from easlurm.slurm.sacct_jobs import JOBID, job_of_row

log = logging.getLogger(__name__)

#: Columns the reader reads: a row is refused when a shaped one of them could be placed two ways.
USED = frozenset(
    {
        "jobid",
        "jobidraw",
        "submit",
        "start",
        "end",
        "elapsed",
        "elapsedraw",
        "timelimit",
        "timelimitraw",
        "alloctres",
        "reqtres",
        "allocgres",
        "reqgres",
        "trespernode",
        "tresperjob",
        "state",
        "exitcode",
        "admincomment",
        "partition",
        "user",
        "uid",
        "nnodes",
        "ncpus",
        "alloccpus",
        "jobname",
        "qos",
        "nodelist",
    }
)
#: Continuation lines accepted for one record before it is declared malformed.
MAX_CONTINUATION = 200


def _records(
    lines: Iterator[str],
    cols: list[str],
    delimiter: str,
    job_i: int,
    last_free: bool,
    where: str,
    stats: TraceStats,
    skip_bad: bool,
    names: dict[str, str],
    lineno: int = 0,
) -> Iterator[tuple[int, list[str]]]:
    """(first line number, fields) per logical record, joining split lines and placing stray delimiters.

    A physical line starts a record when it has all the columns, or when the record before it is
    complete and its JobID field is a job id (or the header's name); otherwise it continues the record before it (a newline inside a
    field, which sacct does not escape). A complete record takes continuation lines only when its
    last column is free text (SubmitLine last, as `--format` usually puts it); else the line is bad.
    `lineno` is the number of lines already consumed (the header).
    """
    jobcol_names = {"jobid", "jobidraw"}
    ncols = len(cols)
    first = 0
    buf: list[str] | None = None
    continued = 0

    def starts_record(fields: list[str]) -> bool:
        if len(fields) <= job_i:
            return False
        value = fields[job_i].strip()
        return JOBID.match(value) is not None or value.lower() in jobcol_names

    def looks_like_tail(fields: list[str]) -> bool:
        k = len(fields)
        if k < 2 or k >= ncols:
            return False
        tail = cols[-k:]
        shaped = [i for i, c in enumerate(tail) if c and c not in FREE_TEXT and fields[i].strip()]
        return bool(shaped) and all(shape_of(c)(v) for c, v in zip(tail, fields))

    def finish(at: int, fields: list[str]) -> Iterator[tuple[int, list[str]]]:
        if len(fields) > ncols:
            placed = place_fields(fields, cols, delimiter, USED)
            if isinstance(placed, Misplaced) and placed.holds_delimiter:
                stats.rows += 1
                stats.bad(
                    f"{where}:{at}: field "
                    + " or ".join(names.get(c, c) for c in placed.column.split(" or "))
                    + f" holds {len(fields) - ncols} {delimiter!r}"
                    + (f" ({placed.value!r})" if placed.value else "")
                    + ": only free-text columns "
                    "(JobName, Comment, SubmitLine...) can, so the row cannot be read",
                    skip_bad,
                )
                return
            if isinstance(placed, Misplaced):
                stats.rows += 1
                what = "could be placed two ways" if placed.ambiguous else f"cannot be {placed.value!r}"
                stats.bad(
                    f"{where}:{at}: {len(fields) - ncols} extra {delimiter!r} in the row and no placement "
                    f"fits the columns (field {names.get(placed.column, placed.column)} {what})",
                    skip_bad,
                )
                return
            fields = placed
        if len(fields) != ncols:
            stats.rows += 1
            stats.bad(f"{where}:{at}: has {len(fields)} fields, header has {ncols}", skip_bad)
            return
        yield at, fields

    for raw in lines:
        lineno += 1
        text = raw.rstrip("\r\n")
        fields = text.split(delimiter)
        if buf is None:
            if text.strip():
                first, buf, continued = lineno, fields, 0
            continue
        complete = len(buf) >= ncols
        if len(fields) >= ncols or (complete and starts_record(fields)):
            yield from finish(first, buf)
            first, buf, continued = lineno, fields, 0
        elif complete and len(buf) == ncols and looks_like_tail(fields):
            # a complete record followed by what looks like the end of another row (its fields fit
            # the shapes of the last columns): a stray fragment of a split dump, not a newline inside
            # the record's last column (a multi-line SubmitLine `a |\n b` stays one record)
            yield from finish(first, buf)
            buf = None
            stats.rows += 1
            stats.bad(
                f"{where}:{lineno}: stray fragment of {len(fields)} fields (its first field "
                f"{fields[0][:40]!r} is not a job id) after the complete record of line {first}",
                skip_bad,
            )
        elif (not complete or last_free) and continued < MAX_CONTINUATION:
            buf = [*buf[:-1], buf[-1] + "\n" + fields[0], *fields[1:]]
            continued += 1
        elif text.strip():
            yield from finish(first, buf)
            buf = None
            stats.rows += 1
            stats.bad(f"{where}:{lineno}: has {len(fields)} fields, header has {ncols}", skip_bad)
    if buf is not None:
        yield from finish(first, buf)


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
        header_line = 0
        header_text = ""
        if self.columns is None:
            for raw in lines:
                header_line += 1
                if raw.strip():
                    header_text = raw.rstrip("\r\n")
                    break
            else:
                raise TraceError(f"{self.path}: empty trace")
            cols = [c.strip().lower() for c in header_text.split(self.delimiter)]
        else:
            cols = list(self.columns)
            first = None
            for raw in lines:
                if raw.strip():
                    first = raw
                    break
                header_line += 1  # blank lines before the first record still count for line numbers
            if first is None:
                raise TraceError(f"{self.path}: empty trace")
            d = self.delimiter
            if first.rstrip("\r\n").endswith(d) and len(first.split(d)) == len(cols) + 1:
                cols.append("")  # `sacct -p --noheader`: the trailing '|' of every line
            lines = itertools.chain([first], lines)
        if cols and cols[-1] == "":
            cols = cols[:-1]  # `sacct -p` ends every line with '|'
            trailing = True
        else:
            trailing = False
        idx = {name: i for i, name in reversed(list(enumerate(cols)))}
        if self.columns is None:
            self._names = {c.strip().lower(): c.strip() for c in header_text.split(self.delimiter)}
        else:
            self._names = {c.lower(): c for c in self._given}
        jobcol = "jobid" if "jobid" in idx else "jobidraw" if "jobidraw" in idx else None
        if jobcol is None or "submit" not in idx:
            need = [n for n in ("JobID", "Submit") if n.lower() not in idx and not (n == "JobID" and jobcol)]
            raise TraceError(
                f"{self.path}:{header_line or 1}: header lacks {', '.join(need)} "
                f"(not a sacct -P dump with a header? name its columns with --columns JobID,Submit,...)"
            )
        missing = {"start", "end", "alloctres", "reqtres", "user", "partition", "state", "timelimit"}
        self.stats.missing_fields.update(m for m in missing if m not in idx)
        group: list[TraceJob] = []
        group_key: str | None = None
        job_i = idx[jobcol]
        last_free = cols[-1] in FREE_TEXT
        records = _records(
            lines,
            [*cols, ""] if trailing else cols,
            self.delimiter,
            job_i,
            last_free,
            self.path,
            self.stats,
            self.skip_bad,
            self._names,
            header_line,
        )
        for lineno, fields in records:
            if trailing:
                fields = fields[:-1]
            raw_id = fields[job_i].strip()
            m = JOBID.match(raw_id)
            if m is None and raw_id.lower() == jobcol and [f.strip().lower() for f in fields] == cols:
                self.stats.repeated_headers += 1  # concatenated dumps: not a record, not a job
                continue
            self.stats.rows += 1
            if m is None:
                self.stats.bad(f"{self.path}:{lineno}: field JobID: cannot parse {raw_id!r}", self.skip_bad)
                continue
            if m.group("step") is not None:
                self.stats.steps_folded += 1
                continue
            row = {self._names.get(name, name): fields[i] for name, i in idx.items()}
            where = f"{self.path}:{lineno}"
            try:
                jobs = self._parse_row(row, m, where)
            except TraceError as exc:
                self.stats.bad(f"{where}: {exc}", self.skip_bad)
                continue
            het = m.group("het")
            key = m.group("base") if het is not None else None
            if group and key != group_key:
                yield from self._emit(merge_het(group))
                group = []
            if het is not None:
                group.extend(jobs)
                group_key = key
            else:
                group_key = None
                yield from self._emit(jobs)
        if group:
            yield from self._emit(merge_het(group))

    def _emit(self, jobs: list[TraceJob]) -> Iterator[TraceJob]:
        for job in jobs:
            self.stats.jobs += 1
            yield job

    def _parse_row(self, row: dict[str, str], m: re.Match[str], where: str) -> list[TraceJob]:
        try:
            job = job_of_row(row, tz=self.tz)
        except ValueError as exc:
            raise TraceError(str(exc)) from None
        if job.submit_s is None:
            name = self._names.get("submit", "Submit")
            raise TraceError(f"field {name}: missing ({(row.get(name) or '').strip()!r})")
        ran = job.start_s is not None and job.end_s is not None
        return trace_jobs(job, where, job.elapsed_s if ran else None)
