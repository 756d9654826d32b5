"""Replay a synthetic 100,000-job `sacct -P` trace on a 1,024-GPU cluster: jobs/s and peak memory per policy.

Usage: python benchmarks/bench_replay.py [--jobs 100000] [--policies pollux,zeus,...] [--keep TRACE]

The trace (written once to a temporary file) has a realistic column set, step rows, a `|` inside
JobName and Constraints on 2% of rows (placed by column shapes) and cancelled-while-pending array
tasks on 1% (never started); load is set for ~85% GPU utilisation. The target is under 2 minutes
and 2 GB peak RSS per policy at 100,000 jobs (printed as ok / OVER). Each policy replays in a fresh subprocess so that its peak
RSS (resource.getrusage ru_maxrss) is its own. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from easlurm.units import format_energy

HEADER = (
    "JobID|JobIDRaw|JobName|User|Account|Partition|QOS|State|ExitCode|Submit|Eligible|Start|End|"
    "Elapsed|ElapsedRaw|Timelimit|NNodes|NCPUS|ReqTRES|AllocTRES|NodeList|Constraints|SubmitLine|AdminComment"
)


def _ts(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def write_trace(path: Path, n_jobs: int, n_gpus: int, seed: int = 0) -> None:
    """A synthetic sacct -P dump: Poisson arrivals, log-normal runtimes, 1-8 GPUs, two GPU types."""
    rng = random.Random(seed)
    sizes, weights = [1, 2, 4, 8], [0.45, 0.25, 0.18, 0.12]
    mean_gpus = sum(s * w for s, w in zip(sizes, weights))
    mean_runtime_s = math.exp(math.log(1800) + 1.0**2 / 2)
    rate_per_s = 0.85 * n_gpus / (mean_gpus * mean_runtime_s)
    t = 1_700_000_000.0
    with open(path, "w") as fh:
        fh.write(HEADER + "\n")
        for i in range(n_jobs):
            t += rng.expovariate(rate_per_s)
            gpus = rng.choices(sizes, weights)[0]
            gtype = rng.choice(["a100", "h100"])
            runtime = max(10, int(rng.lognormvariate(math.log(1800), 1.0)))
            limit_min = max(30, int(runtime * rng.uniform(1.2, 3.0) / 60))
            start = t + rng.expovariate(1 / 120)
            end = start + runtime
            jid = 1000 + i
            state = rng.choices(
                ["COMPLETED", "FAILED", "CANCELLED by 1001", "TIMEOUT"], [0.85, 0.07, 0.05, 0.03]
            )[0]
            tres = f"billing={gpus * 8},cpu={gpus * 8},mem={gpus * 32}G,node=1,gres/gpu={gpus},gres/gpu:{gtype}={gpus}"
            user = f"user{rng.randrange(40)}"
            name, constraint = f"train{i % 7}", ""
            if i % 50 == 0:
                name, constraint = f"Job| Name{i % 1000:03d}", "cpu-a|cpu-b|gpu"
            if i % 100 == 1:  # an array task cancelled while pending: Start = End, no nodes
                cancel = _ts(t + 3600)
                fh.write(
                    f"{jid}_1|{jid}|sweep|{user}|acct|{gtype}|normal|CANCELLED by 1001|0:0|{_ts(t)}|{_ts(t)}|"
                    f"{cancel}|{cancel}|00:00:00|0|01:00:00|1|0|{tres}||None assigned||sbatch --array=1 x.sh|\n"
                )
            elapsed = f"{runtime // 3600:02d}:{runtime % 3600 // 60:02d}:{runtime % 60:02d}"
            if runtime >= 86400:
                elapsed = f"{runtime // 86400}-{runtime % 86400 // 3600:02d}:{runtime % 3600 // 60:02d}:{runtime % 60:02d}"
            common = f"{_ts(t)}|{_ts(t)}|{_ts(start)}|{_ts(end)}|{elapsed}|{runtime}|{limit_min // 60:02d}:{limit_min % 60:02d}:00"
            fh.write(
                f"{jid}|{jid}|{name}|{user}|acct|{gtype}|normal|{state}|0:0|{common}|1|{gpus * 8}|"
                f"{tres}|{tres}|{gtype}n{i % 64}|{constraint}|sbatch --gres=gpu:{gtype}:{gpus} run.sh|\n"
            )
            fh.write(
                f"{jid}.batch|{jid}.batch|batch|||||COMPLETED|0:0|{common}|1|{gpus * 8}||{tres}|{gtype}n0|||\n"
            )


def run_one(trace: str, policy: str, n_nodes: int) -> dict[str, float]:
    """Replay under one policy in this process; returns jobs/s and peak RSS."""
    from easlurm.sim.cluster import ClusterSpec
    from easlurm.sim.replay import ReplayRequest, replay

    cluster = ClusterSpec.mixed([(n_nodes // 2, 8, "a100-40gb"), (n_nodes - n_nodes // 2, 8, "h100-sxm")])
    t0 = time.perf_counter()
    res = replay(ReplayRequest(trace, cluster, [policy] if policy != "recorded" else [], noise_sigma=0.10))
    wall = time.perf_counter() - t0
    run = res.run(policy).get("metrics", {}) if res.runs else {}
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    jobs = res.mapping.mapped
    return {
        "jobs": jobs,
        "wall_s": wall,
        "sim_wall_s": run.get("replay_wall_s") or wall,
        "jobs_per_s": jobs / (run.get("replay_wall_s") or wall),
        "peak_rss_mb": peak_mb,
        "completed": run.get("completed_jobs", res.baseline["metrics"].get("completed_jobs")),
        "energy_j": run.get("energy_j", res.baseline["metrics"].get("energy_j")),
        "mean_jct_s": run.get("mean_jct_s", res.baseline["metrics"].get("mean_jct_s")),
        "record_fit": res.baseline.get("fit"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--policies", default="recorded,pollux,zeus,hades,aurachronos,charon")
    ap.add_argument("--keep", default=None, help="Write the trace here (and reuse it if it exists).")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="Per-policy limit.")
    ap.add_argument("--one", nargs=2, metavar=("TRACE", "POLICY"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    n_nodes = args.gpus // 8
    if args.one:
        print(json.dumps(run_one(args.one[0], args.one[1], n_nodes)))
        return
    tmp = tempfile.TemporaryDirectory()
    trace = Path(args.keep) if args.keep else Path(tmp.name) / "trace.psv"
    if not trace.exists():
        t0 = time.perf_counter()
        write_trace(trace, args.jobs, args.gpus)
        print(
            f"trace: {args.jobs} jobs, {trace.stat().st_size / 1e6:.1f} MB written in {time.perf_counter() - t0:.1f} s"
        )
    from easlurm.sim.traces import TraceStats, open_trace

    t0 = time.perf_counter()
    stats = TraceStats()
    n = sum(1 for _ in open_trace(trace, stats=stats))
    read_s = time.perf_counter() - t0
    print(f"reader only: {n} jobs ({stats.rows} rows) in {read_s:.1f} s = {n / read_s:,.0f} jobs/s")
    print(f"cluster: {args.gpus} GPUs ({n_nodes // 2}x8 A100-40GB + {n_nodes - n_nodes // 2}x8 H100-SXM)")
    print(
        f"{'policy':<12} {'jobs':>7} {'jobs/s':>9} {'sim s':>8} {'peak RSS MB':>12} {'done':>7} {'energy':>10} "
        f"{'mean JCT s':>10} {'total s':>7} {'<2min,2GB':>5}"
    )
    for policy in [p.strip() for p in args.policies.split(",") if p.strip()]:
        cmd = [sys.executable, __file__, "--gpus", str(args.gpus), "--one", str(trace), policy]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s, env=os.environ)
        except subprocess.TimeoutExpired:
            print(f"{policy:<12} timed out after {args.timeout_s:.0f} s")
            continue
        if out.returncode != 0:
            print(f"{policy:<12} failed: {out.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        ok = "ok" if r["wall_s"] < 120 and r["peak_rss_mb"] < 2048 else "OVER"
        fit = r.get("record_fit")
        if policy == "recorded" and fit and not fit["fits"]:
            # the synthetic starts ignore capacity: the record's cluster figures are blank (energy blank here)
            print(
                f"  record uses up to {fit['peak_gpus']} GPUs at once on {fit['cluster_gpus']}: does not fit"
            )
        print(
            f"{policy:<12} {r['jobs']:>7} {r['jobs_per_s']:>9,.0f} {r['sim_wall_s']:>8.1f} {r['peak_rss_mb']:>12,.0f} "
            f"{r['completed'] or 0:>7.0f} {format_energy(r['energy_j']):>10} {r['mean_jct_s'] or 0:>10.0f} "
            f"{r['wall_s']:>7.1f} {ok:>5}"
        )


if __name__ == "__main__":
    main()
