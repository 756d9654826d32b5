"""Trace -> JobSpec mapping rule, energy records and calibration, and the replay against the record."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from easlurm.sim.cluster import ClusterSpec
from easlurm.sim.replay import BASELINE_LABEL, ReplayRequest, replay, write_replay_report
from easlurm.sim.traces import TraceJob, TraceStats, open_trace
from easlurm.sim.traces.calibration import CalibratedOracle
from easlurm.sim.traces.mapping import CLASS_TABLE, ReplayOptions, TraceMapper, map_trace, workload_class

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "traces"


def _oracle() -> Any:
    from easlurm.model.oracle import Oracle

    return Oracle()


@pytest.mark.parametrize(
    ("runtime_s", "gpus", "key"),
    [
        (59 * 60, 1, ("1", "short")),
        (3600, 1, ("1", "medium")),
        (12 * 3600 - 1, 4, ("2-4", "medium")),
        (12 * 3600, 2, ("2-4", "long")),
        (10, 5, ("5+", "short")),
        (2 * 86400, 8, ("5+", "long")),
    ],
)
def test_workload_class_boundaries(runtime_s: float, gpus: int, key: tuple[str, str]) -> None:
    assert workload_class(runtime_s, gpus) == CLASS_TABLE[key]


def test_every_class_fits_its_own_placement_on_a100_and_h100() -> None:
    """Each class model must run at its batch on 1, 4 and 8 GPUs of either type (no excluded jobs by design)."""
    mapper = TraceMapper(ClusterSpec.default(), _oracle())
    for model, bpg in CLASS_TABLE.values():
        for n in (1, 4, 8):
            for gpu in ("a100-40gb", "h100-sxm"):
                step_s, power_w = mapper.step(model, n, bpg * n, gpu)
                assert math.isfinite(step_s) and step_s > 0 and power_w > 0, (model, n, gpu)


def test_mapping_of_the_quirk_fixture() -> None:
    stats = TraceStats()
    mapper = TraceMapper(ClusterSpec.default(), _oracle())
    mapped = {m.spec.job_id: m for m in map_trace(open_trace(FIX / "sacct_quirks.psv", stats=stats), mapper)}
    ex = mapper.stats.excluded
    assert ex["cpu_only"] == 1 and ex["unfinished"] == 1
    assert ex["never_started"] == 7 + 2  # the pending array tasks, 104 and 110
    assert mapper.stats.mapped == len(mapped) == stats.jobs - sum(ex.values())
    assert mapped["100"].spec.model == "resnet50" and mapper.stats.named >= 1  # from the name train-resnet50
    assert mapped["101"].spec.gpu_types == ("h100-sxm",) and mapped["101"].gpu_type == "h100-sxm"
    for m in mapped.values():
        # on its recorded placement the oracle reproduces the recorded runtime (to one step)
        assert abs(m.spec.total_steps * m.step_time_s - m.runtime_s) <= m.step_time_s
        assert m.spec.gpu_options == (m.n_gpus,) and m.spec.batch_options == (m.batch,)
    submits = [m.spec.submit_s for m in mapped.values()]
    assert submits == sorted(submits) and min(submits) >= 0


def test_named_model_token_rules() -> None:
    mapper = TraceMapper(ClusterSpec.default(), _oracle())

    def model_of(name: str | None, model: str | None = None) -> str:
        job = TraceJob("1", 0.0, start_s=0.0, end_s=600.0, n_gpus=4, name=name, model=model)
        m = mapper.map(job, 0.0)
        assert m is not None
        return m.spec.model

    assert model_of("ft_vit-b16_lr3") == "vit-b16"
    assert model_of("myresnet500") == CLASS_TABLE[("2-4", "short")][0]  # no partial-token match
    assert model_of("resnet50") == "resnet50"
    assert model_of("x", model="ViT_L16") == "vit-l16"
    assert model_of("gpt2-small-tune") == "gpt2"


def test_gpu_type_relaxed_to_family_or_any() -> None:
    cluster = ClusterSpec.uniform(2, 8, "a100-80gb")
    mapper = TraceMapper(cluster, _oracle())
    a100 = mapper.map(TraceJob("1", 0.0, start_s=0.0, end_s=60.0, n_gpus=2, gpu_type="a100"), 0.0)
    h100 = mapper.map(TraceJob("2", 0.0, start_s=0.0, end_s=60.0, n_gpus=2, gpu_type="h100"), 0.0)
    assert a100 is not None and a100.spec.gpu_types == ("a100-80gb",)
    assert h100 is not None and h100.spec.gpu_types is None and mapper.stats.gpu_type_relaxed == 1
    too_big = mapper.map(TraceJob("3", 0.0, start_s=0.0, end_s=60.0, n_gpus=16), 0.0)
    assert too_big is None and mapper.stats.excluded["exceeds_node"] == 1


def test_deadline_slack_and_malleable_options() -> None:
    opts = ReplayOptions(deadline_slack=2.0, malleable=True)
    mapper = TraceMapper(ClusterSpec.default(), _oracle(), opts)
    m = mapper.map(TraceJob("1", 100.0, start_s=110.0, end_s=700.0, n_gpus=4, timelimit_s=900.0), 100.0)
    assert m is not None
    assert m.spec.deadline_s == 2.0 * 900.0 and m.spec.urgent
    assert m.spec.gpu_options[0] == 4 and set(m.spec.gpu_options) == {2, 4, 8}
    assert m.spec.batch_options[0] == m.batch and len(m.spec.batch_options) == 3


def _energy_trace(tmp_path: Path, scale: float) -> tuple[Path, dict[str, float]]:
    """A sacct -P dump whose AdminComment records say each job used `scale` x the oracle's GPU energy."""
    from easlurm.accounting.step_record import DeviceRecord, NodeRecord, StepRecord, encode_admin_comment

    mapper = TraceMapper(ClusterSpec.default(), _oracle())
    lines = ["JobID|JobName|User|Partition|Submit|Start|End|AllocTRES|State|AdminComment"]
    expected: dict[str, float] = {}
    for i, (n, runtime) in enumerate([(1, 600), (1, 1200), (4, 900), (2, 300)]):
        gtype = "a100" if i % 2 else "h100"
        model, bpg = workload_class(runtime, n)
        _, power_w = mapper.step(model, n, bpg * n, "a100-40gb" if gtype == "a100" else "h100-sxm")
        gpu_j = scale * power_w * runtime
        rec = StepRecord(
            job_id=10 + i,
            step="batch",
            nnodes=1,
            nodes=[
                NodeRecord(
                    0,
                    "n0",
                    0.0,
                    float(runtime),
                    [DeviceRecord("g", "gpu", gpu_j), DeviceRecord("c", "cpu", 50.0)],
                )
            ],
            spec="gpu,cpu",
        )
        s, e = 1_700_000_000 + 1000 * i, 1_700_000_000 + 1000 * i + runtime
        lines.append(
            f"{10 + i}|job{i}|u{i % 2}|{gtype}|{s}|{s}|{e}|cpu=1,gres/gpu={n},gres/gpu:{gtype}={n}|COMPLETED|"
            + encode_admin_comment([rec])
        )
        expected[str(10 + i)] = gpu_j
    p = tmp_path / "energy.psv"
    p.write_text("\n".join(lines) + "\n")
    return p, expected


