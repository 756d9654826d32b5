"""`sacct -P` text as rows: the header, `-p`, repeated headers, split lines and stray delimiters."""

from __future__ import annotations

import pytest

from easlurm.slurm.sacct_text import (
    BadRow,
    RepeatedHeader,
    SacctRow,
    SacctTextError,
    read_header,
    sacct_rows,
)

DUMP = [
    "JobID|JobName|Submit|State|SubmitLine|\n",
    "7|a|b|2024-03-01T12:00:00|COMPLETED|sbatch x|\n",
    "7.batch|batch|2024-03-01T12:00:00|COMPLETED||\n",
    "JobID|JobName|Submit|State|SubmitLine|\n",
    "8|n|2024-03-01T12:00:00|RUNNING|sbatch\n",
    "  --wrap y|\n",
    "x9|n|2024-03-01T12:00:00|RUNNING||\n",
]


def test_rows_of_a_p_dump_with_a_stray_delimiter_a_split_line_and_a_repeated_header() -> None:
    """JobName `a|b` is placed by the other columns' shapes, a newline in SubmitLine joins two lines,
    the header met again is no row, and a JobID that is none is a bad row naming its line."""
    header, lines = read_header(iter(DUMP), "dump.psv")
    assert header.columns == ["jobid", "jobname", "submit", "state", "submitline"]
    assert header.trailing and header.line == 1 and header.jobcol == "jobid"
    items = list(sacct_rows(lines, header, "dump.psv"))
    assert [type(i) for i in items] == [SacctRow, SacctRow, RepeatedHeader, SacctRow, BadRow]
    first, step, _, split, bad = items
    assert isinstance(first, SacctRow) and first.values["JobName"] == "a|b" and first.line == 2
    assert isinstance(step, SacctRow) and step.jobid.group("step") == "batch"
    assert isinstance(split, SacctRow) and split.values["SubmitLine"] == "sbatch\n  --wrap y"
    assert isinstance(bad, BadRow) and bad.message == "dump.psv:7: field JobID: cannot parse 'x9'"


def test_noheader_dump_takes_the_given_columns() -> None:
    """`--noheader`: the columns are given, names kept as written for messages and rows."""
    header, lines = read_header(iter(["\n", "5|2024-03-01T12:00:00\n"]), "d", columns=["JobIDRaw", "Submit"])
    assert header.jobcol == "jobidraw" and header.line == 1 and not header.trailing
    (row,) = sacct_rows(lines, header, "d")
    assert isinstance(row, SacctRow) and row.values == {"JobIDRaw": "5", "Submit": "2024-03-01T12:00:00"}


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["\n", " \n"], "d: empty trace"),
        (["\n", "User|State\n"], "d:2: header lacks JobID, Submit (not a sacct -P dump with a header?"),
    ],
)
def test_unreadable_dumps_name_the_file_and_line(lines: list[str], message: str) -> None:
    with pytest.raises(SacctTextError, match=message.replace("?", r"\?").replace("(", r"\(")):
        read_header(iter(lines), "d")
