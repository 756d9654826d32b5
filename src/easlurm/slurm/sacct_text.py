"""`sacct -P` / `sacct -p` text as rows: any columns in any order, quirks included.

Handled: header names matched case-insensitively (100+ columns fine), `--noheader` dumps with the
columns given, trailing `|` of `-p`, repeated headers of concatenated dumps, multi-line fields (sacct
does not escape newlines: a short line is joined with the next ones), and the delimiter (`|` or
`--delimiter`) inside free text (JobName, Constraints, SubmitLine...: the row is placed by the shapes
of the other columns, see `easlurm.slurm.sacct_shapes`, or refused). What a row means (steps, arrays,
het parts, times, TRES) is `easlurm.slurm.sacct_jobs.job_of_row`'s to say.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from easlurm.slurm.sacct_jobs import JOBID
from easlurm.slurm.sacct_shapes import FREE_TEXT, Misplaced, place_fields, shape_of

#: Columns `job_of_row` reads: a row is refused when a shaped one of them could be placed two ways.
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
_JOB_COLUMNS = frozenset({"jobid", "jobidraw"})


class SacctTextError(ValueError):
    """A dump that cannot be read at all (empty, or without JobID or Submit); the message names file and line."""


@dataclass(frozen=True)
class SacctHeader:
    """A dump's columns: lower-case names in order, as written, where each is, and how lines end."""

    #: lower-case names, the trailing empty column of `sacct -p` left out
    columns: list[str]
    #: lower-case name -> the name as the header (or the given columns) writes it, for messages and rows
    names: dict[str, str]
    #: lower-case name -> its first position
    index: dict[str, int]
    #: "jobid", else "jobidraw"
    jobcol: str
    delimiter: str
    #: every line ends with the delimiter (`sacct -p`)
    trailing: bool
    #: lines consumed before the first record (the header's line number; blank lines included)
    line: int


@dataclass(frozen=True)
class SacctRow:
    """One record of a dump (its fields by the header's names) and its JobID, parsed by `JOBID`."""

    line: int
    fields: list[str]
    jobid: re.Match[str]
    header: SacctHeader

    @property
    def values(self) -> dict[str, str]:
        """Field name as the header writes it -> text: what `job_of_row` reads."""
        names = self.header.names
        return {names.get(name, name): self.fields[i] for name, i in self.header.index.items()}

    @property
    def lower(self) -> dict[str, str]:
        """Lower-case field name -> text, stripped: what `job_of_fields` reads (with the header's `names`)."""
        fields = self.fields
        return {name: fields[i].strip() for name, i in self.header.index.items()}


@dataclass(frozen=True)
class BadRow:
    """A record that cannot be read; `message` is one line naming the file, line and field."""

    line: int
    message: str


@dataclass(frozen=True)
class RepeatedHeader:
    """The header again inside the dump (concatenated dumps): neither a record nor a malformed one."""

    line: int


def read_header(
    lines: Iterator[str], source: str, delimiter: str = "|", columns: Sequence[str] | None = None
) -> tuple[SacctHeader, Iterator[str]]:
    """The dump's header (its first non-blank line, or `columns` for a `--noheader` dump) and the lines
    after it. `source` names the dump in messages; SacctTextError for an empty dump or one without JobID
    (or JobIDRaw) and Submit."""
    if columns:
        given = [c.strip() for c in columns]
        cols, line, lines = _given_columns([c.lower() for c in given], lines, source, delimiter)
        names = {c.lower(): c for c in given}
    else:
        line, text = _header_line(lines, source)
        cols = [c.strip().lower() for c in text.split(delimiter)]
        names = {c.strip().lower(): c.strip() for c in text.split(delimiter)}
    trailing = bool(cols) and cols[-1] == ""
    if trailing:
        cols = cols[:-1]  # `sacct -p` ends every line with '|'
    index = {name: i for i, name in reversed(list(enumerate(cols)))}
    jobcol = "jobid" if "jobid" in index else "jobidraw" if "jobidraw" in index else None
    if jobcol is None or "submit" not in index:
        need = [n for n in ("JobID", "Submit") if n.lower() not in index and not (n == "JobID" and jobcol)]
        raise SacctTextError(
            f"{source}:{line or 1}: header lacks {', '.join(need)} "
            f"(not a sacct -P dump with a header? name its columns with --columns JobID,Submit,...)"
        )
    return SacctHeader(cols, names, index, jobcol, delimiter, trailing, line), lines


