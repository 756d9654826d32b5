"""Scheduler daemon cycle latency: policy time on synthetic queues, Slurm command time on the local cluster.

    python benchmarks/bench_schedd.py                 # policy part: 1,000 and 10,000 pending jobs
    python benchmarks/bench_schedd.py --slurm         # plus the Slurm part (needs scripts/slurm-box up)
    python benchmarks/bench_schedd.py --sizes= --slurm --slurm-jobs 10000 --json-out 2405.json
    python benchmarks/bench_schedd.py --compare 2205.json 2411.json   # figures side by side
Policy part: Slurm records -> snapshot, decide, queue order, plan (cold = first cycle with the oracle's
predictions, warm = the next cycles). Slurm part: the daemon's whole cycle (Daemon.cycle with zeus, not
dry-run: squeue, nodes, sprio, sacct, snapshot + policy, the scontrol updates it applies) with N pending
declared jobs, per phase: the first cycle (cold: every job ordered, placements) and the median of the
steady cycles after it, for each queue read (`--queue-reads text,json`: framed text, the default, and
`squeue --json`; JSON's figures are prefixed `json_`), with the bytes each read took from Slurm and
ratios to a bare `squeue -h -o %i` timed after each steady cycle. See docs/schedd-scale.md.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import random
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from easlurm.energy.spec import parse_spec
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


class TimedClient(CliSchedClient):
    """The daemon's CLI client, timing each Slurm call (seconds per phase, summed over one cycle) and
    counting the bytes each phase's commands printed (`<phase>_bytes`)."""

    def __init__(self, queue_read: str = "text") -> None:
        super().__init__(queue_read=queue_read)
        self.phases: dict[str, float] = {}
        self.n_updates = 0
        self.n_squeue_jobs = 0

    def _timed(self, phase: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            self.phases[phase] = self.phases.get(phase, 0.0) + time.perf_counter() - t0

    def run(
        self, argv: Sequence[str], retry: bool = False, extra_env: Mapping[str, str] | None = None
    ) -> str:
        """Slurm's own command (wall time, parsing excluded) under `<phase>_cmd`, its output's bytes under
        `<phase>_bytes`; the text read's per-job GPU detail (`scontrol ... show job`) counts as squeue."""
        name = {"squeue": "squeue", "sprio": "sprio", "sinfo": "nodes"}.get(argv[0])
        if argv[:4] == ["scontrol", "--json", "show", "nodes"]:
            name = "nodes"
        if argv[0] == "scontrol" and "job" in argv[1:4] and "show" in argv[1:3]:
            name = "squeue"
        if name is None:
            return super().run(argv, retry, extra_env)
        out = cast(
            str, self._timed(f"{name}_cmd", lambda: super(TimedClient, self).run(argv, retry, extra_env))
        )
        self.phases[f"{name}_bytes"] = self.phases.get(f"{name}_bytes", 0.0) + len(out.encode())
        return out

    def jobs(self) -> list[SlurmJob]:
        jobs = cast(list[SlurmJob], self._timed("squeue", super().jobs))
        self.n_squeue_jobs = len(jobs)  # 22.05's squeue --json also lists finished jobs still in memory
        return jobs

    def nodes(self) -> list[SlurmNode]:
        return cast(list[SlurmNode], self._timed("nodes", super().nodes))

    def site_factors(self) -> dict[str, tuple[int, int]]:
        return cast(dict[str, tuple[int, int]], self._timed("sprio", super().site_factors))

    def user_gpu_s(self, since_s: float) -> dict[str, float]:
        return cast(
            dict[str, float], self._timed("sacct", lambda: super(TimedClient, self).user_gpu_s(since_s))
        )

    def update_job(self, job_id: str, fields: Mapping[str, str]) -> None:
        self.n_updates += 1
        self._timed("updates", lambda: super(TimedClient, self).update_job(job_id, fields))

    def requeue(self, job_id: str) -> None:
        self.n_updates += 1
        self._timed("updates", lambda: super(TimedClient, self).requeue(job_id))


SLURM_SPEC = "energy-profile=model=vit-b16,steps=2000,batch=64:128,gpus=1:2"
BENCH_PARTITION = "h100"
OFFLINE_NODES = (("a100-1", "a100"), ("a100-2", "a100"), ("h100-1", "h100"), ("h100-2", "h100"))


def offline_client(n: int) -> Any:
    """The Slurm part's queue without Slurm: the unit tests' in-memory client holding n pending jobs as
    bench_slurm submits them (declared in their Comment, `--gres=gpu:h100:1`, partition h100) and the
    local cluster's 4 GPU nodes of 8 GPUs."""
    import sys  # here: the in-memory client lives with the unit tests

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit" / "schedd"))
    from schedd_fake import FakeSchedClient, job, node  # here: see above

    jobs = [
        job(
            str(100 + i),
            name=f"schedd-bench-{i}",
            partition=BENCH_PARTITION,
            gpu_type="h100",
            comment=SLURM_SPEC,
            submit_s=1000.0 + i * 0.005,
        )
        for i in range(n)
    ]
    return FakeSchedClient(jobs, [node(name, gpu_type) for name, gpu_type in OFFLINE_NODES])


def bench_offline(n: int, steady: int, profile: str | None) -> dict[str, float]:
    """The daemon's whole cycle (Daemon.cycle, zeus, not dry-run) on `offline_client(n)`: the cold cycle,
    then Slurm starts the jobs it placed and `steady` cycles follow, 10 s apart. Wall and CPU seconds of
    this process per cycle (under load the wall is the CPU time stretched by other work)."""
    from easlurm.priority.daemon import Daemon, DaemonConfig  # here: the policy part runs without it

    client = offline_client(n)
    clock = [20_000.0]
    daemon = Daemon(client, DaemonConfig(policy="zeus", name_prefix="schedd-bench"), clock=lambda: clock[0])
    prof = cProfile.Profile() if profile else None
    rows: list[dict[str, float]] = []
    fig: dict[str, float] = {"jobs": float(n), "load_before": os.getloadavg()[0]}
    for k in range(1 + steady):
        if prof is not None and k == 1:
            prof.enable()
        t0, c0 = time.perf_counter(), time.process_time()
        report = daemon.cycle()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        rows.append({"cycle": wall, "cycle_cpu": cpu, **report.timings_s})
        label = "cold" if k == 0 else "steady"
        print(
            f"  offline cycle {k} ({label}): {wall:6.3f} s wall, {cpu:6.3f} s CPU  "
            + "  ".join(f"{x} {v * 1000:.0f} ms" for x, v in report.timings_s.items())
            + f"  actions {len(report.actions)}  (load {os.getloadavg()[0]:.2f})"
        )
        if k == 0 and report.decision is not None:  # Slurm starts what the daemon placed
            for start in report.decision.starts:
                j = client.get(start.job_id)
                client.put(replace(j, state="RUNNING", reason="None", nodes=start.node, start_s=clock[0]))
        clock[0] += 10.0
    if prof is not None and profile:
        prof.disable()
        prof.dump_stats(profile)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    for key in rows[0]:
        fig[f"offline_cold_{key}"] = rows[0][key]
        fig[f"offline_steady_{key}"] = statistics.median(r[key] for r in rows[1:] or rows)
    fig["load_after"] = os.getloadavg()[0]
    return fig


def submit(n: int, workers: int) -> tuple[list[str], float]:
    """n individually submitted declared jobs (a job array stays one record in squeue, which flatters
    it), `workers` sbatch at a time; returns the ids and the seconds it took."""

    def one(i: int) -> str:
        argv = ["sbatch", "--parsable", "-J", f"schedd-bench-{i}", "-p", BENCH_PARTITION]
        argv += ["--gres=gpu:h100:1", f"--comment={SLURM_SPEC}", "--wrap", "sleep 900"]
        for attempt in range(5):  # slurmctld may answer "try again" under a burst of submissions
            out = subprocess.run(argv, capture_output=True, text=True, check=False)
            if out.returncode == 0:
                return out.stdout.strip().split(";")[0]
            time.sleep(0.5 * (attempt + 1))
        raise RuntimeError(f"sbatch failed: {out.stderr.strip()}")

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        ids = list(pool.map(one, range(n)))
    return ids, time.perf_counter() - t0


def scontrol(*args: str) -> None:
    subprocess.run(["scontrol", *args], check=True, capture_output=True, text=True)


#: The queue reads the Slurm part compares: the daemon's default (framed text, JSON fallback) and JSON.
QUEUE_READS = ("text", "json")


def cycle_row(client: TimedClient, report: Any, total: float, cpu: float = 0.0) -> dict[str, float]:
    """One cycle's figures: per phase seconds, bytes read from Slurm, counts. The reads (squeue, nodes,
    sprio, sacct) run at once: `read` is their wall time together, `parse_specs` what it adds to the
    longest of them; `cycle_cpu` is this process's CPU time in the cycle (the daemon's own work)."""
    ph = dict(client.phases)
    slurm_read = report.timings_s.get("slurm", 0.0)
    snap = report.snapshot
    return {
        "squeue": ph.get("squeue", 0.0),
        "squeue_cmd": ph.get("squeue_cmd", 0.0),
        "nodes": ph.get("nodes", 0.0),
        "nodes_cmd": ph.get("nodes_cmd", 0.0),
        "sprio": ph.get("sprio", 0.0),
        "sprio_cmd": ph.get("sprio_cmd", 0.0),
        "sacct": ph.get("sacct", 0.0),
        "read": slurm_read,
        "parse_specs": max(
            slurm_read - max(ph.get(x, 0.0) for x in ("squeue", "nodes", "sprio", "sacct")), 0.0
        ),
        "snapshot_policy": report.timings_s.get("policy", 0.0),
        "updates": ph.get("updates", 0.0),
        "cycle": total,
        "cycle_cpu": cpu,
        "squeue_bytes": ph.get("squeue_bytes", 0.0),
        "slurm_bytes": sum(v for k, v in ph.items() if k.endswith("_bytes")),
        "n_updates": float(client.n_updates),
        "n_squeue_jobs": float(client.n_squeue_jobs),
        "n_pending": float(len(snap.pending) if snap else 0),
        "n_running": float(len(snap.running) if snap else 0),
        "n_nodes": float(len(snap.nodes) if snap else 0),
        "n_failed": float(len(report.outcome.failed) if report.outcome else 0),
        "n_fallbacks": float(client.text_fallbacks),
    }


def run_cycle(
    daemon: Any, client: TimedClient, label: str, prof: cProfile.Profile | None
) -> tuple[dict[str, float], Any]:
    """One daemon cycle, timed per phase; prints one line."""
    client.phases, client.n_updates, client.text_fallbacks = {}, 0, 0
    if prof is not None:
        prof.enable()
    t0, c0 = time.perf_counter(), time.process_time()
    report = daemon.cycle()
    total, cpu = time.perf_counter() - t0, time.process_time() - c0
    if prof is not None:
        prof.disable()
    if report.error is not None:
        print(f"  {label}: ERROR {report.error}")
    row = cycle_row(client, report, total, cpu)
    print(
        f"  {label}: {total:6.2f} s ({cpu:.2f} s CPU)  "
        + "  ".join(f"{x} {row[x] * 1000:.0f} ms" for x in PHASES)
        + f"  squeue bytes {row['squeue_bytes']:.0f}  updates {client.n_updates}  pending {row['n_pending']:.0f}"
        + f"  running {row['n_running']:.0f}  failed {row['n_failed']:.0f}  fallbacks {row['n_fallbacks']:.0f}"
        + f"  (load {os.getloadavg()[0]:.2f})"
    )
    for act, err in report.outcome.failed if report.outcome else []:
        print(f"    failed {act.kind.value} {act.job_id}: {err}")
    return row, report


def bare_squeue() -> tuple[float, float]:
    """Seconds and bytes of a bare `squeue -h -o %i` (job ids only) on the queue as it is."""
    t0 = time.perf_counter()
    out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, check=True).stdout
    return time.perf_counter() - t0, float(len(out))


