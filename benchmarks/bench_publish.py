"""Publication of step records at scale on the local cluster (scripts/slurm-box up first; run it under the
box's lock): jobs of 10, 100 and 1,000 steps, and 100 step ends a minute on one node.

For each size a batch job runs that many `srun true` steps (no plugin: the records are written here), then
waits. The step files (one node, 8 GPUs, a CPU package and DRAM, each value different) are written into a
spool one by one, each followed by the real publication (easlurm.accounting.publish.publish_from_spool
under the job lock, `scontrol update` of the running job's AdminComment), as the agents do when steps end.
Prints the time per publication (median over the first, middle and last 10 steps), the scontrol share, the
AdminComment bytes, then lets the job end and times `easlurm sacct -j` (with the spool and without it).
With --baseline-rev, the same records also go through that revision's encode_admin_comment (no Slurm).
The rate part publishes 100 steps at 100 a minute into a held job that already has 900, each from its own
process as agents are, and prints the lock waits and publication times. Load average printed at start
and end. Usage: flock /tmp/h/box.lock python benchmarks/bench_publish.py [--sizes 10,100,1000]
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing as mp
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from easlurm.accounting import publish as publish_mod  # noqa: E402
from easlurm.accounting.spool import Spool, job_lock, write_record  # noqa: E402
from easlurm.accounting.step_record import (  # noqa: E402
    DeviceRecord,
    NodeRecord,
    StepRecord,
    encode_admin_comment,
)
from easlurm.slurm.client import CliSlurmClient  # noqa: E402

DONE_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")


@dataclass(frozen=True)
class Place:
    """The agent's StepContext as publish_from_spool sees it (easlurm.accounting.publish.StepPlace)."""

    spool: Spool
    job_id: int
    step: str
    nnodes: int = 1
    spec: str = "gpu,cpu"
    restart: int = 0
    gid: int = os.getgid()

    @property
    def job_dir(self) -> Path:
        return self.spool.job_dir(self.job_id)

    @property
    def step_file(self) -> Path:
        return self.spool.step_file(self.job_id, self.step)

    @property
    def manifest_file(self) -> Path:
        return self.spool.manifest_file(self.job_id)

    def node_file(self, node_id: int) -> Path:
        return self.spool.node_file(self.job_id, self.step, node_id)


def record(job: int, step: str, rng: random.Random) -> StepRecord:
    """A step on one node with 8 GPUs, a CPU package and DRAM, every value its own (as measured ones are)."""
    dur = rng.uniform(0.5, 2.0)
    devs = [
        DeviceRecord(f"gpu{g}", "gpu", w * dur, w, int(dur * 10), False, "nvml-energy", duration_s=dur)
        for g, w in enumerate(rng.uniform(150, 300) for _ in range(8))
    ]
    devs.append(DeviceRecord("package-0", "cpu", 80 * dur * rng.uniform(0.9, 1.1), 80.0, 10, False, "rapl"))
    devs.append(DeviceRecord("dram-0", "dram", 5 * dur * rng.uniform(0.9, 1.1), 5.0, 10, True, "dram-model"))
    start = 1.7e9 + rng.uniform(0, 1e4)
    node = NodeRecord(0, "a100-1", start, dur, devs, start - 0.1, start + dur, nnodes=1, spec="gpu,cpu")
    return StepRecord(job, step, 1, [node], spec="gpu,cpu")


def run(argv: list[str], env: dict[str, str], timeout: float = 120) -> str:
    return subprocess.run(argv, capture_output=True, text=True, env=env, check=True, timeout=timeout).stdout


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def publish_one(place: Place, client: Any) -> tuple[float, float, float, float]:
    """One agent's publication: (lock wait, publication, scontrol, easlurm's CPU) seconds (the CPU time
    of this process: what load on the machine does not inflate)."""
    t0 = time.perf_counter()
    spent = [0.0]
    real = client.set_admin_comment

    def timed(job_id: int, text: str) -> None:
        t = time.perf_counter()
        real(job_id, text)
        spent[0] += time.perf_counter() - t

    client.set_admin_comment = timed
    with job_lock(place.job_dir, 60.0) as locked:
        t1, c1 = time.perf_counter(), time.process_time()
        if not locked or not publish_mod.publish_from_spool(place, client):
            raise SystemExit(f"job {place.job_id} step {place.step}: publication failed")
        t2, c2 = time.perf_counter(), time.process_time()
    client.set_admin_comment = real
    return t1 - t0, t2 - t1, spent[0], c2 - c1


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1e3 if values else float("nan")


def old_encoder(rev: str) -> ModuleType:
    """`step_record` as it was at `rev` (loaded from git under another name), for its encode time."""
    src = run(
        ["git", "-C", str(REPO), "show", f"{rev}:src/easlurm/accounting/step_record.py"], dict(os.environ)
    )
    path = Path(tempfile.mkdtemp()) / "old_step_record.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("old_step_record", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def wait_for(path: Path, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > end:
            raise SystemExit(f"{path} did not appear in {timeout_s:.0f} s")
        time.sleep(0.2)


