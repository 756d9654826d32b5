"""Simulator speed: one 10-h thesis run, the thesis campaign on N cores, and a 1,024-GPU / 100k-job run.

Usage: python benchmarks/bench_sim.py [--campaign] [--large] [--large-jobs N] [--workers 2]
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ProcessPoolExecutor

from easlurm.sim.runner import SimSpec, run_simulation
from easlurm.units import format_energy

POLICIES = (
    "pollux",
    "pollux-rigid",
    "themis",
    "chronos-malleable",
    "zeus",
    "hades",
    "aurachronos",
    "charon",
    "charon-pl",
)
SCENARIOS = ("A", "B", "C", "E", "charon-budget")


def one_run() -> None:
    print("== one 10-h run, thesis cluster (8x A100-40GB + 8x H100-SXM), scenario B/charon-budget, seed 1")
    for policy in POLICIES:
        scenario = "charon-budget" if policy.startswith("charon") else "B"
        run_simulation(SimSpec(policy=policy, scenario=scenario, seed=0, hours=1.0))  # warm caches/imports
        t0 = time.perf_counter()
        res = run_simulation(SimSpec(policy=policy, scenario=scenario, seed=1))
        wall = time.perf_counter() - t0
        m = res.metrics
        print(
            f"{policy:18s} wall {wall:6.3f} s  events {m['events']:7.0f}  events/s {m['events'] / wall:9.0f}  "
            f"decisions {m['decisions']:5.0f}  jobs {m['completed_jobs']:4.0f}  {format_energy(m['energy_j']):>10}"
        )


def _campaign_run(spec: SimSpec) -> tuple[float, float]:
    res = run_simulation(spec)
    return res.metrics["events"], res.metrics["wall_s"]


def campaign(workers: int) -> None:
    specs = [
        SimSpec(policy=p, scenario=s, seed=seed) for s in SCENARIOS for p in POLICIES for seed in range(10)
    ]
    print(
        f"== thesis campaign: {len(POLICIES)} policies x 10 seeds x {len(SCENARIOS)} scenarios = {len(specs)} runs"
    )
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        out = list(pool.map(_campaign_run, specs, chunksize=4))
    wall = time.perf_counter() - t0
    events = sum(e for e, _ in out)
    print(f"workers {workers}  wall {wall:.1f} s  ({wall / len(specs) * workers:.3f} s per run per worker)")
    print(f"events {events:.0f}  events/s overall {events / wall:.0f}")


def large(n_jobs: int, policies: tuple[str, ...]) -> None:
    from easlurm.model.oracle import NoisyOracle, Oracle
    from easlurm.priority.policies import get_policy
    from easlurm.sim.cluster import ClusterSpec
    from easlurm.sim.engine import Truth
    from easlurm.sim.runner import simulate
    from easlurm.sim.workload import WorkloadSettings, poisson_jobs

    cluster = ClusterSpec.mixed([(64, 8, "a100-40gb"), (64, 8, "h100-sxm")])
    load = 18.0 * 64  # the thesis load per 16 GPUs, scaled to 1,024 GPUs
    print(f"== {cluster.n_gpus}-GPU cluster ({len(cluster.nodes)} nodes), {n_jobs} jobs at {load:.0f} jobs/h")
    for policy in policies:
        real = Oracle()
        truth = Truth(real)
        seen = NoisyOracle(sigma=0.10, seed=0, catalogue=real.catalogue)
        settings = WorkloadSettings(load_jobs_per_h=load)
        jobs = poisson_jobs(settings, truth, {"a100-40gb": 8, "h100-sxm": 8}, seed=0, max_jobs=n_jobs)
        t0 = time.perf_counter()
        res = simulate(cluster, jobs, get_policy(policy), oracle=seen, truth_oracle=truth, seed=0)
        wall = time.perf_counter() - t0
        m = res.metrics
        print(
            f"{policy:18s} wall {wall:7.1f} s  simulated {m['simulated_s'] / 3600:6.1f} h  events {m['events']:9.0f}  "
            f"events/s {m['events'] / wall:8.0f}  decisions {m['decisions']:7.0f}  completed {m['completed_jobs']:7.0f}  "
            f"mean JCT {m['mean_jct_s']:7.0f} s"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--campaign", action="store_true", help="run the thesis campaign (450 runs)")
    ap.add_argument("--large", action="store_true", help="run the 1,024-GPU cluster with --large-jobs jobs")
    ap.add_argument("--large-jobs", type=int, default=100_000)
    ap.add_argument("--large-policies", default="zeus,pollux,aurachronos,charon-pl")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    args = ap.parse_args()
    one_run()
    if args.campaign:
        campaign(args.workers)
    if args.large:
        large(args.large_jobs, tuple(args.large_policies.split(",")))


if __name__ == "__main__":
    main()