def show_job_figures(job_id: str) -> dict[str, float]:
    """The agents' read of one job (state, AdminComment, restart count: client.show_job), and what it cost
    before on 22.05 (the whole queue as JSON, filtered), on the queue as it is: seconds and bytes."""
    timed = TimedClient("text")
    t0 = time.perf_counter()
    view = timed.show_job(int(job_id))
    fig = {"show_job": time.perf_counter() - t0, "show_job_bytes": timed.phases.get("squeue_bytes", 0.0)}
    t0 = time.perf_counter()
    out = subprocess.run(["squeue", "--json"], capture_output=True, check=True).stdout
    fig["show_job_json_queue"] = time.perf_counter() - t0
    fig["show_job_json_queue_bytes"] = float(len(out))
    print(f"  show_job {job_id}: {fig['show_job'] * 1000:.0f} ms, Restarts={view.get('Restarts')}")
    return fig


def placement_check(placed: Mapping[str, str]) -> dict[str, Any]:
    """Did Slurm start the jobs the cold cycle decided to start, on the nodes it chose? And jobs Slurm
    will never start after the daemon's updates (22.05 keeps the old GPU type of a retyped job)."""
    now = {j.job_id: j for j in CliSchedClient(queue_read="json").jobs()}
    running = [j for j in placed if j in now and now[j].running]
    return {
        "cold_starts": len(placed),
        "cold_starts_running": len(running),
        "cold_starts_on_chosen_node": sum(1 for j in running if now[j].nodes == placed[j]),
        "jobs_bad_constraints": sum(1 for j in now.values() if j.pending and j.reason == "BadConstraints"),
    }


