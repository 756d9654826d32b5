"""Replays whose numbers look like results and are not: a CPU log read as GPUs, repeated headers counted
as jobs, identical rows ranked apart, a flat Pareto axis, and a saving shown without its uncertainty."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from easlurm.errors import ConfigError
from easlurm.sim.cluster import ClusterSpec
from easlurm.sim.replay import ReplayRequest, replay, write_replay_report
from easlurm.sim.traces import TraceStats
from easlurm.sim.traces.reader import open_trace

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "traces"
#: A CPU log of the archive's kind: a 128-processor machine on 2 nodes, two 128-processor jobs whose waits
#: are unknown and whose runs overlap if they never waited (an estimated peak of 256 processors).
CPU_SWF = """\
; Version: 2.2
; Computer: a CPU machine
; MaxNodes: 2
; MaxProcs: 128
; UnixStartTime: UNKNOWN
1 0 -1 3600 128 -1 -1 128 7200 -1 1 1 1 -1 1 1 -1 -1
2 60 -1 3600 128 -1 -1 128 7200 -1 1 2 1 -1 1 1 -1 -1
3 120 -1 600 16 -1 -1 16 7200 -1 1 3 1 -1 1 1 -1 -1
"""


def _fake_sim(cluster: Any, jobs: Any, policy: Any, **kw: Any) -> dict[str, Any]:
    """Every job starts at submit; its energy is 1 kJ."""
    got = list(jobs)
    rows = [
        {
            "job_id": j.job_id,
            "submit_s": j.submit_s,
            "start_s": j.submit_s,
            "end_s": j.submit_s + 60.0,
            "energy_j": 1e3,
        }
        for j in got
    ]
    busy = 1e3 * len(got)
    end = max((r["end_s"] for r in rows), default=0.0)
    metrics = {
        "completed_jobs": float(len(got)),
        "energy_j": busy,
        "busy_energy_j": busy,
        "idle_energy_j": 0.0,
    }
    return {"metrics": {**metrics, "simulated_s": end}, "jobs": rows}


def _cpu_log(tmp_path: Path) -> Path:
    p = tmp_path / "cpu.swf"
    p.write_text(CPU_SWF)
    return p


def test_a_cpu_swf_log_is_refused_without_procs_per_gpu_or_cluster(tmp_path: Path) -> None:
    """A log that counts processors and says nothing of GPUs is not silently a GPU cluster."""
    with pytest.raises(
        ConfigError, match=r"cpu\.swf: an SWF log counts processors.*--procs-per-gpu N.*--cluster"
    ):
        replay(ReplayRequest(_cpu_log(tmp_path), None, ["zeus"], simulate_fn=_fake_sim))


def test_the_sized_cluster_stays_within_the_headers_max_procs(tmp_path: Path) -> None:
    """The estimated peak (256 processors) is twice MaxProcs: the cluster holds the machine's 128 GPUs, not 256."""
    res = replay(
        ReplayRequest(
            _cpu_log(tmp_path), None, ["zeus"], simulate_fn=_fake_sim, trace_options={"procs_per_gpu": 1}
        )
    )
    assert res.cluster_sized and res.cluster_gpus == 128
    assert "MaxProcs 128 = 128 GPUs on MaxNodes 2" in res.notices[0]
    four = replay(
        ReplayRequest(
            _cpu_log(tmp_path), None, ["zeus"], simulate_fn=_fake_sim, trace_options={"procs_per_gpu": 4}
        )
    )
    assert four.cluster_gpus == 32  # 128 processors at 4 per GPU


def test_the_report_says_what_was_assumed(tmp_path: Path) -> None:
    """Processors per GPU and who said so, where the cluster came from, and that the workload is assumed."""
    res = replay(
        ReplayRequest(
            _cpu_log(tmp_path),
            ClusterSpec.uniform(2, 8, "a100-40gb"),
            ["zeus"],
            simulate_fn=_fake_sim,
            cluster_source="--cluster c.yaml",
        )
    )
    md = write_replay_report(res, tmp_path / "out", html_too=False).read_text()
    assert "Assumed: cluster: " in md and "from --cluster c.yaml" in md
    assert "1 processor per GPU (the default with --cluster" in md and "assumed workload" in md
    sized = replay(
        ReplayRequest(
            _cpu_log(tmp_path), None, ["zeus"], simulate_fn=_fake_sim, trace_options={"procs_per_gpu": 2}
        )
    )
    assert any("2 processors per GPU (--procs-per-gpu)" in a for a in sized.assumptions)
    assert any("sized like the trace's own record" in a for a in sized.assumptions)


