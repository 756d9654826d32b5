"""The job card, the what-if and the period report on records built by hand: every figure comes from the
records (totals add up to job_total, as `easlurm sacct` shows them), and what-ifs are the oracle's ratios."""

from __future__ import annotations

import math

import pytest

from easlurm.accounting.report import (
    GridIntensity,
    GroupBy,
    aggregate,
    job_runs,
    parse_intensity_csv,
    render_csv,
    table_rows,
)
from easlurm.accounting.sacct_rows import job_total
from easlurm.accounting.seff import GpuLimits, build_card, card_document
from easlurm.accounting.seff_cli import render_card
from easlurm.accounting.step_record import DeviceRecord, NodeRecord, StepRecord
from easlurm.accounting.whatif import Placement, WhatIf, advise, confidence, what_ifs
from easlurm.energy.spec import parse_spec
from easlurm.errors import ConfigError
from easlurm.model.oracle import Oracle, Placements
from easlurm.model.zoo import get_workload

A100 = {"a100": GpuLimits("a100-40gb", 400.0, 55.0)}
SPEC = "gpu,model=resnet50,batch=256,steps=100"


def gpu(name: str, watts: float, dur: float, **kw: object) -> DeviceRecord:
    return DeviceRecord(name, "gpu", watts * dur, watts, 10, duration_s=dur, peak_power_w=watts + 5, **kw)  # type: ignore[arg-type]


def node(i: int, host: str, dur: float, *devs: DeviceRecord) -> NodeRecord:
    return NodeRecord(i, host, 1.7e9, dur, list(devs))


def row(jid: str, tres: str = "cpu=2,gres/gpu:a100=2,gres/gpu=2", **kw: str) -> dict[str, str]:
    base = {
        "JobIDRaw": jid,
        "JobID": jid,
        "JobName": "train",
        "User": "alice",
        "Account": "proj",
        "Partition": "a100",
        "State": "COMPLETED",
        "Start": "2026-11-24T01:00:00",
        "End": "2026-11-24T01:00:10",
        "ElapsedRaw": "10",
        "NNodes": "2",
        "NodeList": "a100-[1-2]",
        "AllocTRES": tres,
        "AdminComment": "",
    }
    return {**base, **kw}


def two_node_job() -> tuple[list[dict[str, str]], list[StepRecord]]:
    """batch on a100-1 (2 GPUs, one idle), step 0 on a100-1 and a100-2."""
    batch = StepRecord(
        7, "batch", 1, [node(0, "a100-1", 10, gpu("gpu0", 250, 10), gpu("gpu1", 60, 10))], SPEC
    )
    step0 = StepRecord(
        7,
        "0",
        2,
        [
            node(0, "a100-1", 8, gpu("gpu0", 250, 8)),
            node(1, "a100-2", 8, gpu("gpu0", 240, 8), gpu("gpu1", 240, 8)),
        ],
        SPEC,
    )
    rows = [row("7"), row("7.batch"), row("7.0")]
    return rows, [batch, step0]


def test_card_totals_are_the_records_job_total() -> None:
    """The card's total is job_total (batch + step 0's other node), and its per-kind parts add up."""
    rows, recs = two_node_job()
    card = build_card(rows, recs, A100)
    total = job_total(recs)
    assert total is not None and card.total_energy_j == pytest.approx(total.total_energy_j)
    assert card.total_energy_j == pytest.approx(250 * 10 + 60 * 10 + 2 * 240 * 8)
    assert card.gpu_energy_j == card.total_energy_j and card.cpu_energy_j is None
    for s, rec in zip(card.steps, recs, strict=True):
        assert sum(d.energy_j or 0 for d in s.devices if d.in_total) == pytest.approx(rec.total_energy_j)
    assert card.energy_per_work_step_j == pytest.approx(card.total_energy_j / 100)
    assert card.edp_j_s == pytest.approx(card.total_energy_j * 10)
    assert [d.device for d in card.idle_gpus] == ["gpu1"]  # 60 W < 55 + 10 % of (400 - 55)
    doc = card_document(card)
    assert doc["steps"][0]["devices"][0]["peak_power_w"] == 255 and doc["gpu_limit_w"] == 400