def _header_line(lines: Iterator[str], source: str) -> tuple[int, str]:
    """(line number, text) of the first non-blank line: a dump's header."""
    for line, raw in enumerate(lines, 1):
        if raw.strip():
            return line, raw.rstrip("\r\n")
    raise SacctTextError(f"{source}: empty trace")


def _given_columns(
    cols: list[str], lines: Iterator[str], source: str, delimiter: str
) -> tuple[list[str], int, Iterator[str]]:
    """The columns of a `--noheader` dump (with the empty last one of `-p` when its first record shows
    it), the blank lines before that record, and the lines from it on."""
    cols = list(cols)
    line = 0
    first = None
    for raw in lines:
        if raw.strip():
            first = raw
            break
        line += 1  # blank lines before the first record still count for line numbers
    if first is None:
        raise SacctTextError(f"{source}: empty trace")
    if first.rstrip("\r\n").endswith(delimiter) and len(first.split(delimiter)) == len(cols) + 1:
        cols.append("")  # `sacct -p --noheader`: the trailing '|' of every line
    return cols, line, itertools.chain([first], lines)


def sacct_rows(
    lines: Iterator[str], header: SacctHeader, source: str
) -> Iterator[SacctRow | BadRow | RepeatedHeader]:
    """The records of the lines after `header`, in order: rows (steps included), malformed records (whose
    message starts with `source:line:`) and repeated headers."""
    for item in _records(lines, header, source):
        yield item if isinstance(item, BadRow) else record_of(item[0], item[1], header, source)


def record_blocks(
    lines: Iterator[str], header: SacctHeader, source: str, size: int = 4096
) -> Iterator[list[tuple[int, list[str]] | BadRow]]:
    """`sacct_rows`' records, `size` at a time and not yet read: (first line, one field per header column)
    or a malformed record, for a reader that reads a block column by column (`record_of` reads one)."""
    records = _records(lines, header, source)
    while block := list(itertools.islice(records, size)):
        yield block


def _records(
    lines: Iterator[str], header: SacctHeader, source: str
) -> Iterator[tuple[int, list[str]] | BadRow]:
    """(first line, fields) of each record, the trailing empty field of `sacct -p` dropped, or a malformed one."""
    for item in _Records(header, source).read(lines, header.line):
        if isinstance(item, BadRow) or not header.trailing:
            yield item
        else:
            yield item[0], item[1][:-1]


def record_of(
    lineno: int, fields: list[str], header: SacctHeader, source: str
) -> SacctRow | BadRow | RepeatedHeader:
    """One record of `record_blocks` read: a row, the header again, or a malformed record (its JobID)."""
    raw_id = fields[header.index[header.jobcol]].strip()
    m = JOBID.match(raw_id)
    if m is not None:
        return SacctRow(lineno, fields, m, header)
    if raw_id.lower() == header.jobcol and [f.strip().lower() for f in fields] == header.columns:
        return RepeatedHeader(lineno)
    return BadRow(lineno, f"{source}:{lineno}: field JobID: cannot parse {raw_id!r}")


