"""The recorded baseline against the target cluster, pinned GPU types, the no-queue note and the
report's presentation (warnings once, empty replays, grouped labels, many users, progress)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from easlurm.sim.cluster import ClusterSpec
from easlurm.sim.replay import ReplayRequest, replay, write_replay_report
from easlurm.sim.traces import TraceJob
from easlurm.sim.traces.mapping import ReplayOptions, TraceMapper

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "traces"


class _FakeSim:
    """Stands in for easlurm.sim.runner.simulate: consumes the job stream, every job starts at submit."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, cluster: Any, jobs: Any, policy: str, **kw: Any) -> dict[str, Any]:
        got = list(jobs)
        self.calls.append({"policy": policy, "jobs": got, **kw})
        rows = [{"submit_s": j.submit_s, "start_s": j.submit_s} for j in got]
        return {"metrics": {"completed_jobs": float(len(got)), "energy_j": 1.0}, "jobs": rows}


def _oracle() -> Any:
    from easlurm.model.oracle import Oracle

    return Oracle()


def _tdp_sum_w(cluster: ClusterSpec) -> float:
    from easlurm.model.hardware import load_catalogue

    cat = load_catalogue()
    return sum(cat.get(cat.resolve(n.gpu_type)).tdp_w * n.n_gpus for n in cluster.nodes)


def test_a_trace_larger_than_the_cluster_is_said_not_to_fit(tmp_path: Path) -> None:
    """48 GPUs busy at once on a 16-GPU cluster: no negative idle energy, no peak above the TDP sum."""
    cluster = ClusterSpec.default()
    res = replay(
        ReplayRequest(
            FIX / "sacct_oversized.psv", cluster, ["zeus"], simulate_fn=_FakeSim(), power_budget_w=5000.0
        )
    )
    m = res.baseline["metrics"]
    assert m["idle_energy_j"] is None or m["idle_energy_j"] >= 0
    assert m["max_power_w"] is None or m["max_power_w"] <= _tdp_sum_w(cluster)
    fit = res.baseline["fit"]
    assert not fit["fits"] and fit["peak_gpus"] == 48 and fit["cluster_gpus"] == 16
    # over capacity all along: the 24 A100 GPUs the record used for 4 h
    assert fit["suggest_gpus"] >= 48 and fit["time_over_s"] == pytest.approx(4 * 3600, abs=10)
    assert m["busy_energy_j"] > 0 and res.baseline["power_w"] == []
    md = write_replay_report(res, tmp_path / "r", html_too=False).read_text()
    assert "does not fit the target cluster" in md and "48 GPUs at once" in md
    assert f"at least {fit['suggest_gpus']} GPUs" in md
    assert "above capacity for 4 h (" in md  # a duration in hours, never 4e+00 h
    # on a cluster that holds it the record fits and every figure is filled
    big = ClusterSpec.mixed([(3, 8, "a100-40gb"), (3, 8, "h100-sxm")])
    ok = replay(ReplayRequest(FIX / "sacct_oversized.psv", big, [], simulate_fn=_FakeSim()))
    mb = ok.baseline["metrics"]
    assert ok.baseline["fit"]["fits"] and mb["idle_energy_j"] >= 0
    assert mb["max_power_w"] <= _tdp_sum_w(big)
    # a budget just under the peak: the recorded row is over it while both groups run (2 h)
    budget = mb["max_power_w"] - 1.0
    over = replay(
        ReplayRequest(FIX / "sacct_oversized.psv", big, [], simulate_fn=_FakeSim(), power_budget_w=budget)
    )
    assert over.baseline["metrics"]["time_over_budget_s"] == pytest.approx(2 * 3600, abs=10)