def summarise(
    fig: dict[str, Any], cycles: Mapping[str, list[dict[str, float]]], bare: list[tuple[float, float]]
) -> None:
    """Cold (first) and steady (median of the rest) figures per queue read (JSON's keys prefixed `json_`),
    the bare squeue, and the ratios: each read's squeue phase to the bare squeue, text bytes to JSON bytes."""
    for read, rows in cycles.items():
        prefix = "" if read == "text" else f"{read}_"
        cold, warm = rows[0], rows[1:] or rows
        for key in cold:
            fig[f"{prefix}cold_{key}"] = cold[key]
            fig[f"{prefix}steady_{key}"] = statistics.median(c[key] for c in warm)
    if bare:
        fig["bare_squeue"] = statistics.median(t for t, _ in bare)
        fig["bare_squeue_bytes"] = statistics.median(b for _, b in bare)
        for read in cycles:
            prefix = "" if read == "text" else f"{read}_"
            fig[f"{prefix}steady_squeue_to_bare"] = fig[f"{prefix}steady_squeue"] / max(
                fig["bare_squeue"], 1e-9
            )
            fig[f"{prefix}steady_squeue_bytes_to_bare"] = fig[f"{prefix}steady_squeue_bytes"] / max(
                fig["bare_squeue_bytes"], 1.0
            )
    if {"text", "json"} <= set(cycles):
        for when in ("cold", "steady"):
            fig[f"{when}_squeue_bytes_text_to_json"] = fig[f"{when}_squeue_bytes"] / max(
                fig[f"json_{when}_squeue_bytes"], 1.0
            )
            fig[f"{when}_squeue_text_to_json"] = fig[f"{when}_squeue"] / max(fig[f"json_{when}_squeue"], 1e-9)


