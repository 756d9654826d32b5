"""`sacct -P` rows read column by column give the jobs, stats and errors the row-by-row reader gives."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Iterator
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from easlurm.errors import TraceError
from easlurm.sim.traces.record import TraceStats
from easlurm.sim.traces.sacct_text import SacctTextReader
from easlurm.slurm.sacct_columns import jobs_of_columns, timestamps_s
from easlurm.slurm.sacct_jobs import job_of_fields
from easlurm.slurm.sacct_text import read_header
from easlurm.slurm.times import parse_timestamp_s

FIXTURES = Path(__file__).parents[2] / "fixtures"
#: every recorded `sacct -P` dump: the three Slurm versions' captures and the traces' quirks and bad rows
DUMPS = sorted(
    [
        *FIXTURES.glob("slurm/*/sacct_parsable.txt"),
        *FIXTURES.glob("traces/*.psv"),
        *FIXTURES.glob("traces/public/*.psv"),
    ]
)
BENCH = Path(__file__).parents[3] / "benchmarks" / "bench_replay.py"


def _read(path: Path, columnar: bool, skip_bad: bool = True) -> tuple[object, dict[str, object]]:
    """(the jobs, or the error's message) and the stats of one read."""
    stats = TraceStats()
    try:
        jobs: object = list(SacctTextReader(path, stats=stats, skip_bad=skip_bad, columnar=columnar))
    except TraceError as exc:
        jobs = str(exc)
    return jobs, vars(stats)


def test_every_recorded_dump_reads_the_same_by_columns_as_by_rows() -> None:
    """22.05, 24.11 and 26.05 captures, split lines, stray delimiters, repeated headers, arrays, het jobs,
    energy records and bad rows: the same TraceJobs (sources included) and the same counts, skipping bad
    rows or stopping at the first with the same message."""
    assert len(DUMPS) >= 15 and any("2605" in str(p) for p in DUMPS)
    for path in DUMPS:
        assert _read(path, True) == _read(path, False), path
        assert _read(path, True, skip_bad=False) == _read(path, False, skip_bad=False), path


def test_the_benchmarks_trace_reads_the_same_by_columns(tmp_path: Path) -> None:
    """bench_replay's Philly-shaped trace (pipes in JobName and Constraints, pending-cancelled array
    tasks, steps): the same jobs both ways, and most job rows taken by the columns."""
    spec = importlib.util.spec_from_file_location("bench_replay", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    trace = tmp_path / "trace.psv"
    bench.write_trace(trace, 3000, 1024, seed=3, shape="philly")
    by_columns, by_rows = _read(trace, True), _read(trace, False)
    assert by_columns == by_rows
    assert isinstance(by_columns[0], list) and len(by_columns[0]) == 3030


DUMP = [
    "JobID|JobIDRaw|Submit|Start|End|ElapsedRaw|Elapsed|TimelimitRaw|State|ExitCode|NNodes|NCPUS|AllocTRES|NodeList\n",
    "1|1|2024-03-01T12:00:00|2024-03-01T12:01:00|2024-03-01T13:01:00|3600|01:00:00|120|COMPLETED|0:0|1|8|"
    "cpu=8,gres/gpu:a100=2,gres/gpu=2|n1\n",
    "2|2|2024-03-01T12:00:00|Unknown|Unknown||00:00:00|UNLIMITED|PENDING|0:0|1|8||None assigned\n",
    "3|3|2024-02-30T12:00:00|None|None|0||60|CANCELLED by 7|0:0|1|8||None assigned\n",
    "4|4|2024-03-01T12:00:00|None|None|x|||FAILED|1:0|one|8|gres/gpu=two|n2\n",
    "5_1|5|2024-03-01T12:00:00|None|None|0||60|COMPLETED|0:0|1|8||n3\n",
    "6|6|1709294400|2024-03-01T12:00:00Z|2024-03-01T13:00:00+01:00| 12 |1:00|60|RUNNING+|-1:0|2|16|mem=4G|n[1-2]\n",
]


def _rows() -> tuple[list[list[str]], dict[str, int], dict[str, str]]:
    header, lines = read_header(iter(DUMP), "dump.psv")
    return [line.rstrip("\n").split("|") for line in lines], header.index, header.names


def test_rows_the_columns_cannot_take_are_left_to_the_row_reader() -> None:
    """An impossible date, unreadable counts or TRES, an array task: None, for `job_of_fields` to read
    (and name the field); every other row is the SacctJob `job_of_fields` gives."""
    rows, index, names = _rows()
    jobs = jobs_of_columns(rows, index, names)
    assert [j is None for j in jobs] == [False, False, True, True, True, False]
    for row, job in zip(rows, jobs):
        if job is not None:
            low = {name: row[i].strip() for name, i in index.items()}
            assert job == job_of_fields(low, names)
    assert jobs[0] is not None and jobs[0].alloc_tres is not jobs_of_columns(rows, index, names)[0].alloc_tres


@pytest.fixture
def berlin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


STAMPS = [
    "2024-03-31T01:59:59",  # the last second before Berlin's clocks jump
    "2024-03-31T02:30:00",  # inside the jump (a time that never was)
    "2024-03-31T03:00:00",
    "2024-10-27T02:30:00",  # inside the hour Berlin's clocks repeat
    "2024-10-27T03:00:00",
    "2024-10-06T02:15:00",  # Lord Howe Island's clocks jump half an hour at 02:00: inside the jump
    "2024-10-06T02:45:00",  # after it, in the same hour
    "2024-04-07T01:15:00",  # its clocks go back half an hour at 02:00: before the repeated half hour
    "2024-04-07T01:45:00",  # inside it
    "2024-02-29T23:59:59",
    "2023-02-29T00:00:00",  # not a date
    "2024-13-01T00:00:00",
    "2024-01-01T24:00:00",
    "2024-01-01T23:59:60",
    "0000-01-01T00:00:00",
    "1970-01-01T00:00:00",
    "2024-01-01 12:00:00",
    "2024-01-01T12:00:00Z",
    "2024-01-01T12:00:00+05:30",
    "1709294400",
    "0",
    "Unknown",
    "",
    "２０２４-01-01T12:00:00",  # full-width digits
]


@pytest.mark.parametrize(
    "tz", [None, ZoneInfo("America/New_York"), ZoneInfo("UTC"), ZoneInfo("Australia/Lord_Howe")]
)
def test_timestamps_as_one_array_are_those_read_one_by_one(berlin: None, tz: ZoneInfo | None) -> None:
    """In a zone with summer time (this process's, Berlin, or another given; Lord Howe Island's changes
    by half an hour, within an hour), around both changes of the clock, impossible dates and times,
    other notations: the epoch `parse_timestamp_s` gives, and the
    values it refuses marked bad."""
    bad: set[int] = set()
    got = timestamps_s(STAMPS * 3, tz, bad)
    for i, value in enumerate(STAMPS * 3):
        try:
            want = parse_timestamp_s(value, tz)
        except ValueError:
            assert i in bad and got[i] is None, value
            continue
        assert i not in bad and got[i] == want, value
    assert bad
