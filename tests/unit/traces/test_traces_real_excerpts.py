"""Replay of excerpts of real public traces (tests/fixtures/traces/public/README.md gives their
provenance): the Alibaba GPU trace (cluster-trace-gpu-v2023), converted by
scripts/convert-alibaba-gpu-trace; the Philly trace as processed by DIR-LAB/Gen-Parallel-Workloads,
converted to SWF by scripts/convert-philly-gen-workloads; the Alibaba GPU-disaggregated DLRM serving trace
(cluster-trace-gpu-v2025), converted by scripts/convert-alibaba-dlrm-trace; and an anonymised UB CCR
`sacct -P` dump."""

from __future__ import annotations

import csv
import io
import json
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from easlurm.cli import main
from easlurm.sim.traces import TraceStats, open_trace

ROOT = Path(__file__).resolve().parents[3]
PUB = ROOT / "tests" / "fixtures" / "traces" / "public"
ALIBABA = PUB / "alibaba_gpu_v2023_openb_pod_list_gpuspec10_head64.csv"
UBCCR = PUB / "ubccr_sacct_dump2101_head11.psv"
CONVERT = ROOT / "scripts" / "convert-alibaba-gpu-trace"
PHILLY = PUB / "philly_gen_parallel_workloads_training_head100.csv"
CONVERT_PHILLY = ROOT / "scripts" / "convert-philly-gen-workloads"
DLRM = PUB / "alibaba_gpu_v2025_dlrm_hn_first48h.csv"
CONVERT_DLRM = ROOT / "scripts" / "convert-alibaba-dlrm-trace"


def _convert(tmp_path: Path) -> tuple[Path, tuple[int, int], str]:
    """The Alibaba excerpt in easlurm's CSV format (in-process), with (written, unscheduled) and stderr."""
    convert = runpy.run_path(str(CONVERT), run_name="convert_alibaba_gpu_trace")["convert"]
    out, err = tmp_path / "alibaba.csv", io.StringIO()
    with ALIBABA.open(newline="") as src, out.open("w", newline="") as dst:
        counts = convert(src, dst, err)
    return out, counts, err.getvalue()


def _summary(out: Path) -> dict[tuple[str, str], str]:
    with (out / "summary.csv").open(newline="") as fh:
        return {(r["label"], r["metric"]): r["mean"] for r in csv.DictReader(fh)}


def test_alibaba_excerpt_is_the_pod_list_header_and_its_first_64_pods() -> None:
    with ALIBABA.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == [
        "name",
        "cpu_milli",
        "memory_mib",
        "num_gpu",
        "gpu_milli",
        "gpu_spec",
        "qos",
        "pod_phase",
        "creation_time",
        "deletion_time",
        "scheduled_time",
    ]
    assert [r["name"] for r in rows] == [f"openb-pod-{i:04d}" for i in range(64)]
    pending = [r["name"] for r in rows if not r["scheduled_time"]]
    assert pending == ["openb-pod-0061"] and rows[61]["pod_phase"] == "Pending"


def test_alibaba_conversion_maps_times_gpus_and_types(tmp_path: Path) -> None:
    """creation/scheduled/deletion -> submit/start/end; num_gpu -> gpus (a shared GPU is a whole
    one); the first type of gpu_spec -> gpu_type, V100M16/V100M32 renamed v100."""
    path, counts, err = _convert(tmp_path)
    assert counts == (63, 1) and "63 pods written, 1 never scheduled left out" in err
    stats = TraceStats()
    jobs = {j.job_id: j for j in open_trace(path, stats=stats)}
    assert len(jobs) == 63 and stats.jobs == 63 and "openb-pod-0061" not in jobs

    p12 = jobs["openb-pod-0012"]  # waited 7338 s: created 6588193, scheduled 6595531, deleted 10959245
    assert (p12.submit_s, p12.start_s, p12.end_s, p12.runtime_s) == (6588193, 6595531, 10959245, 4363714)
    p17 = jobs["openb-pod-0017"]  # the 8-GPU Burstable pod on G2
    assert (p17.n_gpus, p17.gpu_type, p17.runtime_s) == (8, "G2", 10769854 - 9437497)
    p31 = jobs["openb-pod-0031"]  # gpu_spec V100M16|V100M32|V100M32
    assert (p31.n_gpus, p31.gpu_type, p31.start_s, p31.runtime_s) == (1, "v100", 9961304, 33053)
    assert jobs["openb-pod-0022"].n_gpus == 1  # gpu_milli 220: a GPU-sharing pod holds one GPU
    assert jobs["openb-pod-0040"].gpu_type == "P100" and jobs["openb-pod-0000"].gpu_type is None
    assert jobs["openb-pod-0000"].runtime_s == 12537496  # LS service alive from the trace's start

    cpu_only = sorted(k for k, j in jobs.items() if j.n_gpus == 0)
    assert cpu_only == [f"openb-pod-{i:04d}" for i in (5, 16, 48, 49, 50, 60)]
    assert sum(j.n_gpus for j in jobs.values()) == 56 + 8
    types: dict[str | None, int] = {}
    for j in jobs.values():
        types[j.gpu_type] = types.get(j.gpu_type, 0) + 1
    assert types == {None: 51, "T4": 5, "G2": 4, "v100": 2, "P100": 1}


