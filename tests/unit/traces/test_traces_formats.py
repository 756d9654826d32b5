"""sacct --json (22.05 and a later schema), SWF and CSV readers, streaming and error positions."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from easlurm.errors import TraceError
from easlurm.sim.traces import TraceStats, open_trace
from easlurm.sim.traces.jsonstream import JsonArrayStream

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "traces"


def _jobs(path: Path | str, **kw):
    stats = TraceStats()
    return {j.job_id: j for j in open_trace(path, stats=stats, **kw)}, stats


@pytest.mark.parametrize("name", ["sacct_2205.json", "sacct_2405.json"])
def test_sacct_json_both_schemas_read_the_same_jobs(name: str) -> None:
    jobs, stats = _jobs(FIX / name)
    doc = json.loads((FIX / name).read_text())
    assert stats.rows == len(doc["jobs"])
    assert stats.steps_folded == sum(len(j.get("steps", [])) for j in doc["jobs"])
    assert jobs["21"].n_gpus == 4 and jobs["21"].gpu_type == "a100" and jobs["21"].recorded_runtime_s == 3600
    assert jobs["21"].timelimit_s == 120 * 60
    assert jobs["22"].state == "CANCELLED" and jobs["23"].exit_code == 3
    assert jobs["24_1"].array_task_id == 1 and jobs["24_1"].ran
    assert sorted(k for k in jobs if k.startswith("24_") and not jobs[k].ran) == ["24_2", "24_3", "24_4"]
    assert jobs["26"].het_components == 2 and jobs["26"].n_gpus == 6 and jobs["26"].timelimit_s is None


def test_later_schema_names_what_is_missing() -> None:
    _, old = _jobs(FIX / "sacct_2205.json")
    jobs, new = _jobs(FIX / "sacct_2405.json")
    assert old.missing_fields == set()
    assert new.missing_fields == {"time.limit"}
    assert jobs["23"].timelimit_s is None  # unknown, not 0
    assert jobs["22"].cancelled_by == "bob"


def test_json_job_without_submit_time(tmp_path: Path) -> None:
    doc = json.loads((FIX / "sacct_2205.json").read_text())
    del doc["jobs"][1]["time"]["submission"]
    p = tmp_path / "x.json"
    p.write_text(json.dumps(doc, indent=1))
    lines = p.read_text().splitlines()
    jobs_at = next(i for i, t in enumerate(lines) if t.startswith(' "jobs"'))
    second = [i + 1 for i, t in enumerate(lines) if i > jobs_at and t == "  {"][1]
    with pytest.raises(TraceError, match=rf"x\.json:{second}: field time\.submission"):
        list(open_trace(p))
    jobs, stats = _jobs(p, skip_bad=True)
    assert stats.skipped_bad == 1 and "22" not in jobs and "21" in jobs


def test_truncated_json_is_an_error_with_a_line(tmp_path: Path) -> None:
    text = (FIX / "sacct_2205.json").read_text()
    p = tmp_path / "cut.json"
    p.write_text(text[: len(text) // 2])
    with pytest.raises(TraceError, match=r"cut\.json:\d+: invalid JSON"):
        list(open_trace(p))


def test_json_stream_small_chunks_and_positions() -> None:
    """Elements come one at a time whatever the chunk size, with the line each starts on."""
    doc = {
        "meta": {"pad": list(range(300))},
        "jobs": [{"job_id": i, "big": 12345678901234567} for i in range(40)],
    }
    text = json.dumps(doc, indent=2)
    lines = text.splitlines()
    for chunk in (3, 64, 1 << 20):
        s = JsonArrayStream(io.StringIO(text), "t", chunk_chars=chunk)
        items = list(s)
        assert [o["job_id"] for _, o in items] == list(range(40))
        assert all(o["big"] == 12345678901234567 for _, o in items)
        assert all(lines[n - 1].strip() == "{" for n, _ in items)
        assert s.others["meta"]["pad"][-1] == 299


def test_swf_sample() -> None:
    jobs, stats = _jobs(FIX / "sample.swf")
    assert stats.rows == 6 and len(jobs) == 6
    origin = 1709280000
    j1 = jobs["1"]
    assert j1.submit_s == origin and j1.start_s == origin + 10 and j1.recorded_runtime_s == 3600
    assert j1.n_gpus == 4 and j1.timelimit_s == 7200 and j1.state == "COMPLETED" and j1.user == "1"
    assert jobs["3"].state == "CANCELLED" and not jobs["3"].ran  # run time -1: unknown
    assert jobs["5"].state == "FAILED"
    two, _ = _jobs(FIX / "sample.swf", procs_per_gpu=4)
    assert two["6"].n_gpus == 4 and two["2"].n_gpus == 1  # ceil(procs / procs_per_gpu)


def test_swf_bad_line(tmp_path: Path) -> None:
    p = tmp_path / "b.swf"
    p.write_text(
        "; UnixStartTime: 0\n1 0 1 1 1 -1 -1 1 1 -1 1 1 1 -1 1 1 -1 -1\n2 x 1 1 1 -1 -1 1 1 -1 1 1 1 -1 1 1 -1 -1\n"
    )
    with pytest.raises(TraceError, match=r"b\.swf:3: field submit_time"):
        list(open_trace(p))


def test_minimal_csv() -> None:
    jobs, stats = _jobs(FIX / "minimal.csv")
    assert [jobs[k].recorded_runtime_s for k in sorted(jobs)] == [3600, 600, 86400, 45]
    assert jobs["2"].model == "resnet50" and jobs["1"].model is None
    assert jobs["3"].measured_energy_j == 12e6 and jobs["3"].gpu_type == "h100"
    assert "job_id" in stats.missing_fields


def test_csv_errors(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("submit,duration,gpus\n0,10,1\n5,soon,1\n")
    with pytest.raises(TraceError, match=r"t\.csv:3: field duration"):
        list(open_trace(p))
    q = tmp_path / "h.csv"
    q.write_text("submit,gpus\n0,1\n")
    with pytest.raises(TraceError, match="lacks duration"):
        list(open_trace(q))


def test_gzip_traces_stream(tmp_path: Path) -> None:
    import gzip

    p = tmp_path / "q.psv.gz"
    p.write_bytes(gzip.compress((FIX / "sacct_quirks.psv").read_bytes()))
    jobs, _ = _jobs(p)
    plain, _ = _jobs(FIX / "sacct_quirks.psv")
    assert set(jobs) == set(plain)


def test_captured_pair_from_the_local_cluster_agree() -> None:
    """sacct -P and sacct --json captured from Slurm 22.05.8 after a mixed workload read the same jobs.

    The workload (tests/integration/test_replay_capture.py): 2xA100 job named replay-resnet50, 4xH100,
    an A100 array 0-2, an H100 job cancelled while running, an A100 job exiting 3, a heterogeneous
    job (1 A100 + 2 H100), a job whose SubmitLine holds a newline and a `|`, and a CPU-only job.
    """
    text, _ = _jobs(FIX / "captured_2205.psv")
    js, jstats = _jobs(FIX / "captured_2205.json")
    assert set(text) == set(js) and jstats.missing_fields == set()
    for job_id, t in text.items():
        j = js[job_id]
        assert (t.n_gpus, t.gpu_type, t.partition, t.state) == (j.n_gpus, j.gpu_type, j.partition, j.state)
        assert (t.submit_s, t.start_s, t.end_s, t.timelimit_s) == (
            j.submit_s,
            j.start_s,
            j.end_s,
            j.timelimit_s,
        )
    wide, wstats = _jobs(FIX / "captured_2205_wide.psv")  # sacct --format=<all 109 fields>
    assert set(wide) == set(text) and wstats.skipped_bad == 0
    assert all(wide[k].n_gpus == t.n_gpus and wide[k].end_s == t.end_s for k, t in text.items())
    by_name = {t.name: t for t in text.values()}
    assert by_name["replay-cancel"].state == "CANCELLED" and by_name["replay-cancel"].cancelled_by == "0"
    assert by_name["replay-fail"].state == "FAILED" and by_name["replay-fail"].exit_code == 3
    assert by_name["replay-het"].het_components == 2 and by_name["replay-het"].n_gpus == 3
    assert by_name["replay-multiline"].n_gpus == 1 and by_name["replay-cpu"].n_gpus == 0
    assert sorted(t.array_task_id for t in text.values() if t.name == "replay-arr") == [0, 1, 2]


def test_readers_stream_an_endless_trace() -> None:
    """Readers hold one record at a time: the first jobs of an endless trace come out at once."""
    import itertools

    from easlurm.sim.traces.sacct_text import SacctTextReader

    def lines():
        yield "JobID|Submit|Start|End|AllocTRES\n"
        for i in itertools.count(1):
            yield f"{i}|{i}|{i}|{i + 10}|gres/gpu=1\n"
            yield f"{i}.batch|{i}|{i}|{i + 10}|gres/gpu=1\n"

    first = list(itertools.islice(SacctTextReader("endless")._jobs(lines()), 3))
    assert [j.job_id for j in first] == ["1", "2", "3"]

    class Endless(io.TextIOBase):
        def __init__(self) -> None:
            self.n = 0
            self.buf = '{"meta": {}, "jobs": ['

        def read(self, size: int | None = -1) -> str:
            while len(self.buf) < (size or 1):
                self.n += 1
                self.buf += json.dumps({"job_id": self.n}) + ", "
            out, self.buf = self.buf[:size], self.buf[size:]
            return out

    src = Endless()
    items = list(itertools.islice(JsonArrayStream(src, "endless", chunk_chars=256), 5))
    assert [o["job_id"] for _, o in items] == [1, 2, 3, 4, 5] and src.n < 100


def test_sacct_dumps_with_impossible_times_are_bad_rows(tmp_path: Path) -> None:
    """sacct rows and --json jobs go through the same checks as CSV and SWF rows (sim/traces/sane.py): a
    job that ends before it starts, or in the year 9999, is a bad row (skipped with --skip-bad, else one
    error naming file:line), never replayed."""
    lines = (FIX / "captured_2205.psv").read_text().splitlines()
    header, first = lines[0], lines[1]
    cols = header.split("|")
    row = first.split("|")
    before = list(row)
    before[cols.index("JobID")] = before[cols.index("JobIDRaw")] = "9101"
    before[cols.index("End")] = "2026-11-22T06:30:10"
    late = list(row)
    late[cols.index("JobID")] = late[cols.index("JobIDRaw")] = "9102"
    late[cols.index("End")] = "9999-01-01T00:00:00"
    dump = tmp_path / "bad.psv"
    dump.write_text("\n".join([header, first, "|".join(before), "|".join(late)]) + "\n")
    jobs, stats = _jobs(dump, skip_bad=True)
    assert "9101" not in jobs and "9102" not in jobs and row[0] in jobs
    assert stats.skipped_bad == 2
    with pytest.raises(TraceError, match=r"bad\.psv:3: .*before it starts"):
        _jobs(dump)

    doc = json.loads((FIX / "sacct_2205.json").read_text())
    doc["jobs"][0]["time"]["end"] = doc["jobs"][0]["time"]["start"] - 100
    bad_json = tmp_path / "bad.json"
    bad_json.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match=r"bad\.json:\d+: .*(before it starts|run time: -100)"):
        _jobs(bad_json)