def test_a_procs_per_gpu_header_is_gpu_information(tmp_path: Path) -> None:
    """easlurm's converters write `; ProcsPerGPU:`: such a log replays without the option."""
    p = tmp_path / "gpu.swf"
    p.write_text(CPU_SWF.replace("; MaxNodes: 2\n", "; MaxNodes: 2\n; ProcsPerGPU: 16\n"))
    jobs = list(open_trace(p))
    assert [j.n_gpus for j in jobs] == [8, 8, 1]
    res = replay(ReplayRequest(p, None, ["zeus"], simulate_fn=_fake_sim))
    assert res.cluster_gpus == 8 and any("the log's ProcsPerGPU header" in a for a in res.assumptions)


def test_a_repeated_csv_header_is_neither_a_job_nor_a_bad_record(tmp_path: Path) -> None:
    """Two CSV files concatenated: the second header is skipped and counted apart."""
    one = (FIX / "minimal.csv").read_text()
    both = tmp_path / "both.csv"
    both.write_text(one + "\n".join(line for line in one.splitlines() if not line.startswith("#")) + "\n")
    stats = TraceStats()
    jobs = list(open_trace(both, stats=stats))
    single = list(open_trace(FIX / "minimal.csv"))
    assert len(jobs) == 2 * len(single) == stats.jobs == stats.rows
    assert stats.repeated_headers == 1 and stats.skipped_bad == 0 and not stats.excluded


def test_a_repeated_sacct_header_is_not_reported_as_a_job_not_replayed(tmp_path: Path) -> None:
    """The concatenated monthly dumps: the report's "Not replayed" table has no header row in it."""
    res = replay(
        ReplayRequest(
            FIX / "public" / "sacct_concat_months.psv", ClusterSpec.default(), ["zeus"], simulate_fn=_fake_sim
        )
    )
    assert res.trace_stats.repeated_headers == 1 and "repeated_header" not in res.trace_stats.excluded
    md = write_replay_report(res, tmp_path / "out", html_too=False).read_text()
    assert "repeated_header |" not in md
    assert "1 repeated header lines (concatenated dumps) skipped" in md


def test_pareto_axes_do_not_spread_a_difference_below_the_noise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0.0002 jobs/h between two policies at 10 jobs/h: the axis spans at least +-2 %, so the points sit
    together instead of at its two ends."""
    pytest.importorskip("matplotlib")
    from easlurm import plots
    from easlurm.stats import MetricSummary

    def s(label: str, metric: str, mean: float) -> MetricSummary:
        return MetricSummary(("replay", "t", None, label), metric, 1, mean, None, None, None)

    saved: list[Any] = []
    monkeypatch.setattr(plots, "_save", lambda fig, out: saved.append(fig) or out)
    plots.plot_pareto(
        [s("zeus", "throughput_jobs_per_h", 10.0), s("pollux", "throughput_jobs_per_h", 10.0002)],
        [s("zeus", "energy_j", 5e9), s("pollux", "energy_j", 5.0001e9)],
        tmp_path / "p.png",
        "t",
    )
    ax = saved[0].axes[0]
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    assert x1 - x0 >= 0.04 * 10.0 and y1 - y0 >= 0.04 * 5000.0
    assert plots.axis_limits(0.0, 0.0) == (-1.0, 1.0)
    lo, hi = plots.axis_limits(1.0, 3.0)  # a real spread keeps its own span (5 % margin)
    assert lo == pytest.approx(0.95) and hi == pytest.approx(3.05)


def test_a_saving_on_one_job_is_no_difference(tmp_path: Path) -> None:
    """The issue's "Saved per job: 32.63 J" on a one-job trace: too few jobs for an interval, so no result."""
    trace = tmp_path / "one.csv"
    trace.write_text("job_id,submit,start,duration,gpus,gpu_type,model\nj1,0,0,3600,1,a100,resnet50\n")
    res = replay(
        ReplayRequest(trace, ClusterSpec.uniform(1, 8, "a100-40gb"), ["zeus"], simulate_fn=_fake_sim)
    )
    (row,) = res.savings_per_job()
    assert row["total_j"] is not None and row["jobs_paired"] == 1 and row["verdict"] == "too few jobs"
    md = write_replay_report(res, tmp_path / "out", html_too=False).read_text()
    assert "| zeus | no difference (1 job: too few for an interval) |" in md