def test_requeued_job_card_shows_the_last_run_and_earlier_runs_energy() -> None:
    rec0 = StepRecord(8, "batch", 1, [node(0, "a100-1", 5, gpu("gpu0", 200, 5))], SPEC, run=0)
    rec1 = StepRecord(8, "batch", 1, [node(0, "a100-1", 10, gpu("gpu0", 200, 10))], SPEC, run=1)
    rows = [row("8", State="REQUEUED"), row("8.batch"), row("8"), row("8.batch")]
    card = build_card(rows, [rec0, rec1], A100)
    assert (card.run, card.runs) == (1, 2)
    assert card.total_energy_j == pytest.approx(2000) and card.requeue_energy_j == pytest.approx(1000)
    first = build_card(rows, [rec0, rec1], A100, run=0)
    assert first.total_energy_j == pytest.approx(1000) and first.earlier_runs_j == []
    with pytest.raises(ConfigError, match=r"no run 3 \(--run 1\.\.2"):
        build_card(rows, [rec0, rec1], A100, run=2)
    text = render_card(card, [], None)
    assert "Run 2 of 2 (restart 1)" in text and "run 1: 1.00kJ" in text, text
    assert card_document(card)["run_number"] == 2


def test_unprofiled_and_shared_gpu_cards() -> None:
    card = build_card([row("9"), row("9.batch")], [], A100)
    assert not card.has_records and card.total_energy_j is None
    shared = gpu("gpu0", 300, 10)
    shared.apportion(0.4, "utilisation")
    rec = StepRecord(10, "batch", 1, [node(0, "a100-1", 10, shared)], "gpu,share")
    card = build_card([row("10", tres="cpu=1,gres/shard=1"), row("10.batch")], [rec], A100)
    assert card.total_energy_j == pytest.approx(0.4 * 3000) and card.shards == 1 and card.n_gpus == 0
    assert card.idle_gpus == [] and any("shared GPU" in n for n in card.notes)


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    return Oracle()


def test_whatif_is_the_oracles_ratio_for_the_same_placement(oracle: Oracle) -> None:
    """Each line's energy change is the oracle's energy per step there over the job's own placement."""
    spec = parse_spec(SPEC)
    base = Placement("a100-40gb", 2, 256)
    lines = what_ifs(oracle, spec, base, ["a100-40gb", "h100-sxm"], elapsed_s=100.0, gpu_energy_j=5e4)
    labels = [w.label for w in lines]
    assert "on 1 GPU" in labels and "on 4 GPUs" in labels and "on 2 x h100-sxm" in labels
    assert any("W limit" in lb for lb in labels)
    wl = get_workload("resnet50")
    own = oracle.predict(wl, Placements.of([2], [256], ["a100-40gb"]))
    for w in lines:
        p = w.placement
        limit = math.nan if p.power_limit_w is None else p.power_limit_w
        pred = oracle.predict(wl, Placements.of([p.n_gpus], [p.batch], [p.gpu], [limit]))
        assert w.energy_change == pytest.approx(float(pred.energy_j[0] / own.energy_j[0]) - 1)
        assert w.time_change == pytest.approx(float(pred.step_time_s[0] / own.step_time_s[0]) - 1)
        assert w.gpu_energy_j == pytest.approx(5e4 * (1 + w.energy_change))
        assert "% energy" in w.line() and w.uncertainty is not None
    capped = next(w for w in lines if "limit" in w.label)
    assert capped.energy_change < 0.05  # a power limit does not cost energy for the same work


