"""`easlurm sacct`: energy columns next to native fields, detail rows, -P and --json, on recorded output."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from easlurm.accounting.sacct_cli import sacct_cmd
from easlurm.accounting.sacct_rows import build_rows, format_cell, node_values, step_values
from easlurm.accounting.step_record import (
    DeviceRecord,
    NodeRecord,
    StepRecord,
    decode_admin_comment,
    encode_admin_comment,
)
from easlurm.errors import ConfigError
from easlurm.slurm.client import SACCT_DELIMITER

DATA = Path(__file__).parent / "data"


def record(job: int, step: str, watts: float, nodes: int = 2, dur: float = 4.0) -> StepRecord:
    return StepRecord(
        job,
        step,
        nodes,
        [
            NodeRecord(
                i,
                f"a100-{i + 1}",
                1.7e9,
                dur,
                [
                    DeviceRecord("gpu0", "gpu", watts * dur, watts, 40, False, "nvml-energy"),
                    DeviceRecord("package-0", "cpu", 50 * dur, 50.0, 40, False, "rapl"),
                    DeviceRecord("dram-0", "dram", 4 * dur, 4.0, 40, True, "dram-model"),
                ],
            )
            for i in range(nodes)
        ],
    )


HELPFORMAT_2205 = Path(__file__).parents[2] / "fixtures" / "slurm" / "2205" / "sacct_helpformat.txt"


def sacct_lines(rows: list[list[str]]) -> str:
    return "".join(SACCT_DELIMITER.join(r) + "\n" for r in rows)


@pytest.fixture
def fake_sacct(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A sacct stand-in answering with a profiled job (9: steps batch and 0) and an unprofiled one (10)."""
    comment = encode_admin_comment([record(9, "0", 250.0), record(9, "batch", 100.0, nodes=1)])
    out = tmp_path / "out"
    script = tmp_path / "sacct"
    # `sacct --helpformat` answers with the field list recorded from Slurm 22.05
    script.write_text(
        f'#!/bin/sh\n[ "$1" = --helpformat ] && exec cat {HELPFORMAT_2205}\n'
        f'printf "%s\\n" "$@" > {tmp_path}/argv\ncat {out}\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_COMMENT", comment)
    return out


def write_answer(out: Path, fields: list[str], comment: str) -> None:
    base = {
        "9": {
            "JobName": "train",
            "State": "COMPLETED",
            "Elapsed": "00:00:05",
            "NNodes": "2",
            "ConsumedEnergy": "0",
        },
        "10": {
            "JobName": "plain",
            "State": "COMPLETED",
            "Elapsed": "00:00:01",
            "NNodes": "1",
            "ConsumedEnergy": "0",
        },
    }
    rows = []
    for raw in ("9", "9.batch", "9.0", "10", "10.0"):
        job = raw.split(".")[0]
        vals = {"JobIDRaw": raw, "JobID": raw, "AdminComment": comment if raw == "9" else "", **base[job]}
        rows.append([vals.get(f, "") for f in fields])
    out.write_text(sacct_lines(rows))


def argv_fields(tmp_path: Path) -> list[str]:
    argv = (tmp_path / "argv").read_text().splitlines()
    return next(a for a in argv if a.startswith("--format=")).removeprefix("--format=").split(",")


def invoke(fake: Path, args: list[str], fields: list[str]) -> str:
    import os

    write_answer(fake, fields, os.environ["FAKE_COMMENT"])
    res = CliRunner().invoke(sacct_cmd, [*args, "--no-spool"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def test_table_shows_energy_per_step_and_nothing_for_unprofiled(fake_sacct: Path) -> None:
    fields = ["JobIDRaw", "JobID", "AdminComment", "JobName", "State", "Elapsed", "NNodes"]
    out = invoke(fake_sacct, ["-j", "9,10"], fields)
    assert argv_fields(fake_sacct.parent) == fields  # native columns requested from sacct, explicitly
    lines = out.splitlines()
    assert lines[0].split() == [
        "JobID",
        "JobName",
        "State",
        "Elapsed",
        "NNodes",
        "GPUEnergy",
        "CPUEnergy",
        "DRAMEnergy",
        "TotalEnergy",
        "AvgPower",
        "EDP",
    ]
    row = {ln.split()[0]: ln.split() for ln in lines[2:]}
    assert row["9.0"][5] == format_energy_j(2 * 250 * 4.0)
    assert row["9.batch"][5] == format_energy_j(100 * 4.0)
    assert len(row["10.0"]) == 5 and len(row["10"]) == 5  # no record: blank energy columns
    # the job row: the batch step (node a100-1, whole job) plus step 0's other node (a100-2) only; the batch
    # record read less of a100-1's GPU (400 J) than step 0 did (1 kJ): the job counts at least the step's
    assert row["9"][5] == format_energy_j(250 * 4.0 + 250 * 4.0)


def format_energy_j(j: float) -> str:
    return str(format_cell("GPUEnergy", j))


def test_parsable_with_native_and_energy_columns(fake_sacct: Path) -> None:
    fields = ["JobIDRaw", "JobID", "AdminComment", "ConsumedEnergy", "State"]
    out = invoke(
        fake_sacct,
        ["-j", "9", "-P", "-n", "--format", "jobid,consumedenergy,totalenergy,state,energyflags"],
        fields,
    )
    lines = out.splitlines()
    assert lines[2].split("|")[0] == "9.0"
    _jobid, consumed, total, state, flags = lines[2].split("|")
    assert consumed == "0" and state == "COMPLETED"
    assert total == format_energy_j(2 * (250 + 50 + 4) * 4.0)
    assert flags == "modelled:dram"


def test_json_has_si_numbers_and_full_records(fake_sacct: Path) -> None:
    fields = ["JobIDRaw", "JobID", "AdminComment", "JobName", "State", "Elapsed", "NNodes"]
    doc = json.loads(invoke(fake_sacct, ["-j", "9", "--json"], fields))
    assert doc["schema_version"] == 2
    step0 = next(r for r in doc["rows"] if r["job_id"] == "9.0")
    # sacct's own fields: numbers in the unit their key names; IDs and states stay text
    assert step0["n_nodes"] == 2 and step0["elapsed_s"] == 5.0 and step0["state"] == "COMPLETED"
    assert step0["gpu_energy_j"] == pytest.approx(2000.0)
    assert step0["mean_power_w"] == pytest.approx(2 * 304.0)
    assert step0["edp_j_s"] == pytest.approx(2 * 304 * 4.0 * 4.0)
    assert [n["host"] for n in step0["energy_record"]["nodes"]] == ["a100-1", "a100-2"]
    assert next(r for r in doc["rows"] if r["job_id"] == "10.0")["total_energy_j"] is None


def test_detail_rows_per_node_and_device() -> None:
    comment = encode_admin_comment([record(9, "0", 250.0)])
    rows, records = build_rows(
        [
            {"JobIDRaw": "9", "JobID": "9", "AdminComment": comment},
            {"JobIDRaw": "9.0", "JobID": "9.0", "AdminComment": ""},
        ],
        detail="device",
    )
    assert [r.get("Node") for r in rows] == [
        None,
        None,
        "a100-1",
        "a100-1",
        "a100-1",
        "a100-1",
        "a100-2",
        "a100-2",
        "a100-2",
        "a100-2",
    ]
    gpu_rows = [r for r in rows if r.get("Device") == "gpu0"]
    assert [r["GPUEnergy"] for r in gpu_rows] == [1000.0, 1000.0]
    assert [s.step for s in records["9"]] == ["0"]


def test_damaged_record_is_flagged_not_fatal() -> None:
    comment = encode_admin_comment([record(9, "0", 250.0)])[:80]
    rows, _ = build_rows(
        [
            {"JobIDRaw": "9", "JobID": "9", "AdminComment": comment},
            {"JobIDRaw": "9.0", "JobID": "9.0", "AdminComment": ""},
        ]
    )
    assert rows[1]["EnergyFlags"] == "damaged" and rows[1].get("TotalEnergy") is None


def test_unknown_column_is_a_user_error(fake_sacct: Path) -> None:
    with pytest.raises(ConfigError, match="unknown column 'Joules'"):
        CliRunner().invoke(sacct_cmd, ["--format", "JobID,Joules"], catch_exceptions=False)


def test_recorded_real_output_decodes(monkeypatch: pytest.MonkeyPatch) -> None:
    from easlurm.slurm.client import parse_sacct_parsable

    fields = ["JobIDRaw", "JobID", "AdminComment", "JobName", "State", "Elapsed", "NNodes", "ConsumedEnergy"]
    rows, _ = build_rows(parse_sacct_parsable((DATA / "sacct_profiled_job.txt").read_text(), fields), "node")
    step_rows = [r for r in rows if r.get("_record") is not None]
    assert {r["JobID"].split(".")[1] for r in step_rows} == {"batch", "0", "1"}
    for r in step_rows:
        assert r["TotalEnergy"] == pytest.approx(
            r["GPUEnergy"] + (r["CPUEnergy"] or 0) + (r["DRAMEnergy"] or 0)
        )


def test_spool_files_fill_in_for_jobs_without_admin_comment(tmp_path: Path) -> None:
    """A cancelled job: no AdminComment, but the step records are in the spool (flagged `spool`)."""
    (tmp_path / "11").mkdir()
    (tmp_path / "11" / "step-0.json").write_text(json.dumps(record(11, "0", 300.0).to_dict()))
    (tmp_path / "11" / "step-1.json").write_text("{broken")
    sacct_rows = [
        {"JobIDRaw": "11", "JobID": "11", "AdminComment": ""},
        {"JobIDRaw": "11.0", "JobID": "11.0", "AdminComment": ""},
        {"JobIDRaw": "11.1", "JobID": "11.1", "AdminComment": ""},
    ]
    rows, _ = build_rows(sacct_rows, spool=tmp_path)
    assert rows[1]["GPUEnergy"] == pytest.approx(2 * 300.0 * 4.0)
    assert rows[1]["EnergyFlags"].split(",")[0] == "spool"
    assert rows[2].get("TotalEnergy") is None
    rows, _ = build_rows(sacct_rows)  # without the spool: nothing
    assert rows[1].get("GPUEnergy") is None


def test_a_requested_device_without_sensor_is_flagged_apart_from_the_dram_model() -> None:
    """A node whose step asked for GPUs but had no GPU sensor: `nosensor:gpu` (unknown, not zero) on the
    step and its node row, distinct from `modelled:dram`; it survives every AdminComment detail level."""
    rec = record(9, "0", 250.0)
    rec.nodes[1].devices = [d for d in rec.nodes[1].devices if d.kind != "gpu"]
    rec.nodes[1].no_sensor = ["gpu"]
    for detail in ("device", "node", "step"):
        (back,) = decode_admin_comment(encode_admin_comment([rec.reduced(detail)]))
        assert back.no_sensor_kinds == ["gpu"], detail
        assert step_values(back)["EnergyFlags"].split(",")[:2] == ["nosensor:gpu", "modelled:dram"], detail
    assert node_values(rec.nodes[1])["EnergyFlags"] == "nosensor:gpu"
    assert node_values(rec.nodes[0])["EnergyFlags"] == ""
    assert rec.to_dict()["no_sensor"] == ["gpu"]


def test_p_ends_each_line_with_the_delimiter_and_P_does_not(fake_sacct: Path) -> None:
    """As sacct: -p puts the delimiter after every field (header too), -P only between fields."""
    fields = ["JobIDRaw", "JobID", "AdminComment", "State"]
    out_p = invoke(fake_sacct, ["-j", "9", "-p", "--format", "jobid,state,totalenergy"], fields)
    out_big_p = invoke(fake_sacct, ["-j", "9", "-P", "--format", "jobid,state,totalenergy"], fields)
    assert out_p.splitlines()[0] == "JobID|State|TotalEnergy|"
    assert [ln + "|" for ln in out_big_p.splitlines()] == out_p.splitlines()
    semi = invoke(fake_sacct, ["-j", "9", "-P", "--delimiter", ";", "-o", "jobid,state"], fields)
    assert semi.splitlines()[:2] == ["JobID;State", "9;COMPLETED"]


def test_raw_columns_are_plain_numbers_in_si_units(fake_sacct: Path) -> None:
    fields = ["JobIDRaw", "JobID", "AdminComment", "State"]
    out = invoke(
        fake_sacct,
        ["-j", "9", "-P", "-n", "-o", "jobid,totalenergy,totalenergyraw,edpraw,avgpowerraw"],
        fields,
    )
    row = {ln.split("|")[0]: ln.split("|") for ln in out.splitlines()}
    total_j = 2 * (250 + 50 + 4) * 4.0
    assert row["9.0"][1] == "2.43kJ" and row["9.0"][2] == "2432"
    assert float(row["9.0"][3]) == pytest.approx(total_j * 4.0) and float(row["9.0"][4]) == 608.0


def test_units_and_noconvert_reach_sacct_and_the_energy_columns(fake_sacct: Path) -> None:
    fields = ["JobIDRaw", "JobID", "AdminComment", "State"]
    out = invoke(fake_sacct, ["-j", "9", "-P", "-n", "--units=M", "-o", "jobid,totalenergy,edp"], fields)
    assert "--units=M" in (fake_sacct.parent / "argv").read_text().splitlines()
    assert out.splitlines()[2].split("|")[1:] == ["0.00MJ", "0.01MJ*s"]
    out = invoke(
        fake_sacct, ["-j", "9", "-P", "-n", "--noconvert", "-o", "jobid,totalenergy,avgpower"], fields
    )
    assert "--noconvert" in (fake_sacct.parent / "argv").read_text().splitlines()
    assert out.splitlines()[2].split("|")[1:] == ["2432.00J", "608.0W"]


def test_width_suffix_sets_width_and_alignment_as_sacct(fake_sacct: Path) -> None:
    """JobID%-8 left-aligns in 8 characters, State%4 right-aligns and cuts with '+'."""
    fields = ["JobIDRaw", "JobID", "AdminComment", "State"]
    out = invoke(fake_sacct, ["-j", "9", "-o", "JobID%-8,State%4,TotalEnergy%9"], fields)
    lines = out.splitlines()
    assert lines[0] == "JobID    Stat TotalEner"
    assert lines[1] == "-------- ---- ---------"
    assert lines[4] == "9.0      COM+    2.43kJ"


def test_delimiter_inside_a_value_is_replaced_and_reported(fake_sacct: Path) -> None:
    """sacct -P prints a '|' in a job name unchanged, so that line has one field too many; easlurm keeps
    every line parsable and says so on stderr."""
    import os

    fields = ["JobIDRaw", "JobID", "AdminComment", "JobName", "State"]
    write_answer(fake_sacct, fields, os.environ["FAKE_COMMENT"])
    text = fake_sacct.read_text().replace("train", "a|b")
    fake_sacct.write_text(text)
    res = CliRunner().invoke(sacct_cmd, ["-j", "9", "-P", "-o", "jobid,jobname,state", "--no-spool"])
    assert res.exit_code == 0
    assert res.stdout.splitlines()[1] == "9|a/b|COMPLETED"
    assert "JobName" in res.stderr and "delimiter '|'" in res.stderr