def test_baseline_power_is_the_policies_calibrated_tdp_capped_power(tmp_path: Path) -> None:
    """A calibration scale of 5 cannot push a job past its GPUs' TDP in the recorded row either."""
    from easlurm.model.hardware import load_catalogue
    from easlurm.sim.traces import open_trace
    from easlurm.sim.traces.mapping import map_trace

    p = tmp_path / "hot.psv"
    lines = ["JobID|User|Submit|Start|End|AllocTRES|AdminComment"]
    from easlurm.accounting.step_record import DeviceRecord, NodeRecord, StepRecord, encode_admin_comment

    mapper = TraceMapper(ClusterSpec.default(), _oracle())
    for i in range(3):
        s, e = 1_700_000_000 + 4000 * i, 1_700_000_000 + 4000 * i + 1800
        probe = mapper.map(
            TraceJob(str(i), float(s), start_s=float(s), end_s=float(e), n_gpus=2, gpu_type="h100"), 0.0
        )
        assert probe is not None
        rec = StepRecord(
            job_id=i,
            step="batch",
            nnodes=1,
            nodes=[NodeRecord(0, "n0", 0.0, 1800.0, [DeviceRecord("g", "gpu", 5.0 * probe.power_w * 1800)])],
            spec="gpu",
        )
        lines.append(f"{i}|u|{s}|{s}|{e}|gres/gpu:h100=2|" + encode_admin_comment([rec]))
    p.write_text("\n".join(lines) + "\n")
    res = replay(ReplayRequest(p, ClusterSpec.default(), [], simulate_fn=_FakeSim()))
    assert res.calibration and res.calibration[0].power_scale == pytest.approx(5.0, rel=1e-6)
    tdp = load_catalogue().get("h100-sxm").tdp_w
    mapped = list(map_trace(open_trace(p), TraceMapper(ClusterSpec.default(), _oracle())))
    capped_j = sum(min(5.0 * m.power_w, tdp * m.n_gpus) * m.runtime_s for m in mapped)
    assert res.baseline["metrics"]["busy_energy_j"] == pytest.approx(capped_j, rel=1e-6)
    assert res.baseline["metrics"]["max_power_w"] <= _tdp_sum_w(ClusterSpec.default())


def test_unknown_gpu_type_stays_pinned_unless_retype_is_allowed() -> None:
    cluster = ClusterSpec.mixed([(1, 8, "a100-40gb"), (2, 8, "h100-sxm")])
    job = TraceJob("1", 0.0, start_s=0.0, end_s=600.0, n_gpus=2)  # the trace does not say the type
    pinned = TraceMapper(cluster, _oracle()).map(job, 0.0)
    assert pinned is not None and pinned.spec.gpu_types == ("h100-sxm",) and pinned.gpu_type == "h100-sxm"
    free = TraceMapper(cluster, _oracle(), ReplayOptions(allow_retype=True)).map(job, 0.0)
    assert free is not None and free.spec.gpu_types is None


def test_compare_retype_shows_both_rows() -> None:
    fake = _FakeSim()
    res = replay(
        ReplayRequest(
            FIX / "minimal.csv", ClusterSpec.default(), ["zeus"], simulate_fn=fake, compare_retype=True
        )
    )
    assert [r["label"] for r in res.records()] == ["recorded", "zeus", "zeus+retype"]
    untyped = [j for j in fake.calls[1]["jobs"] if j.gpu_types is None]
    pinned = {j.job_id: j.gpu_types for j in fake.calls[0]["jobs"]}
    assert all(pinned[j.job_id] is not None for j in untyped)


def test_report_says_when_the_cluster_never_queued_a_job(tmp_path: Path) -> None:
    p = tmp_path / "calm.csv"
    rows = ["submit,duration,gpus,gpu_type,user"]
    rows += [
        f"{i * 4000},{600 + 300 * i},{1 + i % 4},{'a100' if i % 2 else 'h100'},u{i % 3}" for i in range(6)
    ]
    p.write_text("\n".join(rows) + "\n")
    res = replay(ReplayRequest(p, ClusterSpec.default(), ["zeus", "charon"], noise_sigma=0.0))
    assert all(r["metrics"]["queued_jobs"] == 0 for _, _, r in res.runs)
    md = write_replay_report(res, tmp_path / "r", html_too=False).read_text()
    assert "never queued a job" in md and "headroom" in md
    for knob in ("--deadline-slack", "--power-budget", "smaller cluster"):
        assert knob in md


