"""Cost of one reading of every Slurm job's CPU time on a node (easlurm.energy.cpu_share), which the node
agent of a CPU/DRAM profile takes every CpuShareWatch.PERIOD_S: the process-tree walk that proctrack/
linuxproc nodes need (every /proc/<pid>/cmdline, the stepds' trees, their tasks' environ) on this host's
real /proc, and the cgroup v2 read on a fake tree of N job cgroups.

    python benchmarks/bench_cpu_share.py [--repeats 50] [--jobs 64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from easlurm.energy.cpu_share import CpuShareWatch, CpuTimeReader


def per_reading_ms(reader: CpuTimeReader, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        reader.read()
        times.append(time.perf_counter() - t0)
    return 1000.0 * statistics.median(times)


def cgroup_tree(root: Path, jobs: int) -> Path:
    """A cgroup v2 tree with `jobs` job cgroups, and a /proc whose pid 1 is job 1's slurmstepd."""
    scope = root / "cgroup" / "system.slice" / "slurmstepd.scope"
    for job in range(1, jobs + 1):
        (scope / f"job_{job}").mkdir(parents=True)
        (scope / f"job_{job}" / "cpu.stat").write_text(f"usage_usec {job * 1000}\nuser_usec 0\n")
    (root / "proc" / "1").mkdir(parents=True)
    (root / "proc" / "1" / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_1/step_0\n")
    return root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=64)
    args = ap.parse_args()
    processes = sum(1 for n in os.listdir("/proc") if n.isdigit())
    tree_ms = per_reading_ms(CpuTimeReader(os.getpid()), args.repeats)
    print(f"process trees, {processes} processes on this host: {tree_ms:.2f} ms per reading")
    with tempfile.TemporaryDirectory() as tmp:
        root = cgroup_tree(Path(tmp), args.jobs)
        reader = CpuTimeReader(1, root / "proc", root / "cgroup")
        cg_ms = per_reading_ms(reader, args.repeats)
    print(f"cgroup v2, {args.jobs} job cgroups: {cg_ms:.2f} ms per reading")
    period = CpuShareWatch.PERIOD_S
    print(
        f"every {period:g} s: {tree_ms / period / 10:.3f} % (trees) / {cg_ms / period / 10:.3f} % (cgroups) of a core"
    )


if __name__ == "__main__":
    main()