def wait_in_sacct(job: int, env: dict[str, str], timeout_s: float = 120) -> int:
    """Wait until sacct shows the job ended with its AdminComment; returns its length."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        out = run(["sacct", "-n", "-X", "-P", "-j", str(job), "-o", "State,AdminComment"], env).strip()
        state, _, admin = out.partition("|")
        if state.split(" ")[0] in DONE_STATES and admin:
            return len(admin)
        time.sleep(1)
    raise SystemExit(f"job {job}: no AdminComment in sacct after {timeout_s:.0f} s")


def time_sacct(job: int, env: dict[str, str], *opts: str, repeat: int = 3) -> tuple[float, float, int, int]:
    """Median wall and CPU time (user + system, sacct included) of `easlurm sacct -j JOB OPTS` (s), its
    rows, and the rows with a TotalEnergy."""
    argv = [str(REPO / ".venv" / "bin" / "easlurm"), "sacct", "-j", str(job), *opts]
    times, cpus = [], []
    for _ in range(repeat):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        run(argv, env)
        times.append(time.perf_counter() - t)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    out = run([*argv, "-n", "-P", "-o", "JobID,TotalEnergyRaw,EnergyFlags"], env).splitlines()
    return (
        statistics.median(times),
        statistics.median(cpus),
        len(out),
        sum(1 for ln in out if ln.split("|")[1]),
    )


def publish_steps(job: int, n: int, spool: Spool, env: dict[str, str]) -> tuple[list, list[StepRecord]]:
    """Write and publish steps 0..n-1 then the batch step, one by one: [(wait, publish, scontrol)]."""
    client = CliSlurmClient(env, retries=1)
    rng = random.Random(n)
    times, recs = [], []
    spool.job_dir(job).mkdir()
    for step in [*map(str, range(n)), "batch"]:
        place = Place(spool, job, step)
        rec = record(job, step, rng)
        write_record(place.step_file, rec.to_dict(), place.gid)
        times.append(publish_one(place, client))
        recs.append(rec)
    return times, recs


def size_run(n: int, env: dict[str, str], spool: Spool, old: ModuleType | None, baseline_max: int) -> None:
    """One job of n steps: publication times, AdminComment bytes, `easlurm sacct -j` times."""
    flags = Path(tempfile.mkdtemp(prefix="bench-publish-"))
    os.chmod(flags, 0o777)
    script = f"for i in $(seq {n}); do srun -n1 -N1 true; done; touch {flags}/steps; "
    script += f"while [ ! -e {flags}/end ]; do sleep 0.2; done"
    job = int(run(["sbatch", "--parsable", "-p", "cpu", "-o", "/dev/null", "--wrap", script], env).strip())
    try:
        wait_for(flags / "steps", 120 + 1.0 * n)
        times, recs = publish_steps(job, n, spool, env)
        admin = CliSlurmClient(env).show_job(job).get("AdminComment", "")
    finally:
        (flags / "end").touch()
    pub = [t[1] for t in times]
    ctl = [t[2] for t in times]
    cpu = [t[3] for t in times]
    parts = {
        "first 10": slice(0, 10),
        "middle 10": slice(n // 2 - 5, n // 2 + 5),
        "last 10": slice(-10, None),
    }
    print(f"\n{n} steps (job {job}, + batch step): {len(times)} publications, total {sum(pub):.2f} s")
    for name, part in parts.items():
        print(
            f"  publication, {name:9}: median {median_ms(pub[part]):7.1f} ms "
            f"(scontrol {median_ms(ctl[part]):6.1f} ms, easlurm {median_ms(pub[part]) - median_ms(ctl[part]):6.1f} ms,"
            f" easlurm CPU {median_ms(cpu[part]):5.1f} ms)"
        )
    print(f"  AdminComment: {len(admin)} bytes (slurmctld), {wait_in_sacct(job, env)} bytes (sacct)")
    for opts in ((f"--spool={spool.root}",), ("--no-spool",)):
        secs, cpu, rows, energy = time_sacct(job, env, *opts)
        print(
            f"  easlurm sacct -j {job} {opts[0]:28}: {secs:6.3f} s (CPU {cpu:5.3f} s), {rows} rows, "
            f"{energy} with TotalEnergy"
        )
    encode_times(recs, old if n <= baseline_max else None)


def encode_times(recs: list[StepRecord], old: ModuleType | None) -> None:
    """The encoder alone on all the job's records (no spool, no Slurm): this tree's and the baseline's."""
    t = time.perf_counter()
    text = encode_admin_comment(recs)
    new_s = time.perf_counter() - t
    line = f"  encode_admin_comment({len(recs)} records): {new_s * 1e3:8.1f} ms, {len(text)} chars"
    if old is not None:
        old_recs = [old.StepRecord.from_dict(r.to_dict()) for r in recs]
        t = time.perf_counter()
        old_text = old.encode_admin_comment(old_recs)
        old_s = time.perf_counter() - t
        kept = len(old.decode_admin_comment(old_text))
        line += f"; baseline {old_s * 1e3:9.1f} ms, {len(old_text)} chars, {kept} steps kept"
        line += f" (ratio {old_s / new_s:.1f}x)"
    print(line)