def bench_slurm(
    n: int,
    steady: int,
    workers: int,
    profile: str | None,
    decision_log: str | None = None,
    keep: bool = False,
    reads: Sequence[str] = QUEUE_READS,
    json_out: str | None = None,
) -> dict[str, Any]:
    """The daemon's whole cycle (Daemon.cycle: squeue, nodes, sprio, sacct on the first, snapshot +
    zeus + queue order + plan, the scontrol updates it applies) with n pending declared jobs, once per
    queue read in `reads` (a daemon each, their cycles alternating on the same queue).

    The jobs' partition is DOWN while they are submitted and during the first (cold) cycles, so that
    Slurm starts none before the daemons have ordered and placed them; it is then set UP, Slurm starts
    the jobs the daemon put first, and the steady cycles follow, each followed by a bare squeue."""
    from easlurm.priority.daemon import Daemon, DaemonConfig  # here: the policy part runs without it

    clients = {read: TimedClient(read) for read in reads}
    v = clients[reads[0]].slurm_version() or (0, 0)
    version = f"{v[0]}.{v[1]:02d}" + "".join(f".{x}" for x in v[2:])
    fig: dict[str, Any] = {"slurm": version, "jobs": n, "load_before": os.getloadavg()[0]}
    scontrol("update", f"PartitionName={BENCH_PARTITION}", "State=DOWN")
    ids: list[str] = []
    try:
        ids, fig["submit_s"] = submit(n, workers)
        print(
            f"Slurm {version}: {n} declared jobs submitted in {fig['submit_s']:.1f} s ({workers} sbatch at a time)"
        )
        log = Path(decision_log) if decision_log else None
        daemons = {
            read: Daemon(
                clients[read], DaemonConfig(policy="zeus", name_prefix="schedd-bench", decision_log=log)
            )
            for read in reads
        }
        prof = cProfile.Profile() if profile else None
        cycles: dict[str, list[dict[str, float]]] = {read: [] for read in reads}
        bare: list[tuple[float, float]] = []
        placed: dict[str, str] = {}
        for k in range(1 + steady):
            if k == 1:
                scontrol("update", f"PartitionName={BENCH_PARTITION}", "State=UP")
                time.sleep(7)  # sched_interval=5: Slurm starts the jobs the daemon put first
            for read in reads:
                label = f"cycle {k} ({'cold' if k == 0 else 'steady'}, {read})"
                row, report = run_cycle(daemons[read], clients[read], label, prof)
                cycles[read].append(row)
                if k == 0 and read == reads[0] and report.decision is not None:
                    placed = {s.job_id: s.node for s in report.decision.starts}
            if k >= 1:
                bare.append(bare_squeue())
                print(f"  bare squeue -h -o %i: {bare[-1][0] * 1000:.0f} ms, {bare[-1][1]:.0f} bytes")
        fig.update(placement_check(placed))
        fig.update(show_job_figures(ids[-1]))
        fig["load_after"] = os.getloadavg()[0]
        summarise(fig, cycles, bare)
        if prof is not None and profile:
            prof.dump_stats(profile)
            pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
        # before the jobs are cancelled: 22.05 cancels ~10-25 jobs a second under 50,000 (scancel backs off)
        print_figures(fig)
        if json_out:
            Path(json_out).write_text(json.dumps(fig, indent=1) + "\n")
        return fig
    finally:
        subprocess.run(["scontrol", "update", f"PartitionName={BENCH_PARTITION}", "State=UP"], check=False)
        for k in range(0, 0 if keep else len(ids), 1000):
            subprocess.run(["scancel", *ids[k : k + 1000]], check=False)


