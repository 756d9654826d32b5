"""Accounting that is never silently wrong: a dead node 0 still leaves a flagged partial step, requeued jobs
are flagged `spool` only where the spool was read, steps add up to their job, mean power has one
definition, impossible records are flagged and never summed, and a bad --plot path is one line."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from easlurm.accounting.record_checks import checked, node_problem
from easlurm.accounting.report import GroupBy, aggregate, job_runs
from easlurm.accounting.report_cli import check_plot_path, record_notes
from easlurm.accounting.republish import Republisher, Status
from easlurm.accounting.sacct_rows import build_rows, job_total
from easlurm.accounting.seff import build_card
from easlurm.accounting.spool import spool_records
from easlurm.accounting.step_record import (
    DeviceRecord,
    NodeRecord,
    StepRecord,
    decode_admin_comment,
    encode_admin_comment,
)
from easlurm.energy.spec import DEVICE_KINDS
from easlurm.errors import ConfigError

T0 = 1_800_000_000.0


def gpu(name: str, watts: float, dur: float) -> DeviceRecord:
    return DeviceRecord(name, "gpu", watts * dur, watts, 10, duration_s=dur)


def node(i: int, host: str, dur: float, *devs: DeviceRecord, **kw: Any) -> NodeRecord:
    return NodeRecord(i, host, T0, dur, list(devs), step_start_time=T0, step_end_time=T0 + dur, **kw)


def row(jid: str, **kw: str) -> dict[str, str]:
    base = {
        "JobIDRaw": jid,
        "JobID": jid,
        "JobName": "train",
        "User": "alice",
        "Account": "proj",
        "Partition": "a100",
        "State": "COMPLETED",
        "Start": "2026-11-24T01:00:00",
        "End": "2026-11-24T01:00:12",
        "ElapsedRaw": "12",
        "NNodes": "2",
        "NodeList": "a100-[1-2]",
        "AllocTRES": "cpu=2,gres/gpu:a100=2,gres/gpu=2",
        "AdminComment": "",
    }
    return {**base, **kw}


def write_json(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def dead_node0_spool(tmp_path: Path) -> Path:
    """Job 7 on a100-1 and a100-2: the batch step's record, and step 0's node-1 file only (node 0's
    agent was killed before it wrote its node file or the step record)."""
    spool = tmp_path / "spool"
    batch = StepRecord(7, "batch", 1, [node(0, "a100-1", 10, gpu("gpu0", 250, 10))], "gpu")
    write_json(spool / "7" / "step-batch.json", batch.to_dict())
    lone = node(1, "a100-2", 8, gpu("gpu0", 240, 8), nnodes=2, spec="gpu")
    write_json(spool / "7" / "0" / "node-1.json", lone.to_dict())
    return spool


# ---------------------------------------------------------------------- 1. a dead node 0


def test_a_step_whose_node_0_died_is_rebuilt_from_the_other_nodes_files(tmp_path: Path) -> None:
    """sacct (with the spool) shows step 0 with node 1's energy, `partial` naming node 0; the job total
    holds a100-2; seff says which node is missing."""
    spool = dead_node0_spool(tmp_path)
    found = spool_records(spool, "7")
    assert found["0"].missing_nodes == [0] and found["0"].nnodes == 2 and found["0"].spec == "gpu"
    rows = [row("7", AdminComment=encode_admin_comment([found["batch"]])), row("7.batch"), row("7.0")]
    out, records = build_rows(rows, spool=spool)
    step0 = out[2]
    assert step0["GPUEnergy"] == pytest.approx(240 * 8)
    assert step0["EnergyFlags"].split(",")[:3] == ["spool", "partial", "missing-nodes:0"]
    assert out[0]["GPUEnergy"] == pytest.approx(250 * 10 + 240 * 8)  # both nodes in the job's total
    card = build_card(rows, records["7"])
    assert any("step 0 has no record from node(s) 0 of 2" in n for n in card.notes), card.notes


def test_a_late_node_file_fills_a_partial_step_record_when_read(tmp_path: Path) -> None:
    spool = dead_node0_spool(tmp_path)
    part = StepRecord(7, "0", 2, [node(0, "a100-1", 8, gpu("gpu0", 250, 8))], missing_nodes=[1])
    write_json(spool / "7" / "step-0.json", part.to_dict())
    step0 = spool_records(spool, "7")["0"]
    assert not step0.partial and [n.node_id for n in step0.nodes] == [0, 1]


class OneJobSlurm:
    """The job has ended and slurmctld forgot it; the database holds the batch step only."""

    def __init__(self, admin: str) -> None:
        self.admin = admin

    def sacct_json(self, selection: Any) -> dict[str, Any]:
        times = {"start": int(T0), "end": int(T0 + 60), "submission": int(T0 - 5)}
        comment = {"administrator": self.admin}
        return {"jobs": [{"job_id": 7, "state": {"current": "COMPLETED"}, "comment": comment, "time": times}]}

    def show_job(self, job_id: int) -> dict[str, str]:
        from easlurm.errors import SlurmError  # here: only this fake raises it

        raise SlurmError("scontrol failed: Invalid job id specified")

    def set_admin_comment_db(self, job_id: int, text: str) -> None:
        self.admin = text.lower()


def test_republish_adopts_orphaned_node_files_and_publishes_the_partial_step(tmp_path: Path) -> None:
    """Before: `up-to-date` while spool/7/0/node-1.json sat on disk. Now step 0 is published, partial."""
    spool = dead_node0_spool(tmp_path)
    batch = spool_records(spool, "7")["batch"]
    fake = OneJobSlurm(encode_admin_comment([batch]))
    [res] = Republisher(fake, spool).run(["7"])  # type: ignore[arg-type]
    assert res.status is Status.REPUBLISHED and res.missing == ["0"], res
    assert "step 0 is partial: no record from node(s) 0" in res.detail
    published = {s.step: s for s in decode_admin_comment(fake.admin)}
    assert published["0"].missing_nodes == [0] and published["0"].gpu_energy_j == pytest.approx(240 * 8)


# ---------------------------------------------------------------------- 2. requeue and the spool flag


def test_requeued_rows_are_not_flagged_spool_when_admin_comment_holds_them(tmp_path: Path) -> None:
    """The first run's REQUEUED row has no AdminComment and reads the spool; the second run's row holds
    all four records: no row says `spool`."""
    spool = tmp_path / "spool"
    recs = [
        StepRecord(7, step, 1, [node(0, "a100-1", 10, gpu("gpu0", 250, 10))], run=run)
        for run in (0, 1)
        for step in ("batch", "0")
    ]
    for r in recs:
        write_json(spool / "7" / f"step-{r.key}.json", r.to_dict())
    comment = encode_admin_comment(recs)
    rows = [
        row("7", State="REQUEUED"),
        row("7.batch", State="CANCELLED"),
        row("7.0"),
        row("7", AdminComment=comment),
        row("7.batch"),
        row("7.0"),
    ]
    out, _ = build_rows(rows, spool=spool)
    assert all("spool" not in (r.get("EnergyFlags") or "").split(",") for r in out), out
    # a record only the spool holds is still flagged
    rows[3]["AdminComment"] = encode_admin_comment(recs[:3])
    out, _ = build_rows(rows, spool=spool)
    assert out[5]["EnergyFlags"].startswith("spool")


# ---------------------------------------------------------------------- 3. steps add up to the job


def test_a_step_never_exceeds_its_job() -> None:
    """The batch step sampled node a100-1 a little lower (4.69 kJ) than step 0 did (4.74 kJ): the job's
    total and each kind still hold every step's."""
    batch = StepRecord(7, "batch", 1, [node(0, "a100-1", 20, gpu("gpu0", 234.5, 20))])
    step0 = StepRecord(7, "0", 1, [node(0, "a100-1", 20, gpu("gpu0", 237.0, 20))])
    step1 = StepRecord(
        7, "1", 2, [node(0, "a100-1", 1, gpu("gpu1", 100, 1)), node(1, "a100-2", 5, gpu("gpu0", 90, 5))]
    )
    total = job_total([batch, step0, step1])
    assert total is not None
    for s in (batch, step0, step1):
        assert s.total_energy_j is not None and total.total_energy_j is not None
        assert s.total_energy_j <= total.total_energy_j
        for kind in DEVICE_KINDS:
            assert (s.kind_energy_j(kind) or 0.0) <= (total.kind_energy_j(kind) or 0.0)
    assert total.total_energy_j == pytest.approx(237.0 * 20 + 100 + 90 * 5)