def test_alibaba_converter_runs_as_a_command(tmp_path: Path) -> None:
    out = tmp_path / "cli.csv"
    proc = subprocess.run(
        [sys.executable, str(CONVERT), str(ALIBABA), "-o", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "63 pods written, 1 never scheduled left out" in proc.stderr
    assert (
        out.read_text().splitlines()[0]
        == "job_id,submit,start,duration,gpus,gpu_type,gpu_milli,gpu_spec,qos,pod_phase"
    )
    assert out.read_bytes() == _convert(tmp_path)[0].read_bytes()


def test_alibaba_excerpt_replays_recorded_against_a_policy(tmp_path: Path) -> None:
    """`easlurm sim replay` on the converted excerpt: the record and zeus, 57 GPU pods each."""
    conv = _convert(tmp_path)[0]
    out = tmp_path / "out"
    rc = main(["sim", "replay", str(conv), "-O", str(out), "--policies", "zeus", "--no-html"])
    assert rc == 0
    summary = _summary(out)
    assert {label for label, _ in summary} == {"recorded", "zeus"}
    assert float(summary[("recorded", "completed_jobs")]) == 57.0
    assert float(summary[("zeus", "completed_jobs")]) == 57.0
    # waits of the 57 GPU pods (scheduled - creation) add up to 8379 s: 147 s on average
    assert float(summary[("recorded", "mean_wait_s")]) == pytest.approx(8379 / 57)
    assert float(summary[("recorded", "makespan_s")]) == 12902960.0  # the trace's end
    mapping: dict[str, Any] = json.loads((out / "replay.json").read_text())["mapping"]
    assert mapping["mapped"] == 57 and mapping["excluded"] == {"cpu_only": 6}


def test_ubccr_sacct_excerpt_reads_jobs_steps_and_times() -> None:
    stats = TraceStats()
    jobs = {j.job_id: j for j in open_trace(UBCCR, stats=stats)}
    assert stats.rows == 10 and stats.jobs == 8 and stats.steps_folded == 2 and stats.skipped_bad == 0
    assert sorted(j.state for j in jobs.values()) == ["CANCELLED"] * 6 + ["COMPLETED", "TIMEOUT"]
    done = jobs["4822203"]  # submit 2020-12-28T16:47:17, start 2020-12-30T18:31:11, end 2021-01-01T06:20:01
    assert done.runtime_s == 128930 and done.start_s is not None and done.end_s is not None
    assert (done.start_s - done.submit_s, done.end_s - done.start_s) == (179034, 128930)
    assert (done.user, done.partition, done.n_gpus) == ("user004", "general-compute", 0)
    assert jobs["4830973"].runtime_s == 259222 and jobs["4744528_255"].runtime_s == 0


def test_ubccr_sacct_excerpt_replay_says_why_nothing_is_replayed(tmp_path: Path) -> None:
    """UB CCR's general-compute partition has no GPUs: every job is counted `cpu_only`."""
    out = tmp_path / "out"
    assert main(["sim", "replay", str(UBCCR), "-O", str(out), "--policies", "zeus", "--no-html"]) == 0
    mapping = json.loads((out / "replay.json").read_text())["mapping"]
    assert mapping["mapped"] == 0 and mapping["excluded"] == {"cpu_only": 8}
    report = (out / "report.md").read_text()
    assert "No job of the trace was replayed" in report and "| cpu_only | 8 |" in report


def _convert_philly(tmp_path: Path, src_text: str | None = None) -> tuple[Path, tuple[int, int], str]:
    """The Philly excerpt (or `src_text`) in SWF (in-process), with (written, multi-node) and stderr."""
    convert = runpy.run_path(str(CONVERT_PHILLY), run_name="convert_philly_gen_workloads")["convert"]
    out, err = tmp_path / "philly.swf", io.StringIO()
    src = io.StringIO(src_text) if src_text is not None else PHILLY.open(newline="")
    with src, out.open("w") as dst:
        counts = convert(src, dst, err)
    return out, counts, err.getvalue()


def test_philly_excerpt_is_the_table_header_and_its_first_100_jobs() -> None:
    with PHILLY.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == [
        "u_id",
        "user",
        "gpu_num",
        "cpu_num",
        "node_num",
        "interval",
        "run_time",
        "wall_time",
        "new_status",
    ]
    assert sorted(int(r["u_id"]) for r in rows) == list(range(100))  # jobs 0-99, in submission order
    assert {r["wall_time"] for r in rows} == {"0"} and {r["cpu_num"] for r in rows} == {"0"}  # not recorded
    assert {r["new_status"] for r in rows} == {"Pass", "Failed", "Killed"}


def test_philly_conversion_maps_arrivals_gpus_runs_and_status(tmp_path: Path) -> None:
    """interval -> submit (running sum), wait unknown (-1), run_time -> run, gpu_num -> processors
    (one per GPU), Pass/Failed/Killed -> SWF status 1/0/5."""
    path, counts, err = _convert_philly(tmp_path)
    assert counts == (100, 1) and "100 jobs written (1 on more than one node" in err
    stats = TraceStats()
    jobs = {j.job_id: j for j in open_trace(path, stats=stats)}
    assert len(jobs) == 100 and stats.jobs == 100 and stats.skipped_bad == 0

    first = jobs["1"]  # u_id 0: 1 GPU, Killed after 1389243 s
    assert (first.submit_s, first.runtime_s, first.n_gpus, first.state) == (0, 1389243, 1, "CANCELLED")
    assert first.start_s is None and first.start_unknown
    second = jobs["2"]  # u_id 1: 8 GPUs on 4 nodes, 395146 s after the first
    assert (second.submit_s, second.n_gpus, second.state, second.user) == (395146, 8, "FAILED", "2")
    pass_8 = jobs["72"]  # u_id 74, the first Pass: 8 GPUs, 184437 s after the previous group
    assert (pass_8.n_gpus, pass_8.state, pass_8.runtime_s) == (8, "COMPLETED", 2238233)
    last = jobs["100"]  # u_id 99: the intervals sum to 2679112 s
    assert (last.submit_s, last.runtime_s, last.state) == (2679112, 610500, "COMPLETED")
    assert all(j.start_unknown for j in jobs.values())
    assert sorted({j.n_gpus for j in jobs.values()}) == [1, 2, 4, 8]
    assert "Philly" in path.read_text().splitlines()[1]


def test_philly_converter_rejects_bad_input_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    text = PHILLY.read_text().replace("0,1,1,0,1,0,1389243,0,Killed", "0,1,1,0,1,0,1389243,0,Running")
    bad.write_text(text)
    out = tmp_path / "bad.swf"
    proc = subprocess.run(
        [sys.executable, str(CONVERT_PHILLY), str(bad), "-o", str(out)], capture_output=True, text=True
    )
    assert proc.returncode == 2 and not out.exists()
    assert proc.stderr.strip() == (
        f"convert-philly-gen-workloads: {bad}: line 2: field new_status: 'Running' is not Pass, Failed or Killed"
    )
    with pytest.raises(ValueError, match="lacks column"):
        _convert_philly(tmp_path, "u_id,user\n0,1\n")


def test_philly_converter_runs_as_a_command(tmp_path: Path) -> None:
    out = tmp_path / "cli.swf"
    proc = subprocess.run(
        [sys.executable, str(CONVERT_PHILLY), str(PHILLY), "-o", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "100 jobs written" in proc.stderr
    assert out.read_bytes() == _convert_philly(tmp_path)[0].read_bytes()


def test_philly_excerpt_replays_with_limits_against_pollux(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`easlurm sim replay --compare-limits` on the converted excerpt: every start unknown, so the
    record's row is blank; zeus's limits save energy against pollux, and zeus without limits is pollux
    within what their different spread rules move."""
    swf = _convert_philly(tmp_path)[0]
    out = tmp_path / "out"
    argv = ["sim", "replay", str(swf), "-O", str(out), "--policies", "pollux,zeus", "--compare-limits"]
    assert main([*argv, "--no-html"]) == 0
    summary = _summary(out)
    assert {label for label, _ in summary} == {"recorded", "pollux", "zeus", "zeus+nolimit"}
    assert summary[("recorded", "energy_per_job_j")] == ""
    assert float(summary[("zeus", "completed_jobs")]) == 100.0
    pollux, zeus = (float(summary[(p, "energy_per_job_j")]) for p in ("pollux", "zeus"))
    assert zeus < 0.95 * pollux
    # without limits zeus places as pollux but for spread placements: pollux spreads a job no node holds,
    # zeus waits for a node when spreading costs (docs/oracle-comm.md); when it may always spread, it is pollux
    assert float(summary[("zeus+nolimit", "energy_per_job_j")]) == pytest.approx(pollux, rel=0.02)
    doc: dict[str, Any] = json.loads((out / "replay.json").read_text())
    assert doc["mapping"]["mapped"] == 100 and doc["mapping"]["excluded"] == {}
    report = (out / "report.md").read_text()
    assert "the trace does not say when any of its jobs started (SWF wait -1)" in report
    import easlurm.priority.packing as packing

    monkeypatch.setattr(packing, "SPREAD_SLACK_EDP", float("inf"))
    free = tmp_path / "free"
    assert main([*argv[:3], "-O", str(free), *argv[5:], "--no-html"]) == 0
    spread = _summary(free)
    # identical runs: one row, "pollux = zeus+nolimit"
    assert ("zeus+nolimit", "energy_per_job_j") not in spread
    assert spread[("pollux = zeus+nolimit", "energy_per_job_j")] == summary[("pollux", "energy_per_job_j")]


def _convert_dlrm(tmp_path: Path, src_text: str | None = None) -> tuple[Path, tuple[int, int, int], str]:
    """The DLRM excerpt (or `src_text`) in easlurm's CSV (in-process), with (written, created before the
    trace, deleted after it) and stderr."""
    convert = runpy.run_path(str(CONVERT_DLRM), run_name="convert_alibaba_dlrm_trace")["convert"]
    out, err = tmp_path / "dlrm.csv", io.StringIO()
    src = io.StringIO(src_text) if src_text is not None else DLRM.open(newline="")
    with src, out.open("w", newline="") as dst:
        counts = convert(src, dst, err)
    return out, counts, err.getvalue()


def test_dlrm_excerpt_is_the_gpu_instances_created_in_the_first_48_hours() -> None:
    with DLRM.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0])[:3] == ["instance_sn", "role", "app_name"]
    assert list(rows[0])[-3:] == ["creation_time", "scheduled_time", "deletion_time"]
    assert (
        len(rows) == 83 and {r["role"] for r in rows} == {"HN"} and {r["gpu_request"] for r in rows} == {"1"}
    )
    assert all(float(r["creation_time"]) < 172800 for r in rows)
    numbers = [int(r["instance_sn"].removeprefix("instance_")) for r in rows]
    assert numbers == sorted(numbers) and (numbers[0], numbers[-1]) == (7300, 7912)  # the trace's order
    assert sum(not r["deletion_time"] for r in rows) == 13  # still serving at the trace's end


def test_dlrm_conversion_maps_times_and_gpus_and_leaves_out_unknown_times(tmp_path: Path) -> None:
    """creation/scheduled/deletion (rounded: the trace writes 16311.000000000002) -> submit/start/end;
    gpu_request -> gpus; no GPU type; an instance deleted after the trace's end is left out."""
    path, counts, err = _convert_dlrm(tmp_path)
    assert counts == (70, 0, 13)
    assert (
        "70 instances written; left out: 0 created before the trace's start, 13 deleted after its end" in err
    )
    stats = TraceStats()
    jobs = {j.job_id: j for j in open_trace(path, stats=stats)}
    assert len(jobs) == 70 and stats.jobs == 70 and stats.skipped_bad == 0
    i7308 = jobs["instance_7308"]  # created 4823.0, scheduled 4824.0, deleted 16311.000000000002
    assert (i7308.submit_s, i7308.start_s, i7308.end_s, i7308.runtime_s) == (4823, 4824, 16311, 11487)
    assert (i7308.n_gpus, i7308.gpu_type) == (1, None)
    assert jobs["instance_7300"].submit_s == 3973  # 3973.0000000000005
    assert jobs["instance_7507"].runtime_s == 1788927 - 55657  # the longest: 20 days
    assert "instance_7503" not in jobs  # no deletion_time: serving past the trace's end
    assert {j.n_gpus for j in jobs.values()} == {1}


def test_dlrm_converter_leaves_out_instances_from_before_the_trace_and_rejects_bad_times(
    tmp_path: Path,
) -> None:
    header = DLRM.read_text().splitlines()[0]
    before = "instance_0,HN,app_0,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,,,"
    cpu = "instance_9,CN,app_1,64,64,0,0,1,1,320.0,320.0,255.0,300.0,-1,10.0,10.0,70.0"
    path, counts, err = _convert_dlrm(tmp_path, f"{header}\n{before}\n{cpu}\n")
    assert counts == (1, 1, 0) and "1 created before the trace's start" in err
    assert path.read_text().splitlines()[1] == "instance_9,10,10,60,0,,CN,app_1"  # replay: cpu_only
    bad = tmp_path / "bad.csv"
    bad.write_text(f"{header}\n{cpu.replace(',70.0', ',soon')}\n")
    out = tmp_path / "bad-out.csv"
    proc = subprocess.run(
        [sys.executable, str(CONVERT_DLRM), str(bad), "-o", str(out)], capture_output=True, text=True
    )
    assert proc.returncode == 2 and not out.exists()
    assert proc.stderr.strip() == (
        f"convert-alibaba-dlrm-trace: {bad}: line 2: field deletion_time: 'soon' is not a number of seconds"
    )
    with pytest.raises(ValueError, match="lacks column"):
        _convert_dlrm(tmp_path, "instance_sn,role\ni,HN\n")


def test_dlrm_converter_runs_as_a_command(tmp_path: Path) -> None:
    out = tmp_path / "cli.csv"
    proc = subprocess.run(
        [sys.executable, str(CONVERT_DLRM), str(DLRM), "-o", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "70 instances written" in proc.stderr
    assert out.read_text().splitlines()[0] == "job_id,submit,start,duration,gpus,gpu_type,role,app_name"
    assert out.read_bytes() == _convert_dlrm(tmp_path)[0].read_bytes()


def test_dlrm_excerpt_replays_recorded_against_a_policy(tmp_path: Path) -> None:
    """`easlurm sim replay` on the converted excerpt: the record and zeus, 70 one-GPU instances each."""
    conv = _convert_dlrm(tmp_path)[0]
    out = tmp_path / "out"
    assert main(["sim", "replay", str(conv), "-O", str(out), "--policies", "zeus", "--no-html"]) == 0
    summary = _summary(out)
    assert {label for label, _ in summary} == {"recorded", "zeus"}
    assert float(summary[("recorded", "completed_jobs")]) == 70.0
    assert float(summary[("zeus", "completed_jobs")]) == 70.0
    # waits (scheduled - creation) add up to 15468 s
    assert float(summary[("recorded", "mean_wait_s")]) == pytest.approx(15468 / 70)
    assert float(summary[("recorded", "makespan_s")]) == 1788927 - 3973  # first creation to last deletion
    doc: dict[str, Any] = json.loads((out / "replay.json").read_text())
    assert doc["mapping"]["mapped"] == 70 and doc["mapping"]["excluded"] == {}
    assert doc["mapping"]["gpu_type_guessed"] == 70  # the trace names no GPU type
