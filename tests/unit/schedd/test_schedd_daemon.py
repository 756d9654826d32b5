"""The daemon's cycle on an in-memory Slurm: same decisions as the policy, safe when Slurm fails."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from schedd_fake import FakeSchedClient, job, node

from easlurm.model.oracle import Oracle
from easlurm.priority import holds
from easlurm.priority.daemon import Daemon, DaemonConfig, queue_order
from easlurm.priority.metrics import Metrics
from easlurm.priority.policies import get_policy
from easlurm.priority.snapshot import ClusterSnapshot, Decision

NOW = 1_800_000_000.0
SPEC = "energy-profile=model={m},steps=2000,batch=64:128:256,gpus=1:2:4"


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    return Oracle()


def queue(n: int = 4) -> FakeSchedClient:
    models = ["vit-b16", "resnet50", "bert-base", "gpt2"]
    jobs = [
        job(str(i), submit_s=NOW - 100 * i, comment=SPEC.format(m=models[i % len(models)]), gpu_type="h100")
        for i in range(1, n + 1)
    ]
    jobs.append(job("90", comment="plain job"))  # undeclared: Slurm's own order
    jobs.append(job("91", priority=0, reason="JobHeldUser", comment=SPEC.format(m="gpt2")))
    return FakeSchedClient(jobs, [node("h100-1", "h100", used=4), node("a100-1", "a100", used=6)])


def daemon(client: FakeSchedClient, oracle: Oracle, tmp_path: Path, **kw) -> Daemon:  # type: ignore[no-untyped-def]
    cfg = DaemonConfig(
        decision_log=tmp_path / "log.jsonl",
        env_dir=tmp_path / "env",
        log_snapshots=True,
        hold_ttl_s=600.0,
        **kw,
    )
    return Daemon(client, cfg, oracle=oracle, metrics=Metrics(), clock=lambda: NOW)


def logged(tmp_path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]


def test_cycle_applies_the_policy_order(oracle: Oracle, tmp_path: Path) -> None:
    client = queue()
    d = daemon(client, oracle, tmp_path, policy="zeus")
    rep = d.cycle()
    assert rep.error is None and rep.decision is not None and rep.decision.starts
    assert {p.job_id for p in rep.snapshot.pending} == {"1", "2", "3", "4"}  # type: ignore[union-attr]
    factors = [(jid, int(f["SiteFactor"])) for op, jid, f in client.calls if "SiteFactor" in f]
    started = [s.job_id for s in rep.decision.starts]
    boosted = [jid for jid, f in sorted(factors, key=lambda x: -x[1]) if f > 0]
    ranking = queue_order(d.policy, rep.snapshot, oracle)  # type: ignore[arg-type]
    assert boosted[: len(started)] == started  # the jobs to start now come first
    assert boosted[len(started) :] == [j for j in ranking if j not in started]  # then the policy's order
    assert sorted(boosted) == ["1", "2", "3", "4"]
    touched = {jid for _, jid, _ in client.calls}
    assert not touched & {"90", "91"}  # undeclared and user-held jobs untouched
    env = (tmp_path / "env" / f"job-{started[0]}.env").read_text()
    assert f"EASLURM_BATCH_SIZE={rep.decision.starts[0].batch}" in env


def test_parity_logged_snapshot_gives_same_decision(oracle: Oracle, tmp_path: Path) -> None:
    """The logged snapshot, through JSON and a fresh policy and oracle, decides the same as the daemon."""
    for name in ("zeus", "pollux", "themis", "charon"):
        client = queue()
        rep = daemon(client, oracle, tmp_path, policy=name, power_budget_w=6000.0).cycle()
        line = logged(tmp_path)[-1]
        snap = ClusterSnapshot.from_dict(json.loads(json.dumps(line["snapshot"])))
        again = get_policy(name).decide(snap, Oracle())
        assert again == Decision.from_dict(line["decision"]) == rep.decision


def test_dry_run_changes_nothing(oracle: Oracle, tmp_path: Path) -> None:
    client = queue()
    d = daemon(client, oracle, tmp_path, policy="charon", power_budget_w=1500.0, dry_run=True)
    rep = d.cycle()
    assert rep.actions and client.calls == [] and not (tmp_path / "env").exists()
    entry = logged(tmp_path)[-1]
    assert entry["dry_run"] and entry["actions"]


def test_power_budget_holds_the_rest(oracle: Oracle, tmp_path: Path) -> None:
    client = queue()
    rep = daemon(client, oracle, tmp_path, policy="charon", power_budget_w=3200.0).cycle()
    snap, dec = rep.snapshot, rep.decision
    assert snap is not None and dec is not None
    projected = snap.power_w + sum(
        (s.predicted_power_w or 0.0) - s.n_gpus * snap.nodes[0].idle_power_w for s in dec.starts
    )
    assert projected <= 3200.0 + 1e-6
    held = {j.job_id for j in client.jobs() if holds.held_by_us(j, NOW)}
    assert held == {p.job_id for p in snap.pending} - {s.job_id for s in dec.starts}
    assert held  # the budget is tight enough to hold someone


def test_slurm_unreachable_changes_nothing_and_backs_off(oracle: Oracle, tmp_path: Path) -> None:
    client = queue()
    client.fail = True
    d = daemon(client, oracle, tmp_path, policy="zeus", interval_s=0.01)
    rep = d.cycle()
    assert rep.error and "controller" in rep.error and client.calls == []
    assert logged(tmp_path)[-1]["error"] == rep.error
    assert 'easlurm_schedd_errors_total{where="slurm"} 1.0' in d.metrics.text()


def test_run_releases_stale_and_own_holds_only(oracle: Oracle, tmp_path: Path) -> None:
    """A crash left a hold: start-up releases it; holds made while running are released at shutdown."""
    client = queue()
    stale = job("50", reason="BeginTime", admin_comment=holds.HoldMark(int(NOW + 900)).encode())
    client.put(stale)
    d = daemon(client, oracle, tmp_path, policy="charon", power_budget_w=3200.0, interval_s=0.001)
    assert d.run(threading.Event(), max_cycles=2) == 2
    assert not [j for j in client.jobs() if j.pending and holds.mark_of(j) is not None]
    assert client.get("91").reason == "JobHeldUser" and client.get("91").admin_comment == ""
    events = [e["event"] for e in logged(tmp_path)]
    assert events[0] == "start-up" and events[-1] == "shutdown" and events.count("cycle") == 2
    assert ("update", "50", {"StartTime": "now", "AdminComment": ""}) in client.calls


def test_metrics_after_a_cycle(oracle: Oracle, tmp_path: Path) -> None:
    d = daemon(queue(), oracle, tmp_path, policy="zeus")
    d.cycle()
    text = d.metrics.text()
    for name in (
        "easlurm_schedd_cycle_seconds",
        "easlurm_schedd_jobs_scored 4.0",
        "easlurm_schedd_decisions_total",
    ):
        assert name in text


def test_queue_order_ranks_jobs_that_cannot_start_now(oracle: Oracle) -> None:
    """With every GPU busy no job starts, yet Zeus (EDP) and Pollux (time) still rank the queue."""
    client = queue()
    client._nodes = [node("h100-1", "h100", used=8)]
    d = daemon(client, oracle, Path("/nonexistent"), policy="zeus")
    d.cfg.decision_log = None
    rep = d.cycle()
    assert rep.decision is not None and not rep.decision.starts and rep.snapshot is not None
    zeus = queue_order(get_policy("zeus"), rep.snapshot, oracle)
    pollux = queue_order(get_policy("pollux"), rep.snapshot, oracle)
    assert sorted(zeus) == sorted(pollux) == ["1", "2", "3", "4"]
    assert queue_order(get_policy("aurachronos"), rep.snapshot, oracle) == []