# ---------------------------------------------------------------------- 4. one mean power


def test_mean_power_is_energy_over_the_measured_window_everywhere() -> None:
    """Slurm's Elapsed (12 s) is not the measured window (10 s): sacct's AvgPower, seff's Mean power and
    the report's MeanPower_W all divide by the measured window."""
    batch = StepRecord(7, "batch", 1, [node(0, "a100-1", 10, gpu("gpu0", 300, 10))])
    rows = [row("7", AdminComment=encode_admin_comment([batch])), row("7.batch")]
    out, records = build_rows(rows)
    card = build_card(rows, records["7"])
    groups, total = aggregate(job_runs(rows, records), GroupBy.USER)
    assert out[0]["AvgPower"] == pytest.approx(300.0)
    assert card.mean_power_w == pytest.approx(300.0)
    assert groups[0].mean_power_w == pytest.approx(300.0) and total.mean_power_w == pytest.approx(300.0)


# ---------------------------------------------------------------------- 6. impossible records


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ({"energy_j": -5.0}, "negative"),
        ({"energy_j": math.nan}, "nan"),
        ({"energy_j": math.inf}, "inf"),
        ({"step_end_time": T0 - 10}, "ends before it starts"),
        ({"energy_j": 10 * 2000.0 * 10}, "above what 1 GPU(s) can draw"),
    ],
)
def test_an_impossible_record_is_flagged_and_never_summed(bad: dict[str, float], why: str) -> None:
    good = node(0, "a100-1", 10, gpu("gpu0", 250, 10))
    broken = node(1, "a100-2", 10, gpu("gpu0", 250, 10))
    if "energy_j" in bad:
        broken.devices[0].energy_j = bad["energy_j"]
    else:
        broken.step_end_time = bad["step_end_time"]
    assert why in (node_problem(broken) or "")
    step = StepRecord(7, "0", 2, [good, broken])
    text = encode_admin_comment([step]) if math.isfinite(bad.get("energy_j", 0.0)) else None
    if text is None:  # JSON cannot carry NaN/inf: a damaged file can; the reader's check is the same
        seen = checked(step)
    else:
        rows = [row("7", AdminComment=text), row("7.0")]
        out, records = build_rows(rows)
        assert "invalid-nodes:1" in out[1]["EnergyFlags"] and "partial" in out[1]["EnergyFlags"]
        assert out[1]["GPUEnergy"] == pytest.approx(2500.0) and out[0]["GPUEnergy"] == pytest.approx(2500.0)
        card = build_card(rows, records["7"])
        assert any(n.startswith("invalid: step 0 node 1") for n in card.notes), card.notes
        runs = job_runs(rows, records)
        assert runs[0].energy_j == pytest.approx(2500.0) and runs[0].invalid
        assert any(n.startswith("invalid: job 7 step 0/node1") for n in record_notes(runs))
        seen = records["7"][0]
    assert seen.total_energy_j == pytest.approx(2500.0) and list(seen.invalid) == [1]


