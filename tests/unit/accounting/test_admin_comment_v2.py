"""AdminComment version 2: a compact document that round-trips every step it carries, still reads
version 1, carries at most ADMIN_COMMENT_MAX_STEPS steps in detail and past that each run's total naming
the steps left out (never a silent truncation), and `easlurm sacct` says so on the rows."""

from __future__ import annotations

import json
import logging
import os
import random
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from easlurm.accounting.admin_codec import expand_ranges, key_ranges, pack_v1, unpack
from easlurm.accounting.publish import PublishManifest, publish_from_spool
from easlurm.accounting.sacct_cli import sacct_cmd
from easlurm.accounting.sacct_rows import build_rows
from easlurm.accounting.spool import Spool, write_record
from easlurm.accounting.step_record import (
    ADMIN_COMMENT_MAX_STEPS,
    DeviceRecord,
    NodeRecord,
    StepRecord,
    decode_admin_comment,
    decode_admin_document,
    encode_admin_comment,
    job_total,
)
from easlurm.errors import TraceError
from easlurm.slurm.client import SACCT_DELIMITER

HELPFORMAT_2205 = Path(__file__).parents[2] / "fixtures" / "slurm" / "2205" / "sacct_helpformat.txt"


def rec(step: str, rng: random.Random, run: int = 0, hosts: int = 1, job: int = 7) -> StepRecord:
    """A step on `hosts` nodes with 8 GPUs, a CPU package (and its core sub-domain) and modelled DRAM."""
    nodes = []
    for h in range(hosts):
        dur = rng.uniform(1, 3)
        devs = [
            DeviceRecord(f"gpu{g}", "gpu", rng.uniform(200, 300) * dur, 250.0, 12, False, "nvml")
            for g in range(8)
        ]
        devs += [
            DeviceRecord("package-0", "cpu", rng.uniform(70, 90) * dur, 80.0, 12, False, "rapl"),
            DeviceRecord("core-0", "cpu", 40 * dur, 40.0, 12, False, "rapl", in_total=False),
            DeviceRecord("dram-0", "dram", 5 * dur, 5.0, 12, True, "dram-model"),
        ]
        nodes.append(NodeRecord(h, f"a100-{h + 1}", 1.7e9, dur, devs, 1.7e9 - 0.1, 1.7e9 + dur))
    return StepRecord(job, step, hosts, nodes, spec="gpu,cpu", run=run)


def steps_of(n: int, seed: int = 1, run: int = 0, batch: bool = True) -> list[StepRecord]:
    rng = random.Random(seed)
    out = [rec(str(i), rng, run) for i in range(n)]
    return [*out, rec("batch", rng, run)] if batch else out


def test_every_carried_step_round_trips_exactly() -> None:
    rng = random.Random(2)
    special = rec("3", rng, hosts=2)
    special.missing_nodes = [2]
    special.nnodes = 3
    special.spool_error = "spool full: No space left on device"
    special.nodes[0].devices[0].apportion(0.25, "utilisation")
    special.nodes[1].power_limit_requested_w = 200.0
    special.nodes[1].limit_error = "not root"
    steps = [rec("0", rng), special, rec("batch", rng), rec("0", rng, run=1)]
    text = encode_admin_comment(steps)
    assert text.startswith("easlurm2:") and text == text.lower() and text.isascii()
    back = {(s.run, s.step): s for s in decode_admin_comment(text)}
    assert {k: v.to_dict() for k, v in back.items()} == {(s.run, s.step): s.to_dict() for s in steps}


def test_version_2_is_smaller_than_version_1_for_the_same_steps() -> None:
    steps = steps_of(20)
    v1 = pack_v1({"v": 1, "steps": [s.to_dict() for s in steps], "dropped_steps": 0})
    v2 = encode_admin_comment(steps)
    assert len(v2) < 0.75 * len(v1)