def rate_worker(place: Place, env: dict[str, str], arrived: float, out: Any) -> None:
    wait, pub, ctl, cpu = publish_one(place, CliSlurmClient(env, retries=1))
    out.put((place.step, arrived, wait, pub, ctl, cpu))


def rate_run(env: dict[str, str], spool: Spool, before: int, count: int, per_s: float) -> None:
    """`count` steps ending at `per_s` a second on one node, each published by its own process, into a
    held job that already has `before` steps."""
    job = int(
        run(["sbatch", "--parsable", "--hold", "-p", "cpu", "-o", "/dev/null", "--wrap", "true"], env).strip()
    )
    try:
        rng = random.Random(7)
        spool.job_dir(job).mkdir()
        for i in range(before):
            write_record(spool.step_file(job, str(i)), record(job, str(i), rng).to_dict(), os.getgid())
        cold = publish_one(Place(spool, job, str(before - 1)), CliSlurmClient(env))
        ctx = mp.get_context("fork")
        out: Any = ctx.Queue()
        procs = []
        t0 = time.monotonic()
        for k in range(count):
            time.sleep(max(0.0, t0 + k / per_s - time.monotonic()))
            place = Place(spool, job, str(before + k))
            write_record(place.step_file, record(job, place.step, rng).to_dict(), place.gid)
            p = ctx.Process(target=rate_worker, args=(place, env, time.time(), out))
            p.start()
            procs.append(p)
        results = [out.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        span = time.monotonic() - t0
        admin = CliSlurmClient(env).show_job(job).get("AdminComment", "")
    finally:
        run(["scancel", str(job)], env)
    rate_report(results, before, count, span, cold, len(admin))


def rate_report(results: list[tuple], before: int, count: int, span: float, cold: tuple, admin: int) -> None:
    results.sort(key=lambda r: r[1])
    waits = [r[2] for r in results]
    pubs = [r[3] for r in results]
    ctls = [r[4] for r in results if r[4] > 0]
    skipped = sum(1 for r in results if r[4] == 0)
    busy = sum(pubs)
    print(f"\nrate: {count} step ends in {span:.1f} s on one node, job already holding {before} steps")
    print(f"  first publication (manifest cold, {before} files read): {cold[1] * 1e3:.1f} ms")
    print(
        f"  lock wait: median {median_ms(waits):.1f} ms, max {max(waits) * 1e3:.1f} ms; publication: median "
        f"{median_ms(pubs):.1f} ms, max {max(pubs) * 1e3:.1f} ms; lock held {busy:.2f} s of {span:.1f} s "
        f"({100 * busy / span:.1f}%)"
    )
    cpus = [r[5] for r in results]
    print(f"  easlurm CPU per publication: median {median_ms(cpus):.1f} ms, max {max(cpus) * 1e3:.1f} ms")
    first, last = ctls[:10], ctls[-10:]
    print(
        f"  scontrol update: first 10 median {median_ms(first):.1f} ms, last 10 median {median_ms(last):.1f} ms;"
        f" {skipped} publications skipped (their file already carried); AdminComment {admin} bytes"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,100,1000", help="steps per job, comma-separated")
    ap.add_argument("--baseline-rev", default=None, help="also time this git revision's encoder")
    ap.add_argument(
        "--baseline-max",
        type=int,
        default=100,
        help="time the baseline only up to this many steps (its cost is quadratic)",
    )
    ap.add_argument("--rate", type=int, default=100, help="step ends per minute in the rate part (0: skip)")
    ap.add_argument("--rate-before", type=int, default=900, help="steps the rate part's job holds first")
    args = ap.parse_args()
    from easlurm.slurm.box_cli import make_box  # here: the box's configuration is only read when run

    box = make_box()
    if not box.is_up():
        print("the local cluster is not up: scripts/slurm-box up", file=sys.stderr)
        return 1
    env = {**box.client_env(), "PYTHONPATH": str(REPO / "src")}
    spool = Spool(Path(tempfile.mkdtemp(prefix="bench-publish-spool-")))
    old = old_encoder(args.baseline_rev) if args.baseline_rev else None
    print(f"load average at start: {loadavg()}  (cores: {os.cpu_count()}); spool {spool.root}")
    for n in (int(x) for x in args.sizes.split(",")):
        size_run(n, env, spool, old, args.baseline_max)
    if args.rate:
        rate_run(env, spool, args.rate_before, args.rate, args.rate / 60.0)
    print(f"\nload average at end: {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