PHASES = (
    "read",
    "squeue",
    "squeue_cmd",
    "nodes",
    "sprio",
    "sacct",
    "parse_specs",
    "snapshot_policy",
    "updates",
)


def kind(key: str) -> str:
    """What a figure is: "count", "bytes", "ratio", "load" or "s"."""
    if key.startswith("load"):
        return "load"
    if "_n_" in f"_{key}" or key.endswith("_bytes") or key == "jobs":
        return "bytes" if key.endswith("_bytes") else "count"
    return "ratio" if "_to_" in key else "s"


def print_figures(fig: Mapping[str, Any]) -> None:
    """One line per figure."""
    for key, value in fig.items():
        k = kind(key)
        if not isinstance(value, float):
            print(f"{key:<40} {value!s:>12}")
        elif k in ("count", "load"):
            print(f"{key:<40} {value:12.{2 if k == 'load' else 0}f}")
        elif k == "bytes":
            print(f"{key:<40} {value:12.0f} bytes")
        elif k == "ratio":
            print(f"{key:<40} {value:12.4f}")
        else:
            print(f"{key:<40} {value:12.3f} s")


def cell(key: str, value: Any) -> str:
    """One figure as text: ms for times, s for the submission, counts and bytes as integers."""
    if not isinstance(value, float):
        return str(value)
    k = kind(key)
    if k == "load":
        return f"{value:.2f}"
    if k in ("count", "bytes"):
        return f"{value:.0f}"
    if k == "ratio":
        return f"{value:.4f}"
    if key == "submit_s":
        return f"{value:.1f} s"
    return f"{value * 1000:.0f} ms"