def test_version_1_records_are_still_read() -> None:
    """A record as easlurm wrote it before version 2 (hex of zlib JSON, every derived total included)."""
    steps = steps_of(3)
    old = pack_v1({"v": 1, "steps": [s.to_dict() for s in steps], "dropped_steps": 0})
    assert old.startswith("easlurm1:")
    assert [s.to_dict() for s in decode_admin_comment(old)] == [s.to_dict() for s in steps]
    rows = [{"JobIDRaw": "7", "JobID": "7", "AdminComment": old, "State": "COMPLETED"}]
    rows += [{"JobIDRaw": f"7.{s.step}", "JobID": f"7.{s.step}", "State": "COMPLETED"} for s in steps]
    out, _ = build_rows(rows)
    total = job_total(steps)
    assert total is not None
    assert out[0]["TotalEnergy"] == pytest.approx(total.total_energy_j)
    assert all(r["TotalEnergy"] for r in out)


def test_a_version_1_document_that_dropped_steps_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    steps = steps_of(3)
    old = pack_v1({"v": 1, "steps": [s.to_dict() for s in steps[2:]], "dropped_steps": 2})
    assert decode_admin_document(old).dropped == 2
    with caplog.at_level(logging.WARNING):
        build_rows([{"JobIDRaw": "7", "JobID": "7", "AdminComment": old}])
    assert "left out its 2 oldest steps" in caplog.text


def test_past_the_step_limit_the_newest_are_carried_and_every_step_counts_in_the_total() -> None:
    steps = steps_of(250)
    text = encode_admin_comment(steps)
    raw = unpack(text)
    assert raw is not None and raw["omitted"] == ["0-150"] and raw["limit_steps"] == ADMIN_COMMENT_MAX_STEPS
    doc = decode_admin_document(text)
    assert [s.step for s in doc.steps] == [*map(str, range(151, 250)), "batch"]
    (total,) = doc.totals
    assert total.omitted == [str(i) for i in range(151)] and total.step == "job"
    exact = job_total(steps)
    assert exact is not None
    for kind in ("gpu", "cpu", "dram", None):
        assert total.kind_energy_j(kind) == pytest.approx(exact.kind_energy_j(kind), rel=1e-12)
    assert total.duration_s == pytest.approx(exact.duration_s)


def test_the_size_cap_reduces_detail_then_carries_fewer_steps_never_silently() -> None:
    steps = steps_of(80)
    for cap in (40_000, 8_000, 2_500):
        text = encode_admin_comment(steps, max_chars=cap)
        assert len(text) <= cap
        doc = decode_admin_document(text)
        assert len(doc.steps) + len(doc.omitted) == len(steps)
        assert sorted(s.key for s in doc.steps) == sorted(set(s.key for s in steps) - set(doc.omitted))
        if doc.omitted:
            assert doc.totals[0].total_energy_j == pytest.approx(job_total(steps).total_energy_j)  # type: ignore[union-attr]
    assert decode_admin_document(encode_admin_comment(steps, max_chars=2_500)).steps[-1].step == "batch"


def test_each_run_of_a_requeued_job_keeps_its_own_total() -> None:
    run0, run1 = steps_of(120, seed=1, run=0), steps_of(130, seed=2, run=1)
    doc = decode_admin_document(encode_admin_comment([*run0, *run1]))
    assert [t.run for t in doc.totals] == [0, 1]
    assert sorted(doc.totals[0].omitted) == sorted(s.key for s in run0)  # the newest 100: run 1's
    assert "0+r1" in doc.totals[1].omitted and "batch+r1" not in doc.totals[1].omitted
    for t, run in zip(doc.totals, (run0, run1), strict=True):
        assert t.total_energy_j == pytest.approx(job_total(run).total_energy_j)  # type: ignore[union-attr]


def test_key_ranges_round_trip_and_damaged_ranges_are_refused() -> None:
    keys = ["0", "1", "2", "5", "7", "8", "batch", "0+r1", "1+r1", "4+r1"]
    items = key_ranges(keys)
    assert items == ["batch", "0-2", "5", "7-8", "0+r1-1+r1", "4+r1"]
    assert sorted(expand_ranges(items)) == sorted(keys)
    for bad in (["0-99999999999"], ["a-b"], ["0+r1-3"], "0-3"):
        with pytest.raises(TraceError, match="damaged"):
            expand_ranges(bad)