def test_whatif_of_a_spread_job_keeps_its_nodes_and_offers_packing(oracle: Oracle) -> None:
    """A job that ran 4 GPUs on 2 nodes (NNodes=2) is predicted at 2 nodes, not packed: its other lines
    keep the spread, and 'packed on 1 node' is faster (the all-reduce leaves the network)."""
    spec = parse_spec("model=bert-large,batch=64")
    lines = {
        w.label: w for w in what_ifs(oracle, spec, Placement("a100-40gb", 4, 64, n_nodes=2), ["h100-sxm"])
    }
    wl = get_workload("bert-large")
    spread = oracle.predict(wl, Placements.of([4], [64], ["a100-40gb"], n_nodes=[2]))
    packed = lines["packed on 1 node"]
    assert packed.placement.n_nodes == 1
    assert packed.time_change == pytest.approx(packed.step_time_s / float(spread.step_time_s[0]) - 1)
    assert packed.time_change < -0.05 and packed.energy_change < 0
    other = lines["on 4 x h100-sxm"]
    assert other.placement.n_nodes == 2 and other.to_dict()["n_nodes"] == 2
    alone = what_ifs(oracle, spec, Placement("a100-40gb", 4, 64))
    assert not any(w.label.startswith("packed") for w in alone)


def whatif(label: str, energy: float, time: float, unc: float | None = 0.05) -> WhatIf:
    p = Placement("a100-40gb", 4, 256)
    return WhatIf(label, p, 1.0, 1.0, time, energy, 100.0 * (1 + time), 5e4 * (1 + energy), "calibrated", unc)


def test_advice_is_the_largest_saving_within_the_sites_slowdown_bound() -> None:
    """The headline: the biggest energy saving whose time cost is within sched.max_slowdown and beyond the
    line's own uncertainty; a bigger saving that is too slow, or one inside the noise, is not advised."""
    lines = [
        whatif("at a 300 W limit", 0.0, 0.0),
        whatif("on 1 GPU", -0.60, 0.80),  # saves most, far too slow
        whatif("on 4 GPUs", -0.47, -0.16),
        whatif("at a 250 W limit", -0.20, 0.04),
        whatif("on 2 x h100-sxm", -0.50, 0.03, unc=0.55),  # inside its own uncertainty
    ]
    advice = advise(lines, 0.05)
    assert advice is not None and advice.best is not None and advice.best.label == "on 4 GPUs"
    assert advice.text.startswith("on 4 GPUs: -47 % energy, -16 % time")
    assert "instead of 50.00kJ" in advice.text and "5 % slowdown bound (sched.max_slowdown)" in advice.text
    wider = advise(lines, 1.0)
    assert wider is not None and wider.best is not None and wider.best.label == "on 1 GPU"
    keep = advise([lines[0], lines[1]], 0.05)
    assert keep is not None and keep.best is None and keep.text.startswith("keep this placement")
    assert advise([], 0.05) is None


def test_the_card_leads_with_its_advice(oracle: Oracle) -> None:
    """The advice line comes right after the header, before the totals, and names the same what-if that
    the what-if list shows."""
    rows, recs = two_node_job()
    card = build_card(rows, recs, A100)
    lines = what_ifs(
        oracle, parse_spec(SPEC), Placement("a100-40gb", 2, 256), elapsed_s=10.0, gpu_energy_j=6e3
    )
    advice = advise(lines, 0.05)
    assert advice is not None
    text = render_card(card, lines, None, advice=advice).splitlines()
    first_total = next(i for i, line in enumerate(text) if line.startswith("Energy "))
    (at,) = [i for i, line in enumerate(text) if line.startswith("Advice: ")]
    assert at < first_total
    if advice.best is not None:
        assert f"  {advice.best.line()}" in text


