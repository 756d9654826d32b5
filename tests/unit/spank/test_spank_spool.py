"""The spool: records and directories no other user can write, symlinks refused, the job lock, stale
job directories moved aside, and the readers that take only step files."""

from __future__ import annotations

import json
from pathlib import Path

from agent_fakes import FakeClient, ctx, run_node
from agent_fakes import spool as spool

from easlurm.accounting.spool import Spool, job_lock, move_aside, read_step_files, spool_records
from easlurm.accounting.step_record import StepRecord


def test_the_spool_names_each_path_of_its_layout() -> None:
    """Spool is the one place that spells the layout the module docstring draws; the files on disk are
    the plugin's, the agents' and the readers' contract, so each name is pinned here."""
    s = Spool(Path("/spool"))
    assert s.job_dir(42) == s.job_dir("42") == Path("/spool/42")
    assert s.step_dir(42, "0+r1") == Path("/spool/42/0+r1")
    assert s.node_file(42, "0", 3) == Path("/spool/42/0/node-3.json")
    assert s.node_run_dir(42, "0", 3) == Path("/spool/42/0/node-3")
    assert s.node_log(42, "0", 3) == Path("/spool/42/0/node-3.log")
    assert s.step_file(42, "batch") == Path("/spool/42/step-batch.json")
    assert s.lock_file(42) == Path("/spool/42/.publish.lock")
    assert s.manifest_file(42) == Path("/spool/42/.published.json")
    assert s.stale_dir(42, 1700000000) == Path("/spool/42.stale-1700000000")
    assert s.stale_dir(42, 1700000000, 2) == Path("/spool/42.stale-1700000000.2")
    assert Spool.of_job_dir(Path("/spool/42")) == (s, "42")
    assert Spool.is_step_file("step-0+r1.json") and not Spool.is_step_file("node-0.json")
    assert Spool.tmp_file(Path("/spool/42/step-0.json")).name.startswith(".step-0.json.")


def test_a_held_lock_keeps_the_record_and_never_publishes_unlocked(spool: Path) -> None:
    """Publishing without the lock could overwrite a newer document with an older one: the agent keeps
    its step file for `easlurm accounting republish` instead."""
    client = FakeClient()
    (spool / "42").mkdir(mode=0o750)
    with job_lock(spool / "42", 1.0) as locked:
        assert locked
        step = run_node(ctx(spool, nnodes=1, late_limit_s=0.3), client)
    assert step is not None and client.published == []
    assert (
        StepRecord.from_dict(json.loads((spool / "42" / "step-0.json").read_text())).to_dict()
        == step.to_dict()
    )


def test_symlinked_job_dir_is_refused(spool: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "victim"
    elsewhere.mkdir()
    (spool / "42").symlink_to(elsewhere)
    run_node(ctx(spool, nnodes=1), FakeClient())
    assert list(elsewhere.iterdir()) == []


def test_records_are_not_writable_by_others(spool: Path) -> None:
    run_node(ctx(spool, nnodes=1), FakeClient())
    for p in (
        spool / "42",
        spool / "42" / "0",
        spool / "42" / "step-0.json",
        spool / "42" / "0" / "node-0.json",
    ):
        assert p.stat().st_mode & 0o022 == 0, p


def test_a_stale_directory_moves_to_the_next_free_name(spool: Path) -> None:
    """`<job>.stale-<time>` taken (the same second): `.1` then, and the readers ignore both."""
    for _ in range(2):
        (spool / "42").mkdir()
        (spool / "42" / "step-0.json").write_text("{}")
        move_aside(spool / "42", now_s=1700000000.0)
    assert sorted(p.name for p in spool.iterdir()) == ["42.stale-1700000000", "42.stale-1700000000.1"]
    assert spool_records(spool, "42") == {} and spool_records(spool, "42.stale-1700000000") == {}


def test_the_job_lock_has_one_holder_and_a_bounded_wait(spool: Path) -> None:
    (spool / "42").mkdir()
    with job_lock(spool / "42", 1.0) as first, job_lock(spool / "42", 0.05) as second:
        assert first and not second
    with job_lock(spool / "gone", 0.05) as locked:  # no job directory: no lock, logged
        assert not locked


def test_only_readable_step_files_are_read(spool: Path) -> None:
    run_node(ctx(spool, nnodes=1, step="0"), FakeClient())
    (spool / "42" / "step-1.json").write_text("not json")
    (spool / "42" / "other.json").write_text("{}")
    files = read_step_files(spool / "42")
    assert list(files) == ["step-0.json"]
    assert list(spool_records(spool, "42")) == ["0"]