def test_admin_comment_energy_reaches_the_trace_jobs(tmp_path: Path) -> None:
    p, expected = _energy_trace(tmp_path, 1.0)
    jobs = {j.job_id: j for j in open_trace(p)}
    for job_id, gpu_j in expected.items():
        assert jobs[job_id].measured_gpu_energy_j == pytest.approx(gpu_j)
        assert jobs[job_id].measured_energy_j == pytest.approx(gpu_j + 50.0)


def test_damaged_admin_comment_is_a_bad_field(tmp_path: Path) -> None:
    p = tmp_path / "d.psv"
    p.write_text("JobID|Submit|Start|End|AllocTRES|AdminComment\n1|10|10|20|gres/gpu=1|easlurm1:78da00ff\n")
    with pytest.raises(Exception, match=r"d\.psv:2: field AdminComment"):
        list(open_trace(p))


class _FakeSim:
    """Stands in for easlurm.sim.runner.simulate: consumes the job stream and records what it got."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, cluster: Any, jobs: Any, policy: str, **kw: Any) -> dict[str, Any]:
        got = list(jobs)
        self.calls.append({"policy": policy, "jobs": got, **kw})
        return {"metrics": {"completed_jobs": float(len(got))}, "jobs": [{"x": 1}]}


def test_calibration_recovers_the_measured_scale(tmp_path: Path) -> None:
    p, _ = _energy_trace(tmp_path, 1.3)
    fake = _FakeSim()
    res = replay(
        ReplayRequest(p, ClusterSpec.default(), ["zeus", "hades"], simulate_fn=fake, noise_sigma=0.0)
    )
    assert res.calibration, "jobs with records must be checked"
    for c in res.calibration:
        assert c.power_scale == pytest.approx(1.3, rel=1e-6)
        assert c.mape_before == pytest.approx(100 * 0.3 / 1.3, rel=1e-3) and c.mape_after < 1e-6
    assert [c["policy"] for c in fake.calls] == ["zeus", "hades"]
    oracle = fake.calls[0]["truth_oracle"]
    assert isinstance(oracle, CalibratedOracle) and set(oracle.power_scale) == {
        c.model for c in res.calibration
    }
    assert res.baseline["metrics"]["measured_jobs"] == 4
    assert "jobs" not in res.run("zeus")  # per-job rows stay out of report records
    uncal = replay(ReplayRequest(p, ClusterSpec.default(), [], simulate_fn=fake, calibrate=False))
    # the measured scale raises the recorded power, up to each GPU's TDP (the cap binds for jobs near it)
    cal_kwh = res.baseline["metrics"]["busy_energy_j"]
    uncal_kwh = uncal.baseline["metrics"]["busy_energy_j"]
    assert 1.05 * uncal_kwh < cal_kwh <= 1.3 * uncal_kwh * (1 + 1e-9)


def test_replay_streams_jobs_in_submit_order_to_every_policy() -> None:
    fake = _FakeSim()
    res = replay(
        ReplayRequest(FIX / "sacct_quirks.psv", ClusterSpec.default(), ["pollux", "charon"], simulate_fn=fake)
    )
    for call in fake.calls:
        submits = [j.submit_s for j in call["jobs"]]
        assert len(submits) == res.mapping.mapped and submits == sorted(submits)
    labels = [r["label"] for r in res.records()]
    assert labels == [BASELINE_LABEL, "pollux", "charon"]
    assert res.baseline["metrics"]["completed_jobs"] == res.mapping.mapped


def test_replay_of_an_uncontended_trace_matches_the_record(tmp_path: Path) -> None:
    """Jobs that never waited: the simulated schedule reproduces the recorded one (noise off; zeus at the
    default power limit, `zeus+nolimit`). Choosing limits, zeus caps the GPUs: the jobs take at most 5 %
    longer and use less energy."""
    p = tmp_path / "calm.csv"
    rows = ["submit,duration,gpus,gpu_type,user"]
    for i in range(6):
        rows.append(f"{i * 4000},{600 + 300 * i},{1 + i % 4},{'a100' if i % 2 else 'h100'},u{i % 3}")
    p.write_text("\n".join(rows) + "\n")
    res = replay(
        ReplayRequest(p, ClusterSpec.default(), ["pollux", "zeus"], noise_sigma=0.0, compare_limits=True)
    )
    base = res.baseline["metrics"]
    for name in ("pollux", "zeus+nolimit"):
        run = res.run(name)["metrics"]
        assert run["completed_jobs"] == base["completed_jobs"] == 6
        assert run["mean_jct_s"] == pytest.approx(base["mean_jct_s"], abs=5.0)
        assert run["busy_energy_j"] == pytest.approx(base["busy_energy_j"], rel=0.02)
    capped = res.run("zeus")["metrics"]
    assert base["mean_jct_s"] < capped["mean_jct_s"] <= 1.05 * base["mean_jct_s"] + 5.0
    assert capped["busy_energy_j"] < 0.98 * base["busy_energy_j"]


def test_cli_replay_writes_report_and_counts_skipped(tmp_path: Path) -> None:
    from easlurm.cli import cli

    out = tmp_path / "rep"
    runner = CliRunner()
    bad = runner.invoke(
        cli, ["sim", "replay", str(FIX / "sacct_bad.psv"), "--policies", "zeus", "--out", str(out)]
    )
    assert bad.exit_code != 0 and "sacct_bad.psv:3" in str(bad.exception)
    ok = runner.invoke(
        cli,
        [
            "sim",
            "replay",
            str(FIX / "sacct_bad.psv"),
            "--policies",
            "zeus",
            "--skip-bad",
            "--no-html",
            "--power-budget",
            "4500W",
            "--out",
            str(out),
        ],
    )
    assert ok.exit_code == 0, ok.output
    md = (out / "report.md").read_text()
    assert "recorded" in md and "zeus" in md
    assert "malformed (skipped) | 4" in md and "sacct_bad.psv:6" in md
    import json

    doc = json.loads((out / "replay.json").read_text())
    assert doc["trace_stats"]["skipped_bad"] == 4 and doc["power_budget_w"] == 4500.0
    assert [r["label"] for r in doc["rows"]] == ["recorded", "zeus"]


def test_write_report_directly(tmp_path: Path) -> None:
    res = replay(ReplayRequest(FIX / "minimal.csv", ClusterSpec.default(), ["hades"], noise_sigma=0.0))
    md = write_replay_report(res, tmp_path / "r", html_too=False)
    text = md.read_text()
    assert "## Trace" in text and "hades" in text
    assert (tmp_path / "r" / "results.csv").read_text().count("\n") == 3  # header + recorded + hades


def test_cli_cluster_yaml_and_noheader_columns(tmp_path: Path) -> None:
    """--cluster and --columns reach the replay: h100 requests on an A100-only cluster are relaxed."""
    import json

    from easlurm.cli import cli

    cluster = tmp_path / "c.yaml"
    cluster.write_text("nodes:\n  - {name: n, gpu_type: a100-80gb, gpus: 8, count: 2}\n")
    out = tmp_path / "rep"
    args = [
        "sim",
        "replay",
        str(FIX / "sacct_p_noheader.txt"),
        "--format",
        "sacct",
        "--cluster",
        str(cluster),
    ]
    args += [
        "--columns",
        "JobID,User,Partition,Submit,Start,End,Elapsed,AllocTRES,State",
        "--policies",
        "hades",
    ]
    res = CliRunner().invoke(cli, [*args, "--seeds", "2", "--no-html", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "replay.json").read_text())
    assert doc["mapping"]["mapped"] == 2 and doc["mapping"]["gpu_type_relaxed"] == 1
    hades = [r["metrics"] for r in doc["rows"] if r["label"] == "hades"]
    assert len(hades) == 2 and all(h["completed_jobs"] == 2 and h["util_a100_80gb"] > 0 for h in hades)


def test_energy_record_fixture() -> None:
    """AdminComment records: energy summed over devices, batch vs srun steps, model/steps hints."""
    jobs = {j.job_id: j for j in open_trace(FIX / "sacct_energy.psv")}
    assert jobs["400"].measured_gpu_energy_j == pytest.approx(360_000.0)
    assert jobs["400"].measured_energy_j == pytest.approx(396_000.0)
    assert (jobs["400"].model, jobs["400"].total_steps) == ("bert-base", 5000)
    # the srun step over both nodes outweighs the batch step (node 0 only): the job's energy is the step's
    assert jobs["401"].measured_gpu_energy_j == pytest.approx(500_000.0)
    assert jobs["401"].measured_energy_j == pytest.approx(540_000.0)
    assert jobs["402"].measured_energy_j is None and jobs["402"].model is None
    mapper = TraceMapper(ClusterSpec.default(), _oracle())
    m = mapper.map(jobs["400"], jobs["400"].submit_s)
    assert m is not None and m.spec.model == "bert-base"  # named by its record, not the class table