def test_sharing_whatif_for_one_gpu_jobs_and_confidence(oracle: Oracle) -> None:
    lines = what_ifs(oracle, parse_spec("model=resnet50,batch=64"), Placement("h100-sxm", 1, 64))
    share = [w for w in lines if w.placement.sharing]
    assert share and share[0].time_change > 0  # sharing a GPU slows the job
    calibrated = confidence(oracle, "resnet50", Placement("h100-sxm", 1, 64), Placement("h100-sxm", 1, 64))
    far = confidence(oracle, "resnet50", Placement("a100-40gb", 2, 64, 250.0), Placement("h100-sxm", 1, 64))
    assert calibrated[0] == "calibrated" and far[0] == "far"
    assert calibrated[1] is not None and far[1] is not None and far[1] > calibrated[1]
    assert what_ifs(oracle, parse_spec("gpu"), Placement("h100-sxm", 1, 64)) == []  # no model declared


def test_report_sums_runs_requeues_idle_gpus_and_co2() -> None:
    rows, recs = two_node_job()
    rec0 = StepRecord(8, "batch", 1, [node(0, "a100-1", 5, gpu("gpu0", 200, 5))], SPEC, run=0)
    rec1 = StepRecord(8, "batch", 1, [node(0, "a100-1", 10, gpu("gpu0", 200, 10))], SPEC, run=1)
    one = "cpu=1,gres/gpu:a100=1,gres/gpu=1"
    rows += [
        row("8", one, User="bob", State="REQUEUED", ElapsedRaw="5"),
        row("8.batch", one),
        row("8", one, User="bob", Start="2026-11-24T03:00:00", End="2026-11-24T03:00:10"),
        row("8.batch", one),
        row("11", User="bob"),  # no records
    ]
    runs = job_runs(rows, {"7": recs, "8": [rec0, rec1]}, A100)
    assert len(runs) == 4 and [r.requeued for r in runs] == [False, True, False, False]
    series = parse_intensity_csv("time,g_per_kwh\n2026-11-24T00:00:00,100\n2026-11-24T02:00:00,400\n")
    groups, total = aggregate(runs, GroupBy.USER, series)
    by = {g.key: g for g in groups}
    assert total.energy_j == pytest.approx(by["alice"].energy_j + by["bob"].energy_j)
    assert by["alice"].energy_j == pytest.approx(job_total(recs).total_energy_j)  # type: ignore[union-attr]
    assert by["bob"].energy_j == pytest.approx(3000) and by["bob"].requeue_energy_j == pytest.approx(1000)
    assert by["alice"].idle_gpu_energy_j == pytest.approx(600)
    assert by["bob"].runs == 3 and by["bob"].profiled_runs == 2 and len(by["bob"].jobs) == 2
    assert by["bob"].gpu_hours == pytest.approx((5 + 10 + 2 * 10) / 3600)
    assert by["bob"].co2_g == pytest.approx((1000 * 100 + 2000 * 400) / 3.6e6)
    assert by["alice"].energy_per_gpu_hour_j == pytest.approx(by["alice"].energy_j / (2 * 10 / 3600))
    header, cells = table_rows(groups, total, co2=True)
    assert header[-1] == "CO2_kg" and cells[-1][0] == "TOTAL"
    assert render_csv(groups, total).splitlines()[0].startswith("key,jobs,runs")
    by_type, _ = aggregate(runs, GroupBy.GPU_TYPE, GridIntensity.constant(300))
    assert [g.key for g in by_type] == ["a100"]


