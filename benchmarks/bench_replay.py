"""Replay a synthetic 100,000-job `sacct -P` trace on a 1,024-GPU cluster: jobs/s and peak memory per policy.

Usage: python benchmarks/bench_replay.py [--jobs 100000] [--policies pollux,zeus,...] [--keep TRACE]
    [--shape philly|uniform] [--queue-depth 1000] [--undersized 2000,16000 --undersized-gpus 256
    --undersized-depths 1000,100]

The trace (written once to a temporary file) has a realistic column set, step rows, a `|` inside
JobName and Constraints on 2% of rows (placed by column shapes) and cancelled-while-pending array
tasks on 1% (never started); load is set for ~85% GPU utilisation. Job sizes and run times have the
Philly trace's shape (easlurm.sim.philly_shape, up to 48 GPUs, run times from seconds to 60 days) or,
with `--shape uniform`, the first synthetic shape (log-normal, 1-8 GPUs). The target is at most 2
minutes of CPU and 4 GB peak RSS per policy at 1,000,000 jobs (printed as ok / OVER, a smaller trace's
CPU time and peak RSS extrapolated linearly to a million jobs; CPU time, because the machine may be
shared: the load average is printed on each line; `decide s`: the CPU seconds of the policy's decisions
among them). Each policy replays in a fresh subprocess so that its peak RSS (resource.getrusage ru_maxrss) is its own. Then one policy replays two
trace sizes on an undersized cluster (the queue grows without bound) and the ratio of their CPU seconds
per job, the larger trace's over the smaller's, is printed (1.00: cost linear in the trace; above:
faster than linear), at each queue depth of `--undersized-depths` (the pending jobs each decision sees,
`sim.queue_depth`), with the jobs and placement options each decision was handed on average (a decision's
cost follows its options). Figures are printed, never asserted.

A million jobs: `--jobs 1000000 --timeout-s 7200 --keep p1m.psv` (the trace is 558 MB; one policy at a
time with `--policies zeus --undersized ''`)
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
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from easlurm.sim.engine.pending import DEFAULT_QUEUE_DEPTH
from easlurm.sim.philly_shape import draw_jobs, mean_gpu_s
from easlurm.slurm.times import format_elapsed
from easlurm.units import format_energy

HEADER = (
    "JobID|JobIDRaw|JobName|User|Account|Partition|QOS|State|ExitCode|Submit|Eligible|Start|End|"
    "Elapsed|ElapsedRaw|Timelimit|NNodes|NCPUS|ReqTRES|AllocTRES|NodeList|Constraints|SubmitLine|AdminComment"
)


def _ts(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _uniform_draws(n_jobs: int, n_gpus: int, rng: random.Random, load: float) -> tuple[float, Any]:
    """(arrival rate, (GPUs, run time) draws) of the first synthetic shape: log-normal run times (median
    30 min), 1-8 GPUs."""
    sizes, weights = [1, 2, 4, 8], [0.45, 0.25, 0.18, 0.12]
    mean_gpus = sum(s * w for s, w in zip(sizes, weights))
    mean_runtime_s = math.exp(math.log(1800) + 1.0**2 / 2)
    rate_per_s = load * n_gpus / (mean_gpus * mean_runtime_s)

    def draws() -> Iterator[tuple[int, int]]:
        for _ in range(n_jobs):
            yield rng.choices(sizes, weights)[0], max(10, int(rng.lognormvariate(math.log(1800), 1.0)))

    return rate_per_s, draws()


def _philly_draws(n_jobs: int, n_gpus: int, seed: int, load: float) -> tuple[float, Any]:
    """(arrival rate, (GPUs, run time) draws) with the Philly table's job sizes and run times
    (easlurm.sim.philly_shape: provenance there); the rate gives `load` of the cluster's GPUs."""
    gen = np.random.default_rng(seed)
    rate_per_s = load * n_gpus / mean_gpu_s(np.random.default_rng(seed + 1))
    gpus, runtime = draw_jobs(n_jobs, gen)
    return rate_per_s, zip(gpus.tolist(), runtime.tolist())


