"""Scheduler daemon cycle latency: policy time on synthetic queues, Slurm command time on the local cluster.

    python benchmarks/bench_schedd.py                 # policy part: 1,000 and 10,000 pending jobs
    python benchmarks/bench_schedd.py --slurm         # plus the Slurm part (needs scripts/slurm-box up)
Policy part: Slurm records -> snapshot, decide, queue order, plan (cold = first cycle with the oracle's
predictions, warm = the next cycles). Slurm part: 1,000 held jobs, then the daemon's reads
(squeue/sinfo --json, sprio, sacct, the daemon's whole read) and one scontrol update, one by one.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import time

from easlurm.accounting.step_record import parse_spec
from easlurm.model.oracle import Oracle
from easlurm.priority.apply import PlanContext, plan
from easlurm.priority.daemon import queue_order
from easlurm.priority.policies import get_policy
from easlurm.priority.slurm_snapshot import (
    SnapshotInputs,
    build_snapshot,
    gpu_facts_from_catalogue,
    oracle_power,
)
from easlurm.slurm.sched_client import CliSchedClient, SlurmJob, SlurmNode

MODELS = ("resnet50", "vit-b16", "bert-base", "gpt2", "vgg16", "bert-large")


def synthetic(n_pending: int, seed: int = 0) -> SnapshotInputs:
    """64 nodes of 8 GPUs (a100 and h100), 200 running jobs, n_pending declared jobs from 200 users."""
    rng = random.Random(seed)
    nodes = [
        SlurmNode(f"{t}-{i}", "mixed", (), (t, "all"), t, 8, rng.choice((0, 4, 6, 8)))
        for t in ("a100", "h100")
        for i in range(32)
    ]
    now = 1_800_000_000.0
    jobs, specs = [], {}
    for i in range(n_pending + 200):
        running = i < 200
        jid = str(1000 + i)
        gpus = rng.choice((1, 2, 4, 8))
        node = nodes[rng.randrange(len(nodes))]
        jobs.append(
            SlurmJob(
                jid,
                f"b{i}",
                f"u{rng.randrange(200)}",
                "RUNNING" if running else "PENDING",
                "None" if running else "Priority",
                node.gpu_type or "all",
                node.name if running else "",
                1,
                now - rng.uniform(0, 86400),
                now - 60 if running else None,
                None,
                1000,
                gpus,
                node.gpu_type if running else None,
                requeue=True,
            )
        )
        batches = ":".join(str(b) for b in sorted(rng.sample((32, 64, 128, 256), rng.randint(1, 3))))
        opts = ":".join(str(g) for g in sorted({gpus, *rng.sample((1, 2, 4, 8), rng.randint(0, 2))}))
        specs[jid] = parse_spec(
            f"model={rng.choice(MODELS)},steps={rng.randrange(1000, 50000)},batch={batches},gpus={opts}"
            + (",urgent,deadline=4h" if rng.random() < 0.05 else "")
        )
    return SnapshotInputs(now_s=now, jobs=jobs, nodes=nodes, specs=specs, user_gpu_s={})


def bench_policy(n: int, policies: list[str], cycles: int) -> None:
    inputs = synthetic(n)
    oracle = Oracle()
    facts = gpu_facts_from_catalogue(oracle.catalogue)
    predict = oracle_power(oracle)
    for name in policies:
        policy = get_policy(name)
        # Charon: a budget 10 kW above the cluster's power now, so that some jobs start and the rest wait
        base_w = build_snapshot(inputs, facts, predict).power_w
        budget = base_w + 10_000.0 if name == "charon" else None
        times: list[dict[str, float]] = []
        for _ in range(cycles):
            t0 = time.perf_counter()
            snap = build_snapshot(inputs, facts, predict, budget)
            t1 = time.perf_counter()
            decision = policy.decide(snap, oracle)
            t2 = time.perf_counter()
            ranking = queue_order(policy, snap, oracle)
            t3 = time.perf_counter()
            ctx = PlanContext(
                snap.time_s,
                {j.job_id: j for j in inputs.jobs},
                {x.name: x for x in inputs.nodes},
                frozenset(inputs.specs),
                {},
                600.0,
                budget is not None,
            )
            actions = plan(decision, snap, ctx, ranking)
            t4 = time.perf_counter()
            times.append({"snapshot": t1 - t0, "decide": t2 - t1, "order": t3 - t2, "plan": t4 - t3})
        cold, warm = times[0], times[1:] or times
        med = {k: statistics.median(t[k] for t in warm) for k in cold}
        total_cold, total_warm = sum(cold.values()), sum(med.values())
        print(
            f"{n:>6} pending  {name:<12} cold {total_cold:7.3f} s   warm {total_warm:7.3f} s   "
            + "  ".join(f"{k} {v * 1000:7.1f} ms" for k, v in med.items())
            + f"   starts {len(decision.starts)}  actions {len(actions)}"
        )


def bench_slurm(n: int, repeats: int) -> None:
    """n individually submitted held jobs (a held array stays one record in squeue, which flatters it)."""
    from easlurm.priority.daemon import Daemon, DaemonConfig

    client = CliSchedClient()
    spec = "energy-profile=model=vit-b16,steps=2000,batch=64:128,gpus=1:2"
    ids = []
    t0 = time.perf_counter()
    try:
        for i in range(n):
            out = subprocess.run(
                [
                    "sbatch",
                    "--parsable",
                    "--hold",
                    "-J",
                    f"schedd-bench-{i}",
                    "-p",
                    "h100",
                    "--gres=gpu:h100:1",
                    f"--comment={spec}",
                    "--wrap",
                    "sleep 1",
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            ids.append(out.stdout.strip().split(";")[0])
        print(
            f"Slurm part: {n} held jobs submitted in {time.perf_counter() - t0:.1f} s; median of {repeats}:"
        )
        daemon = Daemon(client, DaemonConfig(name_prefix="schedd-bench"))
        calls = {
            "squeue --json": client.jobs,
            "sinfo --json": client.nodes,
            "sprio": client.site_factors,
            "sacct (7 days)": lambda: client.user_gpu_s(time.time() - 7 * 86400),
            "daemon read": lambda: daemon.read(time.time()),
            "scontrol update": lambda: client.update_job(ids[0], {"SiteFactor": "1"}),
        }
        for name, fn in calls.items():
            samples = []
            for _ in range(repeats):
                t1 = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - t1)
            print(f"  {name:<16} {statistics.median(samples) * 1000:8.1f} ms")
        print("  (daemon read = squeue + sinfo + sprio + parsing + SPEC lookup; sacct every 5 min only)")
    finally:
        for k in range(0, len(ids), 500):
            subprocess.run(["scancel", *ids[k : k + 500]], check=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--policies", default="zeus,pollux,charon,aurachronos")
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--slurm", action="store_true", help="also time the Slurm commands (local cluster)")
    ap.add_argument("--slurm-jobs", type=int, default=1000)
    args = ap.parse_args()
    print(f"policy part (synthetic queue, 64 nodes x 8 GPUs, 200 running jobs; pid {os.getpid()}):")
    for n in (int(s) for s in args.sizes.split(",")):
        bench_policy(n, args.policies.split(","), args.cycles)
    if args.slurm:
        bench_slurm(args.slurm_jobs, 5)


if __name__ == "__main__":
    main()