def test_a_saving_is_shown_with_its_interval_and_only_when_it_excludes_zero() -> None:
    """Paired per-job differences, resampled: a clear saving has an interval above zero; noise around the
    record holds zero and is "no difference"."""
    import numpy as np

    from easlurm.sim.replay_savings import JobEnergies, intervals

    rng = np.random.default_rng(1)
    energies = JobEnergies({f"j{i}": 1000.0 + 10.0 * i for i in range(40)})
    energies.add("zeus", [{"job_id": f"j{i}", "energy_j": 0.8 * (1000.0 + 10.0 * i)} for i in range(40)])
    for _seed in range(2):  # two seeds of noise around the record: their mean is paired
        noisy = 1000.0 + 10.0 * np.arange(40) + rng.normal(0.0, 50.0, 40)
        energies.add("pollux", [{"job_id": f"j{i}", "energy_j": float(e)} for i, e in enumerate(noisy)])
    energies.add("pollux", [{"job_id": "not-in-record", "energy_j": 1.0}])
    rows = [{"label": "zeus", "total_j": 250.0}, {"label": "pollux", "total_j": 3.0}]
    zeus, pollux = intervals(energies, rows)
    assert zeus.verdict == "saves" and zeus.jobs == 40 and zeus.low_j is not None and zeus.low_j > 0
    assert zeus.low_j <= zeus.saved_j <= (zeus.high_j or 0.0)  # the interval is around the row's own figure
    assert pollux.verdict == "no difference" and pollux.jobs == 40
    from easlurm.sim.replay_window import _saved_cell

    assert _saved_cell({**rows[1], **pollux.to_dict()}).startswith("no difference (3.00J, 95% interval [")
    assert _saved_cell({**rows[0], **zeus.to_dict()}).startswith("250.00J [")


def test_identical_rows_are_merged_and_explained(tmp_path: Path) -> None:
    """zeus and charon without a budget give every job the same start, end and energy: one row
    "zeus = charon", said to be identical and why; pollux, whose jobs use more energy here, stays apart."""

    def sim(cluster: Any, jobs: Any, policy: Any, **kw: Any) -> dict[str, Any]:
        out = _fake_sim(cluster, jobs, policy, **kw)
        if policy == "pollux":
            for row in out["jobs"]:
                row["energy_j"] = 2e3
            out["metrics"]["energy_j"] *= 2.0
        return out

    trace = tmp_path / "t.csv"
    trace.write_text(
        "job_id,submit,start,duration,gpus,gpu_type,model\n"
        + "".join(f"j{i},{600 * i},{600 * i},3600,1,a100,resnet50\n" for i in range(3))
    )
    res = replay(
        ReplayRequest(
            trace, ClusterSpec.uniform(1, 8, "a100-40gb"), ["zeus", "charon", "pollux"], simulate_fn=sim
        )
    )
    md = write_replay_report(res, tmp_path / "out", html_too=False).read_text()
    assert (
        "zeus = charon: identical outcomes (every run gave the same start, end and energy for every job" in md
    )
    assert "no power budget was given, and charon differs" in md and "no job waited more than 60 s" in md
    table = [line for line in md.splitlines() if line.startswith("| t.csv |")]
    assert [line.split(" | ")[1] for line in table] == ["recorded", "zeus = charon", "pollux"]


def test_runs_that_differ_in_one_job_are_not_merged() -> None:
    """Same summary figures are not enough where job digests say otherwise."""
    from easlurm.sim.identical import identical_groups, outcome_digest

    def rec(label: str, energy: float) -> dict[str, Any]:
        rows = [{"job_id": "a", "start_s": 0.0, "end_s": 1.0, "energy_j": energy}]
        spec = {"scenario": "s", "seed": 0, "load_jobs_per_h": None}
        result = {"metrics": {"energy_j": 1.0}, "outcome_digest": outcome_digest(rows)}
        return {"experiment": "e", "label": label, "spec": spec, "result": result}

    assert identical_groups([rec("zeus", 1.0), rec("hades", 1.0)]) == [(("e", "s", None), ["zeus", "hades"])]
    assert identical_groups([rec("zeus", 1.0), rec("hades", 1.5)]) == []
