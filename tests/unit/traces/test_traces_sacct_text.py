"""The sacct -P reader on hand-written quirk fixtures: every case of the issue, and bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from easlurm.errors import TraceError
from easlurm.sim.traces import TraceJob, TraceStats, detect_format, in_submit_order, open_trace

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "traces"


def _read(name: str, **kw) -> tuple[dict[str, TraceJob], TraceStats]:
    stats = TraceStats()
    jobs = list(open_trace(FIX / name, stats=stats, **kw))
    by_id = {j.job_id: j for j in jobs}
    assert len(by_id) == len(jobs), "job ids must be unique"
    return by_id, stats


def test_quirk_fixture_accounts_for_every_row() -> None:
    """Rows are jobs, folded steps, or counted exclusions: nothing disappears."""
    jobs, stats = _read("sacct_quirks.psv")
    lines = (FIX / "sacct_quirks.psv").read_text().splitlines()
    step_rows = sum(1 for line in lines if line.split("|")[0].rsplit(".", 1)[-1] in {"batch", "extern", "0"})
    assert stats.steps_folded == step_rows
    assert stats.repeated_headers == 1 and "repeated_header" not in stats.excluded
    assert stats.skipped_bad == 0
    # 14 allocation rows; the pending array range expands to 7 tasks and the het job's 2 rows merge
    assert len(jobs) == stats.jobs == 14 - 1 + 7 - 1


def test_allocation_row_fields() -> None:
    jobs, _ = _read("sacct_quirks.psv")
    j = jobs["100"]
    assert (j.user, j.partition, j.state, j.n_gpus, j.gpu_type) == ("alice", "a100", "COMPLETED", 4, "a100")
    assert j.recorded_runtime_s == 3600.0 and j.timelimit_s == 7200.0
    assert j.start_s is not None and j.start_s - j.submit_s == 5.0
    assert j.name == "train-resnet50" and j.n_cpus == 12 and j.exit_code == 0


def test_cancelled_by_multi_day_elapsed_and_multiline_submitline() -> None:
    """The SubmitLine of 101 spans three physical lines; its steps and the next job still parse."""
    jobs, _ = _read("sacct_quirks.psv")
    j = jobs["101"]
    assert (j.state, j.cancelled_by) == ("CANCELLED", "1000")
    assert j.recorded_runtime_s == 86400 + 2 * 3600
    assert j.timelimit_s == 3 * 86400
    assert (j.n_gpus, j.gpu_type, j.exit_code) == (8, "h100", 0)
    assert jobs["102_1"].source.endswith(":9")


def test_arrays_and_pending_ranges() -> None:
    jobs, _ = _read("sacct_quirks.psv")
    assert jobs["102_1"].array_job_id == "102" and jobs["102_1"].array_task_id == 1
    assert jobs["102_2"].state == "FAILED" and jobs["102_2"].exit_code == 1
    pending = sorted(
        j.array_task_id or 0 for j in jobs.values() if j.array_job_id == "102" and j.state == "PENDING"
    )
    assert pending == list(range(3, 10))  # `%2` is a throttle, not a step
    assert all(not jobs[f"102_{t}"].ran for t in pending)


def test_heterogeneous_components_merge() -> None:
    jobs, _ = _read("sacct_quirks.psv")
    j = jobs["103"]
    assert j.het_components == 2
    assert j.n_gpus == 2 + 4 and j.gpu_type == "h100"  # the larger component names the type
    assert j.recorded_runtime_s == 30 * 60 + 10  # to the last component's end
    assert not any(k.startswith("103+") for k in jobs)


def test_unknown_none_unlimited_and_pipe_in_submitline() -> None:
    jobs, _ = _read("sacct_quirks.psv")
    assert jobs["104"].start_s is None and jobs["104"].timelimit_s is None
    assert jobs["104"].partition == "h100"  # first of a multi-partition request
    assert jobs["104"].n_gpus == 2 and jobs["104"].gpu_type == "h100"  # from ReqTRES when nothing allocated
    assert jobs["107"].timelimit_s is None and jobs["107"].recorded_runtime_s == 120
    assert jobs["108"].end_s is None and jobs["108"].recorded_runtime_s is None
    assert jobs["110"].cancelled_by == "0" and jobs["110"].start_s is None
    assert jobs["105"].n_gpus == 0 and jobs["109"].n_nodes == 2


def test_malformed_line_stops_with_file_line_and_field() -> None:
    with pytest.raises(TraceError, match=r"sacct_bad\.psv:3: field Submit"):
        list(open_trace(FIX / "sacct_bad.psv"))


def test_skip_bad_counts_every_malformed_record() -> None:
    jobs, stats = _read("sacct_bad.psv", skip_bad=True)
    assert sorted(jobs) == ["200", "205"]
    assert stats.skipped_bad == 4
    messages = "\n".join(stats.bad_examples)
    for expected in (":3: field Submit", ":4: field AllocTRES", ":5: field JobID", ":6: has 6 fields"):
        assert expected in messages


def test_noheader_p_dump_with_given_columns() -> None:
    cols = ["JobID", "User", "Partition", "Submit", "Start", "End", "Elapsed", "AllocTRES", "State"]
    jobs, stats = _read("sacct_p_noheader.txt", fmt="sacct", columns=cols)
    assert sorted(jobs) == ["300", "301"] and stats.steps_folded == 1
    assert jobs["301"].gpu_type == "h100" and jobs["300"].n_gpus == 2


def test_header_without_submit_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "x.psv"
    p.write_text("JobID|State\n1|COMPLETED\n")
    with pytest.raises(TraceError, match="Submit"):
        list(open_trace(p))


def test_wide_dump_any_order(tmp_path: Path) -> None:
    """A 120-column dump in shuffled order reads the same jobs as the narrow one."""
    import random

    narrow = (FIX / "sacct_quirks.psv").read_text().splitlines()
    header = narrow[0].split("|")
    extra = [f"Extra{i}" for i in range(120 - len(header))]
    order = header + extra
    random.Random(7).shuffle(order)
    out = ["|".join(order)]
    for line in narrow[1:]:
        if line.startswith("JobID|"):
            continue
        fields = line.split("|")
        if len(fields) != len(header):
            continue  # the multi-line record and the one with a `|` in SubmitLine stay out of this copy
        row = dict(zip(header, fields))
        out.append("|".join(row.get(c, f"v{i}") for i, c in enumerate(order)))
    p = tmp_path / "wide.sacct"
    p.write_text("\n".join(out) + "\n")
    wide, _ = _read(str(p))
    narrow_jobs, _ = _read("sacct_quirks.psv")
    assert set(wide) == set(narrow_jobs) - {"101", "107"}
    assert wide["103"].n_gpus == narrow_jobs["103"].n_gpus


def test_format_detection() -> None:
    assert detect_format(FIX / "sacct_quirks.psv") == "sacct"
    assert detect_format(FIX / "sacct_2205.json") == "sacct-json"
    assert detect_format(FIX / "sample.swf") == "swf"
    assert detect_format(FIX / "minimal.csv") == "csv"
    assert detect_format(FIX / "sacct_p_noheader.txt") == "sacct"


def test_submit_order_is_restored_within_the_window() -> None:
    jobs = [TraceJob(job_id=str(i), submit_s=float(s)) for i, s in enumerate([5, 1, 4, 2, 3, 0])]
    stats = TraceStats()
    out = [j.submit_s for j in in_submit_order(jobs, window=10, stats=stats)]
    assert out == sorted(out) and stats.reordered == 0
    late = [j.submit_s for j in in_submit_order(jobs, window=1, stats=stats)]
    assert len(late) == len(jobs) and stats.reordered > 0  # moved and counted, never dropped
