"""The job-end mail path under a burst (no Slurm): what slurmctld waits for, and what reaches the mailer.

slurmctld runs MailProg once per mail, waits for it, then kills its process group (slurmscriptd's
run_command). This script does the same for N mails at once (C at a time, each in its own process group,
killed after it exits) with scripts/easlurm-mailprog and this checkout's `easlurm mail drain` (lingering
its default 10 s on an empty queue), handing the
mails to a capture mailer. Mails are "Began" mails (no card: no sacct), so what is measured is the queue,
the one-drain rule and the rate limit, not seff. Prints MailProg's wall time per call (median, p99, max) and
the CPU of all MailProgs per call, how many drains ran and whether two ever overlapped, the time until the
last mail left, each mail captured exactly once; then 100 mails queued first, sent by one drain at
mail.rate_per_min = 1200, against the 4.95 s that rate must take at least. Load average printed at start and end.
Usage: python benchmarks/bench_mailprog.py [--mails 1000] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from easlurm.accounting.mail import drain_lock  # noqa: E402

MAILPROG = REPO / "scripts" / "easlurm-mailprog"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def setup(root: Path, rate_per_min: float) -> tuple[dict[str, str], Path, Path]:
    """A spool, a capture mailer and a settings file; the environment MailProg runs with."""
    sent = root / "sent"
    sent.mkdir()
    mailer = root / "mailer.sh"
    mailer.write_text(
        "#!/bin/sh\n"
        f'f="{sent}/$(date +%s%N)-$$.txt"\n'
        "{ printf 'argv:'; printf ' [%s]' \"$@\"; printf '\\n'; cat; } > \"$f\"\n"
    )
    mailer.chmod(0o755)
    cfg = root / "mail.yaml"
    cfg.write_text(
        f'mail:\n  mailer: ["{mailer}", "-s", "{{subject}}", "{{recipient}}"]\n  rate_per_min: {rate_per_min}\n'
    )
    spool = root / "spool"
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(REPO / "src"),
        "EASLURM_MAIL_SPOOL": str(spool),
        "EASLURM_MAIL_DRAIN": f"{sys.executable} -m easlurm.cli -c {cfg}",
    }
    return env, spool, sent


def one_mail(env: dict[str, str], job: int) -> float:
    """Run MailProg as slurmscriptd does; its wall time (s)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [str(MAILPROG), "-s", f"Slurm Job_id={job} Name=bench Began, Queued time 00:00:01", "bench"],
        env={**env, "SLURM_JOB_ID": str(job), "SLURM_JOB_MAIL_TYPE": "Began", "SLURM_JOB_STATE": "RUNNING"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        process_group=0,
    )
    proc.wait()
    wall = time.perf_counter() - t0
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # what run_command does to what MailProg left behind
    return wall


def drains(spool: Path) -> list[tuple[float, float]]:
    """Each drain's (holds the lock, lets it go) times, from its log lines."""
    spans: dict[str, list[float]] = {}
    log = spool / "drain.log"
    for line in log.read_text().splitlines() if log.exists() else []:
        parts = line.split()
        if len(parts) >= 4 and parts[1] == "drain":
            spans.setdefault(parts[2].rstrip(":"), []).append(float(parts[0]))
    return sorted((t[i], t[i + 1]) for t in spans.values() for i in range(0, len(t) - 1, 2))


def wait_no_drain(spool: Path, timeout_s: float = 120) -> None:
    """Until no drain holds the lock (the last one lingers on the empty queue, then logs and exits)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        with drain_lock(spool) as held:
            if held:
                return
        time.sleep(0.2)


def wait_sent(sent: Path, n: int, timeout_s: float) -> float:
    t0 = time.monotonic()
    while len(list(sent.iterdir())) < n and time.monotonic() - t0 < timeout_s:
        time.sleep(0.05)
    return time.monotonic()


def burst(n: int, concurrency: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-mail-") as tmp:
        env, spool, sent = setup(Path(tmp), 100000.0)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        with ThreadPoolExecutor(concurrency) as pool:
            walls = sorted(pool.map(lambda j: one_mail(env, j), range(1, n + 1)))
        t_queued = time.monotonic()
        t_done = wait_sent(sent, n, 600)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        subjects = [p.read_text().split("\n", 1)[0] for p in sent.iterdir()]
        wait_no_drain(spool)
        spans = drains(spool)
        overlap = any(a[1] > b[0] for a, b in itertools.pairwise(spans))
        print(f"burst: {n} mails, {concurrency} MailProgs at a time (as slurmctld's mail threads)")
        print(
            f"  MailProg wall per call: median {1000 * statistics.median(walls):.1f} ms, "
            f"p99 {1000 * walls[int(0.99 * (n - 1))]:.1f} ms, max {1000 * walls[-1]:.1f} ms"
        )
        print(
            f"  CPU of MailProg per mail (the drain left its session: not counted): {1000 * cpu / n:.1f} ms"
        )
        print(
            f"  all queued after {t_queued - t0:.1f} s; last mail sent {t_done - t0:.1f} s after the first call"
        )
        print(f"  drains that held the lock: {len(spans)}; two at once: {'yes' if overlap else 'never'}")
        print(f"  mails captured: {len(subjects)} of {n}, distinct: {len(set(subjects))}")


def rate(n: int, per_min: float) -> None:
    """N mails queued while the drain lock is held (no drain starts), then one drain sends them all."""
    with tempfile.TemporaryDirectory(prefix="bench-mail-rate-") as tmp:
        env, spool, sent = setup(Path(tmp), per_min)
        with drain_lock(spool):
            for j in range(1, n + 1):
                one_mail(env, j)
        drain = env["EASLURM_MAIL_DRAIN"].split()
        t0 = time.monotonic()
        subprocess.run(
            [*drain, "mail", "drain", "--spool", str(spool), "--linger", "0"],
            env=env,
            check=True,
            stderr=subprocess.DEVNULL,
        )
        t_done = wait_sent(sent, n, 600)
        stamps = sorted(int(p.name.split("-")[0]) / 1e9 for p in sent.iterdir())
        span = stamps[-1] - stamps[0]
        least = (n - 1) * 60.0 / per_min
        print(f"rate: {n} queued mails, one drain, mail.rate_per_min = {per_min:g}")
        print(
            f"  first to last mail at the mailer: {span:.2f} s (the rate allows no less than {least:.2f} s: "
            f"ratio {span / least:.3f}); the drain ran {t_done - t0:.1f} s"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--mails", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=8)
    args = ap.parse_args()
    print(f"load average before: {load()}")
    burst(args.mails, args.concurrency)
    rate(100, 1200.0)
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
