"""Replay of excerpts in the formats of public traces (tests/fixtures/traces/public/README.md):
SWF with unknown waits and an UNKNOWN start header, concatenated sacct dumps with duplicates,
stray fragments, a pipe inside AllocTRES, truncated archives, and a trace too large for its cluster."""

from __future__ import annotations

import gzip
import time
from pathlib import Path
from typing import Any

import pytest

from easlurm.cli import main
from easlurm.errors import TraceError
from easlurm.sim.cluster import ClusterSpec
from easlurm.sim.replay import ReplayRequest, replay
from easlurm.sim.traces import TraceStats, open_trace
from easlurm.sim.traces.mapping import ReplayOptions, TraceMapper, map_trace

PUB = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "public"


def _fake_sim(cluster: Any, jobs: Any, policy: str, **kw: Any) -> dict[str, Any]:
    got = list(jobs)
    rows = [{"submit_s": j.submit_s, "start_s": j.submit_s} for j in got]
    return {"metrics": {"completed_jobs": float(len(got))}, "jobs": rows}


def _oracle() -> Any:
    from easlurm.model.oracle import Oracle

    return Oracle()


def test_swf_unknown_waits_are_jobs_that_ran_and_unknown_start_header_is_relative() -> None:
    """Wait -1 with a run time: the job ran (start unknown); `UnixStartTime: UNKNOWN` keeps times relative."""
    stats = TraceStats()
    jobs = list(open_trace(PUB / "swf_unknown_wait.swf", stats=stats))
    assert len(jobs) == 12 and jobs[0].submit_s == 0.0
    mapper = TraceMapper(ClusterSpec.uniform(2, 8, "a100-40gb"), _oracle())
    mapped = list(map_trace(jobs, mapper, stats))
    # jobs 3 and 8 were cancelled before running (status 5, no run): the other 10 are replayed
    assert len(mapped) == 10 and mapper.stats.excluded == {"never_started": 2}


def test_swf_replay_of_unknown_waits_is_not_empty_and_the_record_is_unknown() -> None:
    res = replay(
        ReplayRequest(
            PUB / "swf_unknown_wait.swf",
            ClusterSpec.uniform(2, 8, "a100-40gb"),
            ["zeus"],
            simulate_fn=_fake_sim,
        )
    )
    assert res.mapping.mapped == 10
    assert res.baseline["metrics"]["completed_jobs"] is None  # no recorded start: unknown, not zero


def test_truncated_gzip_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A cut .gz is an error naming the file, never `aborted` / exit 130."""
    data = (PUB / "swf_unknown_wait.swf").read_bytes() * 40
    packed = gzip.compress(data)
    cut = tmp_path / "log.swf.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(TraceError, match=r"log\.swf\.gz:\d+: gzip archive truncated"):
        list(open_trace(cut))
    rc = main(
        ["sim", "replay", str(cut), "-O", str(tmp_path / "out"), "--policies", "zeus", "--procs-per-gpu", "1"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "gzip archive truncated" in err[0] and "Traceback" not in err[0]


def test_concatenated_monthly_dumps_merge_duplicate_ids() -> None:
    """Job 9002 RUNNING in January's dump and COMPLETED in February's: one job, the completed record."""
    stats = TraceStats()
    mapper = TraceMapper(ClusterSpec.default(), _oracle())
    mapped = list(map_trace(open_trace(PUB / "sacct_concat_months.psv", stats=stats), mapper, stats))
    ids = [m.trace.job_id for m in mapped]
    assert sorted(ids) == ["9001", "9002", "9003", "9010"]
    assert next(m for m in mapped if m.trace.job_id == "9002").trace.state == "COMPLETED"
    assert (
        stats.excluded["duplicate_id"] == 2
        and stats.repeated_headers == 1
        and "repeated_header" not in stats.excluded
    )
    # every job read is accounted for: replayed, or excluded by a counted reason
    assert stats.jobs == len(ids) + stats.excluded["duplicate_id"] + sum(mapper.stats.excluded.values())


def test_max_jobs_counts_the_jobs_read_ahead() -> None:
    stats = TraceStats()
    mapper = TraceMapper(ClusterSpec.default(), _oracle(), ReplayOptions(max_jobs=2))
    mapped = list(map_trace(open_trace(PUB / "sacct_concat_months.psv", stats=stats), mapper, stats))
    assert len(mapped) == 2 and stats.stopped_early
    counted = len(mapped) + sum(mapper.stats.excluded.values()) + stats.excluded["duplicate_id"]
    assert counted + stats.excluded["beyond_max_jobs"] == stats.jobs


def test_stray_fragment_is_reported_alone_and_the_job_before_it_kept() -> None:
    with pytest.raises(
        TraceError, match=r"sacct_stray_fragment\.psv:3: stray fragment of 4 fields .* line 2$"
    ):
        list(open_trace(PUB / "sacct_stray_fragment.psv"))
    stats = TraceStats()
    jobs = list(open_trace(PUB / "sacct_stray_fragment.psv", stats=stats, skip_bad=True))
    assert [j.job_id for j in jobs] == ["9101", "9102"] and stats.skipped_bad == 1


def test_pipe_inside_alloctres_names_the_tres_columns() -> None:
    with pytest.raises(TraceError, match=r"psv:3: field ReqTRES or AllocTRES holds 1 '\|'"):
        list(open_trace(PUB / "sacct_pipe_in_alloctres.psv"))


def _oversized(tmp_path: Path, n: int = 400) -> Path:
    """A Philly-shaped CSV: n jobs of 8 GPUs, all running at once (peak 8n GPUs)."""
    path = tmp_path / "wide.csv"
    rows = ["job_id,submit,start,duration,gpus,user"]
    rows += [f"{i},{1_500_000_000 + i},{1_500_000_000 + i},36000,8,u{i % 7}" for i in range(n)]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_oversized_trace_is_announced_before_any_simulation(tmp_path: Path) -> None:
    """The record's peak against the cluster is said before the first policy run starts."""
    heard: list[tuple[str, str]] = []

    def sim(*args: Any, **kw: Any) -> dict[str, Any]:
        heard.append(("simulate", ""))
        return _fake_sim(*args, **kw)

    t0 = time.perf_counter()
    res = replay(
        ReplayRequest(
            _oversized(tmp_path),
            ClusterSpec.default(),
            ["zeus"],
            simulate_fn=sim,
            on_notice=lambda s: heard.append(("notice", s)),
        )
    )
    assert time.perf_counter() - t0 < 30
    assert heard[0][0] == "notice" and heard[1][0] == "simulate"
    assert "3,200 GPUs at once" in heard[0][1] and "has 16" in heard[0][1] and "3,200 GPUs" in heard[0][1]
    assert res.notices == [heard[0][1]]