def test_a_plausible_record_passes_the_checks() -> None:
    step = StepRecord(7, "0", 1, [node(0, "a100-1", 10, gpu("gpu0", 700, 10), gpu("gpu1", 0, 10))])
    assert checked(step) is step
    # eight busy GPUs reduced to one "gpu" device per node (AdminComment's size cap) are not "too much"
    busy = StepRecord(7, "0", 1, [node(0, "a100-1", 10, *(gpu(f"gpu{i}", 1000, 10) for i in range(8)))])
    reduced = decode_admin_comment(encode_admin_comment([busy.reduced("node")]))[0]
    assert len(reduced.nodes[0].devices) == 1 and checked(reduced) is reduced


# ---------------------------------------------------------------------- 7. --plot


@pytest.mark.parametrize("where", ["/proc/easlurm-report.png", "/nonexistent-dir/x.png"])
def test_an_unwritable_plot_path_is_one_line_before_the_work(where: str) -> None:
    with pytest.raises(ConfigError, match=r"^--plot .*: cannot write in "):
        check_plot_path(Path(where))


def test_report_plot_to_proc_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from easlurm.cli import main  # here: the whole command line, as a user runs it

    assert main(["report", "--plot", "/proc/easlurm-report.png", "--no-spool"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--plot /proc/easlurm-report.png" in err and "Traceback" not in err


def test_a_plot_failing_late_still_prints_the_table_then_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The folder took the trial file, but the plot's own write fails (the disk filled meanwhile)."""
    import errno

    from easlurm.accounting import report_cli
    from easlurm.cli import main  # here: the whole command line, as a user runs it

    batch = StepRecord(7, "batch", 1, [node(0, "a100-1", 10, gpu("gpu0", 300, 10))])
    rows = [row("7", AdminComment=encode_admin_comment([batch])), row("7.batch")]
    monkeypatch.setattr(report_cli, "_job_runs", lambda *a: job_runs(rows, build_rows(rows)[1]))

    def full(*a: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(report_cli, "plot_report", full)
    assert main(["report", "--plot", str(tmp_path / "r.png"), "--no-spool"]) == 2
    out, err = capsys.readouterr()
    assert "alice" in out and "TOTAL" in out
    assert err.count("\n") == 1 and "--plot" in err and "No space left on device" in err


def test_without_the_spool_a_step_with_no_record_is_flagged_and_the_job_total_partial() -> None:
    """Node 0's agent of step 0 died and the reader cannot see the spool: step 0 says `no-record`, the job
    row `partial` (its total lacks step 0), and seff says so, instead of a blank row and a quiet total."""
    batch = StepRecord(7, "batch", 1, [node(0, "a100-1", 10, gpu("gpu0", 250, 10))])
    rows = [row("7", AdminComment=encode_admin_comment([batch])), row("7.batch"), row("7.0"), row("7.extern")]
    out, records = build_rows(rows)
    assert out[2]["EnergyFlags"] == "no-record" and out[3].get("EnergyFlags") is None
    assert out[0]["EnergyFlags"].split(",") == ["job-total", "partial", "no-record:0"]
    card = build_card(rows, records["7"])
    assert any(n.startswith("partial: step(s) 0 have no record") for n in card.notes), card.notes
