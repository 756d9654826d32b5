"""`easlurm schedd --policy slurm` (or static-cap): Slurm schedules by itself; the daemon only logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from schedd_fake import FakeSchedClient, job, node

from easlurm.cli import main
from easlurm.model.oracle import Oracle
from easlurm.priority.daemon import Daemon, DaemonConfig
from easlurm.priority.metrics import Metrics

SPEC = "energy-profile=model=resnet50,steps=500,batch=64:128,gpus=1:2"


def fake() -> FakeSchedClient:
    jobs = [job("7", comment=SPEC), job("8", comment=SPEC), job("9", comment="plain job")]
    return FakeSchedClient(jobs, [node("h100-1", "h100", used=6)])


@pytest.mark.parametrize("policy", ["slurm", "static-cap-70"])
def test_the_daemon_leaves_slurm_alone_and_logs_what_the_baseline_would_start(
    policy: str, tmp_path: Path
) -> None:
    """A live cycle (not a dry run) issues no Slurm command, under a power budget too: Slurm's order,
    placement and holds are its own. The decision is still logged."""
    client = fake()
    cfg = DaemonConfig(
        policy=policy, decision_log=tmp_path / "log.jsonl", env_dir=tmp_path / "env", power_budget_w=500.0
    )
    rep = Daemon(client, cfg, oracle=Oracle(), metrics=Metrics()).cycle()
    assert rep.error is None and rep.decision is not None and rep.decision.starts
    assert rep.actions == [] and client.calls == []
    entry = json.loads((tmp_path / "log.jsonl").read_text().splitlines()[-1])
    assert entry["policy"] == policy and entry["decision"]["starts"]


@pytest.mark.parametrize("policy", ["slurm", "static-cap", "static-cap-60"])
def test_schedd_once_dry_run_runs_the_baselines(
    policy: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    client = fake()
    monkeypatch.setattr("easlurm.slurm.sched_client.CliSchedClient", lambda **kw: client)
    assert main(["schedd", "--policy", policy, "--once", "--dry-run", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["error"] is None and report["actions"] == [] and client.calls == []


def test_schedd_refuses_a_bad_cap_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    client = fake()
    monkeypatch.setattr("easlurm.slurm.sched_client.CliSchedClient", lambda **kw: client)
    assert main(["schedd", "--policy", "static-cap-150", "--once", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "static-cap-150" in err
