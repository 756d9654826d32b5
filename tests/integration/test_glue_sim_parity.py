"""Parity through the SimPy engine on the live cluster: the daemon's snapshot of real Slurm state (the
one `--log-snapshots` writes), fed into the simulator's own policy call, decides exactly what the daemon
decided, for every policy. Only this test's jobs (names `glue-parity-*`) on a100-1/a100-2 are looked at;
the daemon runs in dry-run, so nothing is changed."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from easlurm.model.oracle import Oracle
from easlurm.priority.daemon import Daemon, DaemonConfig
from easlurm.priority.policies import get_policy
from easlurm.priority.snapshot import ClusterSnapshot, Decision
from easlurm.sim.cluster import ClusterSpec, NodeSpec
from easlurm.sim.engine import SimConfig, Simulator, Truth
from easlurm.slurm.sched_client import CliSchedClient, parse_squeue_json

pytestmark = pytest.mark.slurm
NODES = ("a100-1", "a100-2")
POLICIES = ("zeus", "hades", "aurachronos", "charon", "pollux", "themis", "chronos")


def engine_for(snap: ClusterSnapshot, policy: Any, oracle: Any) -> Simulator:
    cluster = ClusterSpec(tuple(NodeSpec(n.name, n.gpu_type, n.total_gpus) for n in snap.nodes), name="live")
    facts = {n.gpu_type: (n.idle_power_w, n.tdp_w, n.min_power_limit_w) for n in snap.nodes}
    cfg = SimConfig(interval_s=1.0, power_budget_w=snap.power_budget_w, type_facts=facts)
    return Simulator(cluster, [], policy, oracle=oracle, truth=Truth(oracle), config=cfg)


def states(box: Any, ids: list[str]) -> dict[str, str]:
    return {
        j.job_id: j.state for j in parse_squeue_json(box.run(["squeue", "--json"]).stdout) if j.job_id in ids
    }


def test_glue_live_snapshot_decides_the_same_in_the_simpy_engine(slurm_box: Any, tmp_path: Path) -> None:
    blocker = slurm_box.sbatch(
        "-J",
        "glue-parity-block",
        "-p",
        "a100",
        "--nodelist=a100-2",
        "--gres=gpu:a100:8",
        "--wrap",
        "sleep 300",
    )
    ids: list[str] = []
    try:
        end = time.monotonic() + 120
        while states(slurm_box, [blocker]).get(blocker) != "RUNNING":
            assert time.monotonic() < end, "blocker did not start"
            time.sleep(0.3)
        for i, (model, batch) in enumerate(
            (("resnet50", "64:128"), ("vit-b16", "32:64:128"), ("bert-base", "32"))
        ):
            spec = f"model={model},steps={2000 * (i + 1)},batch={batch},gpus=1:2:4"
            ids.append(
                slurm_box.sbatch(
                    "-J",
                    f"glue-parity-{i}",
                    f"--comment=energy-profile={spec}",
                    "-p",
                    "a100",
                    "--nodelist=a100-2",
                    "--gres=gpu:a100:1",
                    "--wrap",
                    "sleep 5",
                )
            )
        time.sleep(1.0)
        assert set(states(slurm_box, ids).values()) == {"PENDING"}
        oracle = Oracle()
        nontrivial = 0
        for name in POLICIES:
            log = tmp_path / f"{name}.jsonl"
            cfg = DaemonConfig(
                policy=name,
                dry_run=True,
                log_snapshots=True,
                decision_log=log,
                name_prefix="glue-parity",
                nodes=NODES,
                power_budget_w=100_000.0 if name == "charon" else None,
            )
            rep = Daemon(CliSchedClient(env=slurm_box.env), cfg, oracle=oracle).cycle()
            assert rep.error is None and rep.decision is not None
            entry = json.loads(log.read_text().splitlines()[-1])
            snap = ClusterSnapshot.from_dict(entry["snapshot"])  # what --log-snapshots wrote
            assert sorted(p.job_id for p in snap.pending) == sorted(ids)
            assert sorted(n.name for n in snap.nodes) == sorted(NODES)
            params: dict[str, Any] = {"aging_weight": cfg.aging_weight}
            if name == "aurachronos":
                params["preempt_cooldown_s"] = cfg.preempt_cooldown_s
            sim = engine_for(snap, get_policy(name, **params), Oracle())
            assert sim.decide(snap) == rep.decision == Decision.from_dict(entry["decision"]), name
            nontrivial += bool(rep.decision.starts)
        free = {n.name: n.free_gpus for n in snap.nodes}
        if free.get("a100-1"):  # GPUs to start on (unless another test holds a100-1 right now)
            assert nontrivial == len(POLICIES)
        assert set(states(slurm_box, ids).values()) == {"PENDING"}  # dry run: nothing started or moved
    finally:
        slurm_box.run(["scancel", blocker, *ids], check=False)
