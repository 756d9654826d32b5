"""Every decision of a few daemon cycles on an offline queue, as one JSON document, to compare two trees.

    python benchmarks/schedd_decisions.py --policy zeus > after.json
    PYTHONPATH=/tmp/before/src python benchmarks/schedd_decisions.py --policy zeus > before.json
    cmp before.json after.json

The queue: N declared jobs (four models, 1-4 GPUs, typed or not, a tenth urgent with a deadline, 20
users), 5 partly busy nodes, in the unit tests' in-memory client; each cycle Slurm starts the first 4
jobs the daemon started, and the clock moves 30 s. Printed: each cycle's decision, actions, job views
and predictions, then every scontrol update the daemon sent. See docs/schedd-scale.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
from pathlib import Path
from typing import Any

from easlurm.priority.daemon import Daemon, DaemonConfig

MODELS = ("vit-b16", "resnet50", "bert-base", "gpt2")


def queue(n: int, seed: int) -> Any:
    """The offline queue in the unit tests' in-memory client."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit" / "schedd"))
    from schedd_fake import FakeSchedClient, job, node  # here: the client lives with the unit tests

    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        spec = (
            f"energy-profile=model={rng.choice(MODELS)},steps={rng.randrange(500, 5000)},"
            f"batch={rng.choice(['64', '64:128', '32:64:128'])},gpus={rng.choice(['1', '1:2', '2:4', '1:2:4:8'])}"
        )
        if rng.random() < 0.1:
            spec += ",urgent,deadline=2h"
        gpu_type = rng.choice(["h100", "a100", None])
        jobs.append(
            job(
                str(100 + i),
                name=f"schedd-bench-{i}",
                partition=gpu_type or "all",
                gpu_type=gpu_type,
                gpus_per_node=rng.choice([1, 2, 4]),
                comment=spec,
                submit_s=1000.0 + rng.uniform(0, 5000),
                user=f"u{rng.randrange(20)}",
                priority=rng.randrange(1, 5000),
            )
        )
    nodes = [
        node("a100-1", "a100", used=2),
        node("a100-2", "a100"),
        node("h100-1", "h100", used=7),
        node("h100-2", "h100"),
        node("h100-3", "h100", used=4),
    ]
    return FakeSchedClient(jobs, nodes)


def run(policy: str, n: int, cycles: int, budget_w: float | None, seed: int) -> list[Any]:
    client = queue(n, seed)
    clock = [9000.0]
    cfg = DaemonConfig(policy=policy, name_prefix="schedd-bench", power_budget_w=budget_w)
    daemon = Daemon(client, cfg, clock=lambda: clock[0])
    out: list[Any] = []
    for _ in range(cycles):
        rep = daemon.cycle()
        for start in rep.decision.starts[:4] if rep.decision else ():  # Slurm starts a few
            j = client.get(start.job_id)
            client.put(
                dataclasses.replace(j, state="RUNNING", reason="None", nodes=start.node, start_s=clock[0])
            )
        out.append(
            {
                "error": rep.error,
                "decision": rep.decision.to_dict() if rep.decision else None,
                "actions": [a.to_dict() for a in rep.actions],
                "jobs": {j: v.to_dict() for j, v in sorted(rep.jobs.items())},
                "predictions": {j: dataclasses.asdict(p) for j, p in sorted(rep.predictions.items())},
            }
        )
        clock[0] += 30.0
    out.append(client.calls)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="zeus")
    ap.add_argument("--jobs", type=int, default=1500)
    ap.add_argument("--cycles", type=int, default=4)
    ap.add_argument("--power-budget", type=float, default=None, help="W")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    doc = run(args.policy, args.jobs, args.cycles, args.power_budget, args.seed)
    print(json.dumps(doc, sort_keys=True, default=str))


if __name__ == "__main__":
    main()
