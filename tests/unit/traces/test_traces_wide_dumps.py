"""Wide `sacct -P` dumps (109 columns) with the delimiter inside JobName, Constraints and SubmitLine,
custom delimiters, and array tasks cancelled while pending."""

from __future__ import annotations

from pathlib import Path

import pytest

from easlurm.errors import TraceError
from easlurm.sim.cluster import ClusterSpec
from easlurm.sim.traces import TraceStats, open_trace
from easlurm.sim.traces.mapping import TraceMapper, map_trace

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "traces"
WIDE = FIX / "sacct_wide_pipes.psv"


def _jobs(path: Path, **kw):  # type: ignore[no-untyped-def]
    stats = TraceStats()
    return {j.job_id: j for j in open_trace(path, stats=stats, **kw)}, stats


def test_pipes_in_jobname_and_constraints_are_placed_by_column_shapes() -> None:
    """`Job| Name003` and `cpu-a|cpu-b|gpu` in one row: every later field stays in its column."""
    jobs, stats = _jobs(WIDE)
    assert len(WIDE.read_text().splitlines()[0].split("|")) == 109
    assert stats.skipped_bad == 0 and stats.steps_folded == 2
    j = jobs["600"]
    assert j.name == "Job| Name003"
    assert (j.user, j.partition, j.state, j.n_gpus, j.gpu_type) == ("alice", "a100", "COMPLETED", 2, "a100")
    assert j.recorded_runtime_s == 3600.0 and j.timelimit_s == 4 * 3600.0
    assert j.start_s is not None and j.start_s - j.submit_s == 5.0
    b = jobs["601"]  # pipes in Constraints and SubmitLine
    assert (b.name, b.user, b.n_gpus, b.gpu_type, b.recorded_runtime_s) == (
        "train-bert-base",
        "bob",
        4,
        "h100",
        7200.0,
    )
    assert jobs["603"].name == "Eval|test" and jobs["603"].recorded_runtime_s == 1800.0


def test_a_row_that_cannot_be_placed_is_refused_with_file_line_and_field() -> None:
    """A `|` in Partition (not free text) shifts shaped columns: one-line error, or skipped and counted."""
    bad = FIX / "sacct_wide_bad.psv"
    with pytest.raises(
        TraceError, match=r"sacct_wide_bad\.psv:3: field Partition holds 1 '\|' \('a100\|h100'\)"
    ):
        list(open_trace(bad))
    jobs, stats = _jobs(bad, skip_bad=True)
    assert sorted(jobs) == ["600", "603"] and stats.skipped_bad == 1
    assert "sacct_wide_bad.psv:3" in stats.bad_examples[0]


def test_custom_delimiter_keeps_pipes_as_text(tmp_path: Path) -> None:
    """A dump made with `sacct --delimiter=^`: split on `^` only, pipes are ordinary characters."""
    text = WIDE.read_text().replace("|", "^")
    # the values that held `|` get it back: they were written with `|` inside free text
    text = text.replace("Job^ Name003", "Job| Name003").replace("cpu-a^cpu-b^gpu", "cpu-a|cpu-b|gpu")
    p = tmp_path / "caret.txt"
    p.write_text(text)
    jobs, stats = _jobs(p, delimiter="^")
    assert jobs["600"].name == "Job| Name003" and jobs["600"].n_gpus == 2
    assert stats.skipped_bad == 0 and len(jobs) == 11
    with pytest.raises(TraceError):
        list(open_trace(p, fmt="sacct"))  # read with `|`, the header has one column


def test_cli_delimiter_option(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from easlurm.cli import cli

    p = tmp_path / "semi.txt"
    p.write_text(WIDE.read_text().replace("|", ";"))
    out = tmp_path / "rep"
    res = CliRunner().invoke(
        cli,
        [
            "sim",
            "replay",
            str(p),
            "--delimiter",
            ";",
            "--policies",
            "zeus",
            "--skip-bad",
            "--no-html",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "replay.json").read_text())
    assert doc["mapping"]["mapped"] == 3


def test_cancelled_pending_array_tasks_are_never_started() -> None:
    """`CANCELLED by N`, Start = End (or None), `None assigned`: not replayed, counted as such."""
    jobs, _ = _jobs(WIDE)
    for t in range(1, 9):
        assert jobs[f"602_{t}"].never_started
    assert not jobs["600"].never_started
    mapper = TraceMapper(ClusterSpec.default(), _oracle())
    mapped = {m.spec.job_id for m in map_trace(jobs.values(), mapper)}
    assert mapped == {"600", "601", "603"}
    assert mapper.stats.excluded["never_started"] == 8 and mapper.stats.cancelled_pending == 8


def _oracle():  # type: ignore[no-untyped-def]
    from easlurm.model.oracle import Oracle

    return Oracle()


def test_captured_held_array_cancelled_while_pending() -> None:
    """Recorded from the local Slurm 22.05 (`sacct -P -o ALL`): an array `-J 'Job| Name003'` held,
    then cancelled. Start = End, NodeList `None assigned`, a `|` in JobName of a 109-column row."""
    path = FIX / "captured_2205_cancelled_pipe.psv"
    jobs, stats = _jobs(path)
    assert stats.skipped_bad == 0 and sorted(jobs) == ["12_1", "12_2", "12_3"]
    for j in jobs.values():
        assert j.name == "Job| Name003" and j.state == "CANCELLED" and j.cancelled_by == "0"
        assert j.start_s == j.end_s and j.allocated is False and j.never_started
        assert (j.n_gpus, j.gpu_type) == (1, "a100")