def test_without_cluster_the_target_is_sized_like_the_trace(tmp_path: Path) -> None:
    res = replay(ReplayRequest(_oversized(tmp_path, 40), None, ["zeus"], simulate_fn=_fake_sim))
    assert res.cluster_sized and res.cluster_gpus == 320
    assert res.baseline["fit"]["fits"] and "sized like the trace" in res.notices[0]


def test_jain_index_is_unknown_without_a_user_column(tmp_path: Path) -> None:
    path = tmp_path / "nouser.csv"
    path.write_text("submit,start,duration,gpus\n0,0,600,1\n10,10,900,2\n")
    res = replay(ReplayRequest(path, ClusterSpec.default(), ["zeus"], simulate_fn=_fake_sim))
    assert res.baseline["metrics"]["jain_index"] is None
    assert res.run("zeus")["metrics"]["jain_index"] is None


def test_peak_of_a_trace_without_starts_is_estimated_from_submit_and_run_time() -> None:
    """SWF waits all -1: each job counted from its submission for its run time (no wait), and the
    announcement says the target is sized on an estimate."""
    from easlurm.model.build import default_catalogue
    from easlurm.sim.traces import TraceJob
    from easlurm.sim.traces.sizing import measure

    jobs = [
        TraceJob(job_id="1", submit_s=0.0, runtime_s=600.0, n_gpus=4),
        TraceJob(job_id="2", submit_s=300.0, runtime_s=600.0, n_gpus=2),  # overlaps job 1 from 300 s
        TraceJob(job_id="3", submit_s=900.0, runtime_s=60.0, n_gpus=8),  # after job 1 ended: alone
        TraceJob(job_id="4", submit_s=100.0, n_gpus=8),  # no run time: no known run, not counted
    ]
    size = measure(jobs, default_catalogue())
    assert (size.jobs, size.estimated, size.peak_gpus, size.largest_job_gpus) == (3, 3, 8, 8)
    res = replay(
        ReplayRequest(
            PUB / "swf_unknown_wait.swf",
            None,
            ["zeus"],
            simulate_fn=_fake_sim,
            trace_options={"procs_per_gpu": 1},
        )
    )
    assert res.cluster_sized and res.cluster_gpus >= 8
    note = res.notices[0]
    assert "an estimate of the most GPUs its record ran at once" in note
    assert "does not say when 10 of its 10 jobs started" in note and "from its submission" in note


def test_report_of_a_trace_without_starts_says_why_the_recorded_row_is_blank(tmp_path: Path) -> None:
    from easlurm.sim.replay import write_replay_report

    res = replay(
        ReplayRequest(
            PUB / "swf_unknown_wait.swf",
            None,
            ["zeus", "pollux"],
            simulate_fn=_fake_sim,
            trace_options={"procs_per_gpu": 1},
        )
    )
    md = write_replay_report(res, tmp_path / "r", html_too=False).read_text()
    assert "jobs/h (their submit times span 11 min)" in md and "Load (jobs/h)" not in md
    assert "The `recorded` row is blank: the trace does not say when any of its jobs started" in md
    # the fake simulation gives both policies the same outcomes: one row, said to be identical, nothing to test
    assert "zeus = pollux: identical outcomes" in md and "| Policy A |" not in md


def test_a_gzip_bomb_is_refused_while_streaming(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A .gz inflating over 200x its size (a trace compresses 5-20x) stops with one line, before the
    replay spends minutes on it; a real compressed trace still streams."""
    header = (PUB / "swf_unknown_wait.swf").read_bytes()
    bomb = tmp_path / "log.swf.gz"
    bomb.write_bytes(gzip.compress(header + b";" * 400_000_000, 9))
    with pytest.raises(TraceError, match=r"log\.swf\.gz:\d+: gzip archive inflates more than 200x"):
        list(open_trace(bomb))
    fine = tmp_path / "fine.swf.gz"
    fine.write_bytes(gzip.compress(header * 40))
    assert len(list(open_trace(fine))) > 0
    rc = main(
        [
            "sim",
            "replay",
            str(bomb),
            "-O",
            str(tmp_path / "out"),
            "--policies",
            "zeus",
            "--procs-per-gpu",
            "1",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "inflates more than 200x" in err[0]
