"""`easlurm schedd`: flags reach the daemon; --once --dry-run prints a report and changes nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from schedd_fake import FakeSchedClient, job, node

from easlurm.cli import main

SPEC = "energy-profile=model=resnet50,steps=500,batch=64:128,gpus=1:2"


def test_once_dry_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fake = FakeSchedClient([job("7", comment=SPEC), job("8", comment=SPEC)], [node("h100-1", "h100", used=7)])
    monkeypatch.setattr("easlurm.slurm.sched_client.CliSchedClient", lambda **kw: fake)
    log = tmp_path / "d.jsonl"
    argv = [
        "schedd",
        "--policy",
        "charon",
        "--power-budget",
        "2kW",
        "--interval",
        "2s",
        "--once",
        "--dry-run",
    ]
    assert main([*argv, "--decision-log", str(log), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["error"] is None and len(report["decision"]["starts"]) == 1  # one free GPU
    assert fake.calls == []
    entry = json.loads(log.read_text().splitlines()[-1])
    assert entry["policy"] == "charon" and entry["dry_run"] is True


def test_once_prints_a_table_of_decisions(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--once --dry-run` prints one row per job: placement, predicted energy and time, action, reason."""
    fake = FakeSchedClient([job("7", comment=SPEC), job("8", comment=SPEC)], [node("h100-1", "h100", used=7)])
    monkeypatch.setattr("easlurm.slurm.sched_client.CliSchedClient", lambda **kw: fake)
    argv = ["schedd", "--policy", "charon", "--power-budget", "2kW", "--once", "--dry-run"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("schedd cycle (dry run: nothing changed): 2 job(s)")
    assert lines[1].startswith("power: running ") and "budget 2000 W" in lines[1]
    header = next(i for i, line in enumerate(lines) if line.startswith("JobID"))
    assert lines[header].split() == [
        "JobID", "Placement", "PredPower", "PredEnergy", "PredTime", "Action", "Reason",
    ]  # fmt: skip
    rows = {line.split()[0]: line for line in lines[header + 2 :]}
    started = next(r for r in rows.values() if "@h100-1" in r)
    assert "1xh100@h100-1" in started and ("kJ" in started or "MJ" in started)
    assert re.search(r" \d+:\d\d:\d\d ", started) and "env" in started and "start" in started
    other = next(r for j, r in rows.items() if r is not started)
    assert "hold" in other and "budget" in other
    assert fake.calls == []


def test_report_rows_show_refusals() -> None:
    """A refused placement shows as failed, with Slurm's message, and the unpublished hints."""
    from easlurm.priority.report import decision_rows

    place = {"kind": "place", "job_id": "5", "fields": {"NodeList": "h100-1"}, "reason": "1xh100"}
    env = {"kind": "env", "job_id": "5", "fields": {}, "reason": "placement"}
    report = {
        "decision": {
            "starts": [{"job_id": "5", "node": "h100-1", "n_gpus": 1, "batch": 64, "gpu_type": "h100"}]
        },
        "predictions": {"5": {"energy_j": 3.6e6, "time_s": 3725.0}},
        "actions": [place, env],
        "failed": [{"action": place, "error": "Invalid GRES"}, {"action": env, "error": "not published"}],
    }
    (row,) = decision_rows(report)
    assert (
        row["Placement"] == "1xh100@h100-1" and row["PredEnergy"] == "3.60MJ" and row["PredTime"] == "1:02:05"
    )
    assert row["Action"] == "place(failed),env(failed)" and "place: Invalid GRES" in row["Reason"]


def test_bad_flags_are_one_line_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schedd", "--policy", "nope", "--once"]) == 2
    assert "unknown policy" in capsys.readouterr().err
    assert main(["schedd", "--interval", "soon", "--once"]) == 2


def test_start_up_checks_are_one_line_errors(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """An unknown node in --nodes, a missing --state-save-dir, an unwritable --decision-log: one line on
    stderr and exit 2, before any cycle (no Slurm command but the node list)."""
    fake = FakeSchedClient([job("7", comment=SPEC)], [node("h100-1", "h100"), node("h100-2", "h100")])
    monkeypatch.setattr("easlurm.slurm.sched_client.CliSchedClient", lambda **kw: fake)
    base = ["schedd", "--once", "--dry-run"]
    assert main([*base, "--nodes", "h100-1,h100-9"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown node(s) h100-9" in err and len(err.splitlines()) == 1
    assert main([*base, "--state-save-dir", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--state-save-dir" in err and "not a directory" in err and len(err.splitlines()) == 1
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main([*base, "--decision-log", str(blocker / "log.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--decision-log" in err and "cannot create it" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "file" / "log.jsonl").exists()
    assert fake.calls == []
    assert main([*base, "--nodes", "h100-[1-2]", "--state-save-dir", str(tmp_path)]) == 0
