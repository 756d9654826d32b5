"""Parity through the SimPy engine: a snapshot the daemon built (and logged, through JSON) decides the
same in the simulator's own policy call as in the daemon's, for every policy; and the engine's scheduler
makes its calls through that one function."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from schedd_fake import FakeSchedClient, job, node

from easlurm.model.oracle import Oracle
from easlurm.priority import policy_call
from easlurm.priority.daemon import Daemon, DaemonConfig
from easlurm.priority.metrics import Metrics
from easlurm.priority.policies import get_policy
from easlurm.priority.snapshot import ClusterSnapshot, Decision
from easlurm.sim.cluster import ClusterSpec, NodeSpec
from easlurm.sim.engine import SimConfig, Simulator, Truth
from easlurm.sim.engine import core as engine_core

NOW = 1_800_000_000.0
SPEC = "energy-profile=model={m},steps={s},batch=64:128:256,gpus=1:2:4{extra}"
POLICIES = ("zeus", "hades", "aurachronos", "charon", "pollux", "themis", "chronos")


def engine_for(snap: ClusterSnapshot, policy: Any, oracle: Any) -> Simulator:
    """A simulator over the snapshot's nodes (same names, types, sizes and power facts)."""
    cluster = ClusterSpec(tuple(NodeSpec(n.name, n.gpu_type, n.total_gpus) for n in snap.nodes), name="live")
    facts = {n.gpu_type: (n.idle_power_w, n.tdp_w, n.min_power_limit_w) for n in snap.nodes}
    cfg = SimConfig(interval_s=1.0, power_budget_w=snap.power_budget_w, type_facts=facts)
    return Simulator(cluster, [], policy, oracle=oracle, truth=Truth(oracle), config=cfg)


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    return Oracle()


def cluster_client() -> FakeSchedClient:
    models = ["vit-b16", "resnet50", "bert-base", "gpt2", "vit-b16", "resnet50"]
    jobs = [
        job(
            str(i),
            submit_s=NOW - 300 * i,
            user=f"u{i % 3}",
            gpu_type="h100" if i % 2 else "a100",
            comment=SPEC.format(m=m, s=1000 * i, extra=",deadline=2h,urgent" if i == 3 else ""),
        )
        for i, m in enumerate(models, 1)
    ]
    jobs.append(
        job(
            "40",
            "RUNNING",
            start_s=NOW - 600,
            nodes="h100-1",
            gpu_type="h100",
            gpus_per_node=4,
            comment=SPEC.format(m="gpt2", s=50_000, extra=""),
        )
    )
    nodes = [node("h100-1", "h100", used=4), node("a100-1", "a100", used=6), node("a100-2", "a100")]
    return FakeSchedClient(jobs, nodes, now_s=NOW)


@pytest.mark.parametrize("name", POLICIES)
@pytest.mark.parametrize("budget_w", [None, 3500.0])  # 3500 W: Charon starts one job and holds four
def test_logged_daemon_snapshot_decides_the_same_in_the_engine(
    name: str, budget_w: float | None, oracle: Oracle, tmp_path: Path
) -> None:
    cfg = DaemonConfig(
        policy=name,
        dry_run=True,
        power_budget_w=budget_w,
        log_snapshots=True,
        decision_log=tmp_path / "log.jsonl",
    )
    d = Daemon(cluster_client(), cfg, oracle=oracle, metrics=Metrics(), clock=lambda: NOW)
    rep = d.cycle()
    assert rep.error is None and rep.snapshot is not None and len(rep.snapshot.pending) == 6
    line = json.loads((tmp_path / "log.jsonl").read_text().splitlines()[-1])
    logged = ClusterSnapshot.from_dict(line["snapshot"])
    params: dict[str, Any] = {"aging_weight": 1.0}
    if name == "aurachronos":
        params["preempt_cooldown_s"] = cfg.preempt_cooldown_s
    sim = engine_for(logged, get_policy(name, **params), oracle)
    decision = sim.decide(logged)
    assert decision == rep.decision == Decision.from_dict(line["decision"])
    assert sim.decisions == 1


def test_engine_scheduler_calls_the_shared_function(monkeypatch: pytest.MonkeyPatch, oracle: Oracle) -> None:
    """Every scheduler tick of a real simulation goes through call_policy (the daemon's function)."""
    from easlurm.sim.runner import SimSpec, run_simulation

    calls: list[Decision] = []

    def spy(policy: Any, snap: ClusterSnapshot, orc: Any) -> Decision:
        out = policy_call.call_policy(policy, snap, orc)
        calls.append(out)
        return out

    monkeypatch.setattr(engine_core, "call_policy", spy)
    res = run_simulation(SimSpec(policy="zeus", scenario="C", seed=3, hours=1.0))
    assert calls and len(calls) == res.metrics["decisions"]
    assert sum(len(d.starts) for d in calls) >= res.metrics["completed_jobs"] > 0