class _Records:
    """Physical lines -> logical records (first line number, fields): split lines joined, stray delimiters placed.

    A physical line starts a record when it has all the columns, or when the record before it is
    complete and its JobID field is a job id (or the header's name); otherwise it continues the record
    before it (a newline inside a field, which sacct does not escape). A complete record takes
    continuation lines only when its last column is free text (SubmitLine last, as `--format` usually
    puts it); else the line is bad."""

    def __init__(self, header: SacctHeader, source: str) -> None:
        self.cols = [*header.columns, ""] if header.trailing else header.columns
        self.ncols = len(self.cols)
        self.delimiter = header.delimiter
        self.job_i = header.index[header.jobcol]
        self.last_free = header.columns[-1] in FREE_TEXT
        self.names = header.names
        self.source = source

    def read(self, lines: Iterator[str], lineno: int) -> Iterator[tuple[int, list[str]] | BadRow]:
        """Records and malformed records; `lineno` is the number of lines already consumed (the header)."""
        ncols = self.ncols
        first = 0
        buf: list[str] | None = None
        continued = 0
        for raw in lines:
            lineno += 1
            text = raw.rstrip("\r\n")
            fields = text.split(self.delimiter)
            if buf is None:
                if text.strip():
                    first, buf, continued = lineno, fields, 0
                continue
            complete = len(buf) >= ncols
            if len(fields) >= ncols or (complete and self._starts_record(fields)):
                yield self._finish(first, buf)
                first, buf, continued = lineno, fields, 0
            elif complete and len(buf) == ncols and self._looks_like_tail(fields):
                # a complete record followed by what looks like the end of another row (its fields fit
                # the shapes of the last columns): a stray fragment of a split dump, not a newline inside
                # the record's last column (a multi-line SubmitLine `a |\n b` stays one record)
                yield self._finish(first, buf)
                buf = None
                yield BadRow(
                    lineno,
                    f"{self.source}:{lineno}: stray fragment of {len(fields)} fields (its first field "
                    f"{fields[0][:40]!r} is not a job id) after the complete record of line {first}",
                )
            elif (not complete or self.last_free) and continued < MAX_CONTINUATION:
                buf = [*buf[:-1], buf[-1] + "\n" + fields[0], *fields[1:]]
                continued += 1
            elif text.strip():
                yield self._finish(first, buf)
                buf = None
                yield BadRow(lineno, f"{self.source}:{lineno}: has {len(fields)} fields, header has {ncols}")
        if buf is not None:
            yield self._finish(first, buf)

    def _starts_record(self, fields: list[str]) -> bool:
        """The line's JobID field holds a job id (or the header's name): a new record, not a continuation."""
        if len(fields) <= self.job_i:
            return False
        value = fields[self.job_i].strip()
        return JOBID.match(value) is not None or value.lower() in _JOB_COLUMNS

    def _looks_like_tail(self, fields: list[str]) -> bool:
        """The line's fields fit the shapes of the last columns: the end of another row."""
        k = len(fields)
        if k < 2 or k >= self.ncols:
            return False
        tail = self.cols[-k:]
        shaped = [i for i, c in enumerate(tail) if c and c not in FREE_TEXT and fields[i].strip()]
        return bool(shaped) and all(shape_of(c)(v) for c, v in zip(tail, fields))

    def _finish(self, at: int, fields: list[str]) -> tuple[int, list[str]] | BadRow:
        """A joined record with one value per column, its extra delimiters placed, or why it cannot be read."""
        ncols, delimiter = self.ncols, self.delimiter
        if len(fields) > ncols:
            placed = place_fields(fields, self.cols, delimiter, USED)
            if isinstance(placed, Misplaced):
                return BadRow(at, self._misplaced(at, placed, len(fields) - ncols))
            fields = placed
        if len(fields) != ncols:
            return BadRow(at, f"{self.source}:{at}: has {len(fields)} fields, header has {ncols}")
        return at, fields

    def _misplaced(self, at: int, placed: Misplaced, extra: int) -> str:
        """The message for a row whose extra delimiters fit no placement."""
        names, delimiter = self.names, self.delimiter
        if placed.holds_delimiter:
            return (
                f"{self.source}:{at}: field "
                + " or ".join(names.get(c, c) for c in placed.column.split(" or "))
                + f" holds {extra} {delimiter!r}"
                + (f" ({placed.value!r})" if placed.value else "")
                + ": only free-text columns "
                "(JobName, Comment, SubmitLine...) can, so the row cannot be read"
            )
        what = "could be placed two ways" if placed.ambiguous else f"cannot be {placed.value!r}"
        return (
            f"{self.source}:{at}: {extra} extra {delimiter!r} in the row and no placement "
            f"fits the columns (field {names.get(placed.column, placed.column)} {what})"
        )


__all__ = [
    "MAX_CONTINUATION",
    "USED",
    "BadRow",
    "RepeatedHeader",
    "SacctHeader",
    "SacctRow",
    "SacctTextError",
    "read_header",
    "record_blocks",
    "record_of",
    "sacct_rows",
]