@pytest.mark.parametrize(
    "text", ["time,g\n", "2026-11-24T00:00:00\n", "2026-11-24T00:00:00,-3\n", "yesterday,100\n"]
)
def test_bad_intensity_csv_is_one_config_error(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_intensity_csv(text)


def test_bad_input_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    from easlurm.cli import main

    assert main(["seff", "12x"]) == 2
    assert "JOBID must be a job number" in capsys.readouterr().err
    assert main(["report", "--co2", "100", "--co2-csv", __file__]) == 2
    assert "exclusive" in capsys.readouterr().err


def test_a_shard_job_is_compared_with_running_alone(oracle: Oracle) -> None:
    """A job that shared its GPU (gres/shard, time-sliced with a job like it) against a whole GPU of its
    type and of the cluster's other type: the co-location model's figures, as `easlurm model corun`."""
    from easlurm.model.colocation import GpuFacts, Sharing, corun, predict_solo

    shared = Placement("h100-sxm", 1, 64, sharing="time-slice")
    lines = {
        w.label: w for w in what_ifs(oracle, parse_spec("model=resnet50,batch=64"), shared, ["a100-40gb"])
    }
    assert list(lines) == ["alone on a whole GPU", "alone on 1 x a100-40gb"]
    solo = predict_solo(oracle, get_workload("resnet50"), 64, "h100-sxm")
    assert solo is not None
    facts = GpuFacts.of(oracle.catalogue.get("h100-sxm"), oracle.params)
    run = corun(solo, solo, facts, Sharing.TIME_SLICE, oracle.params)
    alone = lines["alone on a whole GPU"]
    assert alone.time_change == pytest.approx(run.speed[0] - 1, rel=1e-6) and alone.time_change < 0
    t_shared = solo.step_time_s / run.speed[0]
    own_e = run.job_power_w(0) * t_shared
    assert alone.energy_change == pytest.approx(alone.energy_per_step_j / own_e - 1, rel=1e-9)
    assert alone.energy_per_step_j == pytest.approx(solo.power_w * solo.step_time_s, rel=1e-6)
    assert alone.placement.sharing is None and "% time" in alone.line()


def test_a_shard_jobs_gpu_type_comes_from_its_nodes_gres() -> None:
    shared = gpu("gpu0", 300, 10)
    shared.apportion(0.5, "utilisation")
    rec = StepRecord(11, "batch", 1, [node(0, "h100-2", 10, shared)], "gpu,share,model=resnet50,batch=64")
    rows = [row("11", tres="cpu=1,gres/shard=1", NodeList="h100-2", NNodes="1"), row("11.batch")]
    limits = {"h100": GpuLimits("h100-sxm", 700.0, 70.0)}
    card = build_card(
        rows, [rec], limits, node_gpu_types={"h100-1": "h100", "h100-2": "h100", "a100-1": "a100"}
    )
    assert card.gpu_type == "h100" and card.limits is not None and card.limits.limit_w == 700.0
    assert "GPU type h100: from the GRES of node h100-2 (shards name no type)" in card.notes
    assert card.idle_gpus == []  # a shared GPU is never idle
    unknown = build_card(rows, [rec], limits, node_gpu_types={"h100-1": "h100"})
    assert unknown.gpu_type is None and any("GPU type unknown" in n for n in unknown.notes)
    mixed = build_card(
        [row("11", tres="cpu=1,gres/shard=1", NodeList="n[1-2]"), row("11.batch")],
        [],
        limits,
        node_gpu_types={"n1": "h100", "n2": "a100"},
    )
    assert (
        mixed.gpu_type is None
        and "GPU type unknown: the job's nodes have several (a100, h100)" in mixed.notes
    )


def test_report_counts_shard_jobs_under_their_nodes_gpu_type() -> None:
    shared = gpu("gpu0", 300, 10)
    shared.apportion(0.5, "utilisation")
    rec = StepRecord(12, "batch", 1, [node(0, "h100-2", 10, shared)], "gpu,share")
    rows = [row("12", tres="cpu=1,gres/shard=1", NodeList="h100-2"), row("12.batch")]
    (typed,) = job_runs(rows, {"12": [rec]}, node_gpu_types={"h100-2": "h100"})
    (untyped,) = job_runs(rows, {"12": [rec]})
    assert (typed.gpu_type, untyped.gpu_type) == ("h100", "shard")
    assert typed.gpu_hours == pytest.approx(0.5 * 10 / 3600)  # its share of the GPU
    groups, _ = aggregate([typed], GroupBy.GPU_TYPE, None)
    assert [g.key for g in groups] == ["h100"]
    doc = groups[0].to_dict()
    assert "energy_kwh" not in doc and doc["energy_per_gpu_hour_j"] == pytest.approx(
        0.5 * 3000 / (0.5 * 10 / 3600)
    )