def sacct_rows_of(steps: list[StepRecord], comment: str) -> list[dict[str, str]]:
    rows = [{"JobIDRaw": "7", "JobID": "7", "AdminComment": comment, "State": "COMPLETED"}]
    return rows + [{"JobIDRaw": f"7.{s.step}", "JobID": f"7.{s.step}", "State": "COMPLETED"} for s in steps]


def test_rows_say_which_steps_the_document_left_out(caplog: pytest.LogCaptureFixture) -> None:
    steps = steps_of(150)
    rows = sacct_rows_of(steps, encode_admin_comment(steps))
    with caplog.at_level(logging.WARNING):
        out, _ = build_rows(rows)
    job, by_step = out[0], {r["JobID"]: r for r in out[1:]}
    flags = job["EnergyFlags"].split(",")
    assert flags[0] == "job-total" and flags[-1] == "detail-omitted:51"
    assert job["TotalEnergy"] == pytest.approx(job_total(steps).total_energy_j)  # type: ignore[union-attr]
    assert by_step["7.0"]["EnergyFlags"] == "omitted" and by_step["7.0"].get("TotalEnergy") is None
    assert by_step["7.50"]["EnergyFlags"] == "omitted" and by_step["7.51"]["TotalEnergy"]
    assert "51 step record(s) of run 0 are only in the spool files" in caplog.text


def write_spool(root: Path, steps: list[StepRecord]) -> Spool:
    spool = Spool(root)
    spool.job_dir(7).mkdir(parents=True, exist_ok=True)
    for s in steps:
        write_record(spool.step_file(7, s.key), s.to_dict(), os.getgid())
    return spool


def test_the_spool_gives_the_left_out_steps_back(tmp_path: Path) -> None:
    steps = steps_of(150)
    write_spool(tmp_path, steps)
    out, _ = build_rows(sacct_rows_of(steps, encode_admin_comment(steps)), spool=tmp_path)
    assert "detail-omitted" not in out[0]["EnergyFlags"]
    assert out[0]["TotalEnergy"] == pytest.approx(job_total(steps).total_energy_j)  # type: ignore[union-attr]
    assert all(r["TotalEnergy"] for r in out)
    assert out[1]["EnergyFlags"].startswith("spool,") and not out[-1]["EnergyFlags"].startswith("spool")