def write_trace(
    path: Path, n_jobs: int, n_gpus: int, seed: int = 0, shape: str = "uniform", load: float = 0.85
) -> None:
    """A synthetic sacct -P dump: Poisson arrivals at `load` of the cluster's GPUs, two GPU types; `shape`
    "uniform" (log-normal run times, 1-8 GPUs) or "philly" (the Philly trace's sizes and run times, up to
    48 GPUs on 8-GPU nodes)."""
    rng = random.Random(seed)
    if shape == "philly":
        rate_per_s, draws = _philly_draws(n_jobs, n_gpus, seed, load)
    else:
        rate_per_s, draws = _uniform_draws(n_jobs, n_gpus, rng, load)
    t = 1_700_000_000.0
    with open(path, "w") as fh:
        fh.write(HEADER + "\n")
        for i, (gpus, runtime) in enumerate(draws):
            t += rng.expovariate(rate_per_s)
            gtype = rng.choice(["a100", "h100"])
            limit_min = max(30, int(runtime * rng.uniform(1.2, 3.0) / 60))
            start = t + rng.expovariate(1 / 120)
            end = start + runtime
            jid = 1000 + i
            state = rng.choices(
                ["COMPLETED", "FAILED", "CANCELLED by 1001", "TIMEOUT"], [0.85, 0.07, 0.05, 0.03]
            )[0]
            n_nodes = -(-gpus // 8)
            tres = (
                f"billing={gpus * 8},cpu={gpus * 8},mem={gpus * 32}G,node={n_nodes},gres/gpu={gpus},"
                f"gres/gpu:{gtype}={gpus}"
            )
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
            limit = format_elapsed(limit_min * 60)
            common = f"{_ts(t)}|{_ts(t)}|{_ts(start)}|{_ts(end)}|{format_elapsed(runtime)}|{runtime}|{limit}"
            per_node = min(gpus, 8)
            fh.write(
                f"{jid}|{jid}|{name}|{user}|acct|{gtype}|normal|{state}|0:0|{common}|{n_nodes}|{gpus * 8}|"
                f"{tres}|{tres}|{gtype}n{i % 64}|{constraint}|sbatch -N{n_nodes} --gres=gpu:{gtype}:{per_node} "
                "run.sh|\n"
            )
            fh.write(
                f"{jid}.batch|{jid}.batch|batch|||||COMPLETED|0:0|{common}|1|{per_node * 8}||{tres}|{gtype}n0|||\n"
            )


class Handed:
    """Stands between the simulator and its policy (every call forwarded) and counts each decision: the
    pending jobs it is handed, the placement options its cycle built from them and the CPU seconds the
    policy's decisions took (the rest of a replay is reading the trace and the simulator)."""

    def __init__(self) -> None:
        self.decisions = 0
        self.jobs = 0
        self.options = 0
        self.cpu_s = 0.0
        self.inner: Any = None

    def simulate(self, cluster: Any, jobs: Any, policy: Any, **kw: Any) -> Any:
        from easlurm.priority.policies import get_policy  # here: only the counted replays load it
        from easlurm.sim.runner import simulate  # here: as above

        self.inner = get_policy(policy) if isinstance(policy, str) else policy
        return simulate(cluster, jobs, self, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def decide(self, snapshot: Any, oracle: Any) -> Any:
        c0 = time.process_time()
        decision = self.inner.decide(snapshot, oracle)
        self.cpu_s += time.process_time() - c0
        last = getattr(self.inner, "_last_cycle", None)
        self.decisions += 1
        self.jobs += len(snapshot.pending)
        self.options += len(last[2].job_of) if last is not None and last[1] is snapshot else 0
        return decision


def run_one(
    trace: str, policy: str, n_nodes: int, queue_depth: int = DEFAULT_QUEUE_DEPTH
) -> dict[str, float]:
    """Replay under one policy in this process (each decision sees `queue_depth` pending jobs); returns
    jobs/s, wall and CPU time, peak RSS, and the jobs and options each decision was handed (mean)."""
    from easlurm.sim.cluster import ClusterSpec
    from easlurm.sim.replay import ReplayRequest, replay

    cluster = ClusterSpec.mixed([(n_nodes // 2, 8, "a100-40gb"), (n_nodes - n_nodes // 2, 8, "h100-sxm")])
    t0, c0 = time.perf_counter(), time.process_time()
    policies = [policy] if policy != "recorded" else []
    handed = Handed()
    res = replay(
        ReplayRequest(
            trace, cluster, policies, noise_sigma=0.10, queue_depth=queue_depth, simulate_fn=handed.simulate
        )
    )
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    run = res.run(policy).get("metrics", {}) if res.runs else {}
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    jobs = res.mapping.mapped
    return {
        "jobs": jobs,
        "wall_s": wall,
        "cpu_s": cpu,
        "sim_wall_s": run.get("replay_wall_s") or wall,
        "jobs_per_s": jobs / (run.get("replay_wall_s") or wall),
        "peak_rss_mb": peak_mb,
        "completed": run.get("completed_jobs", res.baseline["metrics"].get("completed_jobs")),
        "energy_j": run.get("energy_j", res.baseline["metrics"].get("energy_j")),
        "mean_jct_s": run.get("mean_jct_s", res.baseline["metrics"].get("mean_jct_s")),
        "record_fit": res.baseline.get("fit"),
        "decisions": handed.decisions,
        "decide_cpu_s": handed.cpu_s,
        "jobs_per_decision": handed.jobs / handed.decisions if handed.decisions else 0.0,
        "options_per_decision": handed.options / handed.decisions if handed.decisions else 0.0,
    }


def _one(
    trace: Path, policy: str, gpus: int, timeout_s: float, depth: int = DEFAULT_QUEUE_DEPTH
) -> dict[str, Any] | str:
    """run_one in a fresh subprocess (its own peak RSS): its figures, or why there are none."""
    cmd = [
        sys.executable,
        __file__,
        "--gpus",
        str(gpus),
        "--queue-depth",
        str(depth),
        "--one",
        str(trace),
        policy,
    ]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=os.environ)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout_s:.0f} s"
    if out.returncode != 0:
        return f"failed: {out.stderr.strip().splitlines()[-1:]}"
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _load_average() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


#: the target: at most 2 CPU minutes and 4 GB peak RSS per policy for a million jobs
TARGET_JOBS, TARGET_CPU_S, TARGET_RSS_MB = 1_000_000, 120.0, 4096.0


def _meets_target(r: dict[str, Any]) -> bool:
    """The target, for a replay of fewer jobs extrapolated linearly to a million (CPU and peak RSS), so
    that a 100,000-job replay is held to 12 CPU s: at a million its own figures are read."""
    scale = max(TARGET_JOBS / max(r["jobs"], 1), 1.0)
    return bool(r["cpu_s"] * scale <= TARGET_CPU_S and r["peak_rss_mb"] * scale <= TARGET_RSS_MB)


def _policy_table(args: argparse.Namespace, trace: Path) -> None:
    """Each policy's replay of `trace` on the full cluster: jobs/s, wall and CPU time, peak RSS."""
    print(
        f"{'policy':<12} {'jobs':>8} {'jobs/s':>9} {'sim s':>8} {'peak RSS MB':>12} {'done':>8} {'energy':>10} "
        f"{'mean JCT s':>10} {'total s':>7} {'CPU s':>7} {'decide s':>8} {'1M: 2min,4GB':>13}"
    )
    for policy in [p.strip() for p in args.policies.split(",") if p.strip()]:
        r = _one(trace, policy, args.gpus, args.timeout_s, args.queue_depth)
        if isinstance(r, str):
            print(f"{policy:<12} {r}  ({_load_average()})")
            continue
        ok = "ok" if _meets_target(r) else "OVER"
        fit = r.get("record_fit")
        if policy == "recorded" and fit and not fit["fits"]:
            # the synthetic starts ignore capacity: the record's cluster figures are blank (energy blank here)
            print(
                f"  record uses up to {fit['peak_gpus']} GPUs at once on {fit['cluster_gpus']}: does not fit"
            )
        print(
            f"{policy:<12} {r['jobs']:>8} {r['jobs_per_s']:>9,.0f} {r['sim_wall_s']:>8.1f} "
            f"{r['peak_rss_mb']:>12,.0f} {r['completed'] or 0:>8.0f} {format_energy(r['energy_j']):>10} "
            f"{r['mean_jct_s'] or 0:>10.0f} {r['wall_s']:>7.1f} {r['cpu_s']:>7.1f} {r['decide_cpu_s']:>8.1f} "
            f"{ok:>13}  ({_load_average()})"
        )


def _undersized(args: argparse.Namespace, work: Path) -> None:
    """Two trace sizes (load for the full cluster) replayed by one policy on a cluster of
    `--undersized-gpus`, at each queue depth of `--undersized-depths`: the queue grows without bound; jobs
    per CPU second at each size and their ratio, CPU s per job at the largest over at the smallest (1.0:
    cost linear in the trace)."""
    sizes = [int(x) for x in args.undersized.split(",") if x.strip()]
    depths = [int(x) for x in (args.undersized_depths or str(args.queue_depth)).split(",") if x.strip()]
    for n in sizes:
        write_trace(work / f"undersized-{n}.psv", n, args.gpus, seed=1, shape=args.shape, load=args.load)
    for depth in depths:
        _undersized_at(args, work, sizes, depth)


def _undersized_at(args: argparse.Namespace, work: Path, sizes: list[int], depth: int) -> None:
    """The undersized runs at one queue depth, and their ratio."""
    gpus, policy = args.undersized_gpus, args.undersized_policy
    print(
        f"undersized: {policy} on {gpus} GPUs, traces offered {args.load:.2f} of {args.gpus} GPUs "
        f"({args.load * args.gpus / gpus:.1f}x the cluster), queue depth {depth}"
    )
    rates = []
    for n in sizes:
        trace = work / f"undersized-{n}.psv"
        r = _one(trace, policy, gpus, args.timeout_s, depth)
        if isinstance(r, str):
            print(f"  {n:>8} jobs: {r}  ({_load_average()})")
            return
        rates.append(r["jobs"] / r["cpu_s"])
        print(
            f"  {r['jobs']:>8} jobs: {r['cpu_s']:.1f} CPU s ({r['decide_cpu_s']:.1f} in decisions; "
            f"{r['wall_s']:.1f} s wall) = {rates[-1]:,.0f} "
            f"jobs per CPU s, peak RSS {r['peak_rss_mb']:,.0f} MB, mean JCT {r['mean_jct_s'] or 0:,.0f} s; "
            f"{r['decisions']:,} decisions, each handed {r['jobs_per_decision']:,.0f} jobs and "
            f"{r['options_per_decision']:,.0f} options (mean)  ({_load_average()})"
        )
    if len(rates) >= 2:
        print(
            f"  CPU s per job at {sizes[-1]:,} / at {sizes[0]:,} jobs ({sizes[-1] / sizes[0]:.0f}x the jobs): "
            f"{rates[0] / rates[-1]:.2f} (1.00: linear; above: faster than linear)"
        )


def _reader_only(trace: Path) -> None:
    """The trace reader alone over `trace`: jobs per second."""
    from easlurm.sim.traces import TraceStats, open_trace  # here: only where the reader is timed

    t0, c0 = time.perf_counter(), time.process_time()
    stats = TraceStats()
    n = sum(1 for _ in open_trace(trace, stats=stats))
    read_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    print(
        f"reader only: {n} jobs ({stats.rows} rows) in {read_s:.1f} s ({cpu_s:.1f} CPU s) = "
        f"{n / cpu_s:,.0f} jobs per CPU s  ({_load_average()})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--policies", default="recorded,pollux,zeus,hades,aurachronos,charon")
    ap.add_argument(
        "--shape",
        choices=("philly", "uniform"),
        default="philly",
        help="Job sizes and run times: the Philly trace's (default) or log-normal 1-8 GPUs.",
    )
    ap.add_argument("--load", type=float, default=0.85, help="Offered load, share of the cluster's GPUs.")
    ap.add_argument("--keep", default=None, help="Write the trace here (and reuse it if it exists).")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="Per-policy limit.")
    ap.add_argument(
        "--undersized", default="2000,16000", help="Trace sizes for the undersized run ('' none)."
    )
    ap.add_argument("--undersized-gpus", type=int, default=256)
    ap.add_argument("--undersized-policy", default="zeus")
    ap.add_argument(
        "--queue-depth",
        type=int,
        default=DEFAULT_QUEUE_DEPTH,
        help="Pending jobs each decision sees (sim.queue_depth; default %(default)s).",
    )
    ap.add_argument(
        "--undersized-depths",
        default="",
        help="Queue depths of the undersized runs, e.g. 1000,100 (default: --queue-depth).",
    )
    ap.add_argument(
        "--reader",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Time the trace reader alone first (--no-reader: skip it, as each policy's row reads the trace too).",
    )
    ap.add_argument("--one", nargs=2, metavar=("TRACE", "POLICY"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    n_nodes = args.gpus // 8
    if args.one:
        print(json.dumps(run_one(args.one[0], args.one[1], n_nodes, args.queue_depth)))
        return
    tmp = tempfile.TemporaryDirectory()
    trace = Path(args.keep) if args.keep else Path(tmp.name) / "trace.psv"
    print(f"{_load_average()}, {os.cpu_count()} CPUs")
    if args.jobs > 0:
        if not trace.exists():
            t0 = time.perf_counter()
            write_trace(trace, args.jobs, args.gpus, shape=args.shape, load=args.load)
            print(
                f"trace: {args.jobs} jobs ({args.shape} shape, load {args.load:.2f}), "
                f"{trace.stat().st_size / 1e6:.1f} MB written in {time.perf_counter() - t0:.1f} s"
            )
        if args.reader:
            _reader_only(trace)
        print(f"cluster: {args.gpus} GPUs ({n_nodes // 2}x8 A100-40GB + {n_nodes - n_nodes // 2}x8 H100-SXM)")
        _policy_table(args, trace)
    if args.undersized:
        _undersized(args, Path(tmp.name))


if __name__ == "__main__":
    main()
