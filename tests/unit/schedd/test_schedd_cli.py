"""`easlurm schedd`: flags reach the daemon; --once --dry-run prints a report and changes nothing."""

from __future__ import annotations

import json
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
    assert main([*argv, "--decision-log", str(log)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["error"] is None and len(report["decision"]["starts"]) == 1  # one free GPU
    assert fake.calls == []
    entry = json.loads(log.read_text().splitlines()[-1])
    assert entry["policy"] == "charon" and entry["dry_run"] is True


def test_bad_flags_are_one_line_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schedd", "--policy", "nope", "--once"]) == 2
    assert "unknown policy" in capsys.readouterr().err
    assert main(["schedd", "--interval", "soon", "--once"]) == 2