def test_skip_bad_warnings_are_printed_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    res = replay(
        ReplayRequest(
            FIX / "sacct_bad.psv",
            ClusterSpec.default(),
            ["zeus", "hades"],
            skip_bad=True,
            simulate_fn=_FakeSim(),
        )
    )
    skipped = [r for r in caplog.records if "skipped:" in r.getMessage()]
    assert res.trace_stats.skipped_bad == 4 and len(skipped) == 4


def test_zero_replayed_jobs_draw_no_plots_and_no_tests(tmp_path: Path) -> None:
    p = tmp_path / "cpu.csv"
    p.write_text("submit,duration,gpus\n0,600,0\n100,600,0\n")
    res = replay(ReplayRequest(p, ClusterSpec.default(), ["zeus", "hades"], noise_sigma=0.0))
    assert res.mapping.mapped == 0
    out = tmp_path / "r"
    text = write_replay_report(res, out).read_text()
    assert not (out / "plots").exists() and "p-values" not in text
    assert "No job of the trace was replayed" in text and "cpu_only | 2" in text
    # no table without rows: the empty class table is a sentence
    assert "| Workload class |" not in text and "No job was given a workload class" in text


def test_cancelled_pending_jobs_are_reported(tmp_path: Path) -> None:
    res = replay(
        ReplayRequest(FIX / "sacct_wide_pipes.psv", ClusterSpec.default(), ["zeus"], simulate_fn=_FakeSim())
    )
    assert res.mapping.cancelled_pending == 8 and res.baseline["metrics"]["completed_jobs"] == 3
    # the recorded mean JCT is the three jobs that ran, not 8 h waits turned into zero-length runs
    assert res.baseline["metrics"]["mean_jct_s"] < 3 * 3600
    md = write_replay_report(res, tmp_path / "r", html_too=False).read_text()
    assert "8 jobs cancelled while pending" in md


def test_identical_pareto_points_share_one_label() -> None:
    from easlurm.plots import same_point_labels

    groups = same_point_labels(
        [(10.0, 5.0), (10.0, 5.0), (12.0, 5.0), (10.000001, 5.0)], ["zeus", "aurachronos", "pollux", "charon"]
    )
    assert sorted(groups.values()) == [["pollux"], ["zeus", "aurachronos", "charon"]]


def test_user_shares_keep_the_top_users_and_group_the_rest() -> None:
    from easlurm.plots import top_users

    shares = {lab: {f"user{i:02d}": (i + 1) / 4095.0 for i in range(90)} for lab in ("recorded", "zeus")}
    top = top_users(shares, 10)
    assert len(top["zeus"]) == 11 and "others (80)" in top["zeus"]
    assert "user89" in top["zeus"] and "user00" not in top["zeus"]
    assert sum(top["zeus"].values()) == pytest.approx(sum(shares["zeus"].values()))


def test_cli_progress_bar_and_retype_flags(tmp_path: Path) -> None:
    from easlurm.cli import cli

    out = tmp_path / "rep"
    args = ["sim", "replay", str(FIX / "minimal.csv"), "--policies", "hades", "--no-html", "--out", str(out)]
    res = CliRunner().invoke(cli, [*args, "--progress", "--compare-retype"])
    assert res.exit_code == 0, res.output
    assert "replay hades (seed 0)" in res.stderr and "replay hades+retype (seed 0)" in res.stderr
    doc = json.loads((out / "replay.json").read_text())
    assert [r["label"] for r in doc["rows"]] == ["recorded", "hades", "hades+retype"]
    quiet = CliRunner().invoke(cli, [*args, "--no-progress", "--allow-retype"])
    assert quiet.exit_code == 0 and "replay hades" not in quiet.stderr