def compare(paths: Sequence[str]) -> None:
    """Figures of several runs (--json-out files) side by side (Markdown table)."""
    docs = [json.loads(Path(p).read_text()) for p in paths]
    keys: list[str] = []
    for d in docs:
        keys += [k for k in d if k not in keys and k != "slurm"]
    print("| figure | " + " | ".join(f"Slurm {d.get('slurm', '?')}" for d in docs) + " |")
    print("|---|" + "---:|" * len(docs))
    for key in keys:
        print(f"| {key} | " + " | ".join(cell(key, d[key]) if key in d else "" for d in docs) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--policies", default="zeus,pollux,charon,aurachronos")
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--slurm", action="store_true", help="also time the Slurm commands (local cluster)")
    ap.add_argument("--slurm-jobs", type=int, default=1000)
    ap.add_argument("--steady-cycles", type=int, default=5, help="cycles after the first (cold) one")
    ap.add_argument("--submit-workers", type=int, default=6, help="sbatch commands at a time")
    ap.add_argument("--json-out", help="write the Slurm part's figures to this JSON file")
    ap.add_argument("--profile", help="cProfile the daemon's cycles into this file (and print the top)")
    ap.add_argument("--keep-jobs", action="store_true", help="leave the jobs queued (to time other commands)")
    ap.add_argument("--decision-log", help="the daemon's decision log (one JSON line per cycle)")
    ap.add_argument(
        "--queue-reads",
        default=",".join(QUEUE_READS),
        help="queue reads to compare, a daemon each: text (the default read, JSON fallback), json",
    )
    ap.add_argument(
        "--compare", nargs="+", metavar="JSON", help="print --json-out files side by side, then exit"
    )
    ap.add_argument(
        "--offline",
        default="",
        metavar="N[,N...]",
        help="the daemon's whole cycle without Slurm on N pending jobs shaped as --slurm submits them",
    )
    args = ap.parse_args()
    if args.compare:
        compare(args.compare)
        return
    for n in (int(x) for x in args.offline.split(",") if x):
        print(f"offline daemon cycle (in-memory queue, 4 nodes x 8 GPUs; pid {os.getpid()}):")
        offline = bench_offline(n, args.steady_cycles, None if args.slurm else args.profile)
        print_figures(offline)
    if args.sizes:
        print(f"policy part (synthetic queue, 64 nodes x 8 GPUs, 200 running jobs; pid {os.getpid()}):")
        for n in (int(s) for s in args.sizes.split(",")):
            bench_policy(n, args.policies.split(","), args.cycles)
    if args.slurm:
        bench_slurm(
            args.slurm_jobs,
            args.steady_cycles,
            args.submit_workers,
            args.profile,
            args.decision_log,
            args.keep_jobs,
            [r for r in args.queue_reads.split(",") if r],
            args.json_out,
        )


if __name__ == "__main__":
    main()
