"""One time-zone rule for Slurm times: the replay and the energy report read a sacct dump alike."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from easlurm.accounting.report import job_runs
from easlurm.sim.traces.sacct_json import SacctJsonReader
from easlurm.sim.traces.sacct_text import SacctTextReader
from easlurm.slurm.client import parse_sacct_parsable

TRACES = Path(__file__).parents[2] / "fixtures" / "traces"
#: Recorded on the local 22.05 cluster, whose sacct printed UTC (`-P` text and `--json` of the same jobs).
DUMP = TRACES / "captured_2205.psv"
JSON = TRACES / "captured_2205.json"


@pytest.fixture
def new_york(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _report_times() -> dict[str, tuple[float | None, float | None]]:
    lines = DUMP.read_text().splitlines()
    header = lines[0].split("|")
    # the report reads sacct's output with a delimiter no field holds; this dump's SubmitLine spans lines
    whole = [line for line in lines[1:] if line.count("|") == len(header) - 1]
    rows = parse_sacct_parsable("\n".join(whole), header, "|")
    return {r.job_id: (r.start_s, r.end_s) for r in job_runs(rows, {})}


def _replay_times(**kw: object) -> dict[str, tuple[float | None, float | None]]:
    return {j.job_id: (j.start_s, j.end_s) for j in SacctTextReader(DUMP, **kw)}  # type: ignore[arg-type]


def test_replay_and_report_agree_outside_utc(new_york: None) -> None:
    """A timestamp without a zone is read in the process's zone by every reader: the replay and the
    report give the same epoch seconds for the same dump, whatever TZ is."""
    report, replay = _report_times(), _replay_times()
    shared = set(report) & set(replay)  # the replay merges array and het parts into one job
    assert len(shared) >= 5
    assert {k: report[k] for k in shared} == {k: replay[k] for k in shared}


def test_dump_read_in_its_own_zone_matches_json(new_york: None) -> None:
    """The dump was printed in UTC: read with tz=UTC it gives the epochs of `sacct --json` (epochs
    stay epochs), whatever the reading process's zone."""
    text = _replay_times(tz=ZoneInfo("UTC"))
    json_times = {j.job_id: (j.start_s, j.end_s) for j in SacctJsonReader(JSON)}
    shared = set(text) & set(json_times)
    assert shared
    assert {k: text[k] for k in shared} == {k: json_times[k] for k in shared}
    local = _replay_times()
    some = next(iter(shared))
    assert local[some][0] - text[some][0] == 5 * 3600  # New York in November: UTC-5