def test_easlurm_sacct_shows_the_marker_and_says_where_the_steps_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The command itself: the job row's flag, the left-out steps' flag, and a warning (the easlurm
    command logs warnings to stderr)."""
    steps = steps_of(120, batch=False)
    rows = [["7", "7", encode_admin_comment(steps), "COMPLETED"]]  # the fields the command asks for
    rows += [[f"7.{s.step}", f"7.{s.step}", "", "COMPLETED"] for s in steps]
    (tmp_path / "out").write_text("".join(SACCT_DELIMITER.join(r) + "\n" for r in rows))
    script = tmp_path / "sacct"
    script.write_text(
        f'#!/bin/sh\n[ "$1" = --helpformat ] && exec cat {HELPFORMAT_2205}\ncat {tmp_path}/out\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    caplog.set_level(logging.WARNING)
    res = CliRunner().invoke(
        sacct_cmd,
        ["-j", "7", "--no-spool", "-P", "-o", "JobID,TotalEnergyRaw,EnergyFlags"],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    total = job_total(steps)
    assert total is not None
    job_id, energy, flags = lines[1].split("|")
    assert job_id == "7" and flags.startswith("job-total,") and flags.endswith(",detail-omitted:20")
    assert float(energy) == pytest.approx(total.total_energy_j, rel=1e-6)
    assert lines[2] == "7.0||omitted" and lines[-1].startswith("7.119|") and lines[-1].split("|")[1]
    assert "20 step record(s) of run 0 are only in the spool files" in caplog.text


class Recorder:
    """Takes what a publication sets (the agent's Slurm client, without Slurm)."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def set_admin_comment(self, job_id: int, text: str) -> None:
        self.texts.append(text)

    def show_job(self, job_id: int) -> dict[str, str]:
        return {"AdminComment": self.texts[-1] if self.texts else ""}


class Place:
    def __init__(self, spool: Spool, step: str) -> None:
        self.spool, self.step, self.job_id = spool, step, 7
        self.nnodes, self.spec, self.restart, self.gid = 1, "gpu,cpu", 0, os.getgid()
        self.job_dir = spool.job_dir(7)
        self.step_file = spool.step_file(7, step)
        self.manifest_file = spool.manifest_file(7)

    def node_file(self, node_id: int) -> Path:
        return self.spool.node_file(7, self.step, node_id)


def test_a_publication_reads_only_the_files_that_changed_and_the_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Publication stays linear: with the manifest warm, publishing step N reads its own file and the
    newest ADMIN_COMMENT_MAX_STEPS (carried in full), not every step file of the job."""
    steps = steps_of(300, batch=False)
    spool = write_spool(tmp_path, steps[:299])
    client = Recorder()
    assert publish_from_spool(Place(spool, "298"), client)
    reads: list[str] = []
    real = StepRecord.from_dict
    monkeypatch.setattr(StepRecord, "from_dict", lambda d: (reads.append(str(d.get("step"))), real(d))[1])
    write_record(spool.step_file(7, "299"), steps[299].to_dict(), os.getgid())
    assert publish_from_spool(Place(spool, "299"), client)
    assert len(reads) <= 2 * ADMIN_COMMENT_MAX_STEPS + 5  # the summaries held apart, the newest in full
    assert "0" not in reads and "150" not in reads  # summed into the run's total, not read again
    doc = decode_admin_document(client.texts[-1])
    assert doc.steps[-1].step == "299" and len(doc.omitted) == 200
    assert doc.totals[0].total_energy_j == pytest.approx(job_total(steps).total_energy_j)  # type: ignore[union-attr]
    assert publish_from_spool(Place(spool, "299"), client) and len(client.texts) == 2  # carried already


def test_a_step_file_rewritten_later_is_read_again(tmp_path: Path) -> None:
    """A late node's record rewrites a step file: the next publication's total has it."""
    steps = steps_of(150, batch=False)
    spool = write_spool(tmp_path, steps)
    client = Recorder()
    publish_from_spool(Place(spool, "149"), client)
    grown = rec("0", random.Random(9), hosts=2)
    write_record(spool.step_file(7, "0"), grown.to_dict(), os.getgid())
    publish_from_spool(Place(spool, "0"), client)
    expected = job_total([grown, *steps[1:]])
    assert expected is not None
    assert decode_admin_document(client.texts[-1]).totals[0].total_energy_j == pytest.approx(
        expected.total_energy_j
    )
    manifest = json.loads(spool.manifest_file(7).read_text())
    assert manifest["v"] == 2 and len(manifest["stats"]) == 150 and len(manifest["folded_names"]) == 50
    assert "step-0.json" in PublishManifest.load(spool.manifest_file(7)).folded_names


def test_a_version_1_manifest_reads_every_file_once(tmp_path: Path) -> None:
    steps = steps_of(5, batch=False)
    spool = write_spool(tmp_path, steps)
    write_record(spool.manifest_file(7), {"step-4.json": "ab" * 32}, os.getgid())
    client = Recorder()
    assert publish_from_spool(Place(spool, "4"), client)
    assert len(decode_admin_comment(client.texts[-1])) == 5


def test_a_total_over_records_of_mixed_detail_counts_each_kind_once() -> None:
    """AdminComment carries older steps summed per kind (device `gpu`) beside the spool's files (`gpu0`
    ...): the batch node's GPU must be raised to the steps' sum once, not get the summed steps added as
    another device."""
    steps = steps_of(40)
    batch = steps[-1]
    for dev in batch.nodes[0].devices:  # the batch step spans the others: it read more than their sum
        dev.energy_j = (dev.energy_j or 0.0) * 100
    mixed = [s.reduced("node") if i % 2 else s for i, s in enumerate(steps[:-1])] + [batch]
    total, exact = job_total(mixed), job_total(steps)
    assert total is not None and exact is not None
    assert total.total_energy_j == pytest.approx(batch.total_energy_j)
    assert total.total_energy_j == pytest.approx(exact.total_energy_j)
