"""Latency the easlurm SPANK plugin adds to job steps on the local cluster (scripts/slurm-box up first).

Runs the same job twice, with and without --energy-profile (agent on the fake NVML, 8 GPUs per step):
N sequential `srun` steps, each timed inside the batch script. Prints the per-step wall time of both
runs, the difference, and the plugin's own hook times from the slurmd logs ("agent started in X ms":
step start; "agent stopped in Y ms": step end, including node 0's gather and AdminComment publication).
Targets: start < 100 ms, end < 2 s. Usage: python benchmarks/bench_spank_latency.py [--steps 20]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(argv: list[str], env: dict[str, str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, env=env, check=True, timeout=300).stdout


def wait(job: str, env: dict[str, str], timeout_s: float = 300) -> str:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        out = run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State"], env).split()
        if out and out[0] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
            return out[0]
        time.sleep(0.5)
    raise SystemExit(f"job {job} did not finish")


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def summary(name: str, values: list[float], unit: str = "ms") -> str:
    return (
        f"{name:38} n={len(values):3d} median={statistics.median(values):8.1f} "
        f"p95={pct(values, 0.95):8.1f} max={max(values):8.1f} {unit}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--timeout-ms", type=int, default=2000)
    args = ap.parse_args()
    from easlurm.slurm.box_cli import make_box

    box = make_box()
    if not box.is_up():
        print("the local cluster is not up: scripts/slurm-box up", file=sys.stderr)
        return 1
    env = {**os.environ, **box.client_env()}
    boxdir = Path(box.paths.root)
    subprocess.run(
        [str(REPO / "spank" / "install-box"), str(boxdir), sys.executable], check=True, capture_output=True
    )
    conf = boxdir / "etc" / "plugstack.d" / "easlurm.conf"
    original = conf.read_text()
    line = (
        f"optional {boxdir}/lib/easlurm_spank.so agent={sys.executable} spool={boxdir}/spool/easlurm "
        f"timeout_ms={args.timeout_ms} env=SLURM_CONF={env['SLURM_CONF']} "
        f"env=PYTHONPATH={REPO / 'src'}:{REPO / 'tests' / 'fakes'} "
        "env=EASLURM_PROFILER__NVML_MODULE=easlurm_fakes.fake_nvml env=EASLURM_FAKE_NVML_COUNT=8 "
        "env=EASLURM_FAKE_NVML_POWER_W=250"
    )
    tmp = conf.with_name(".easlurm.conf.bench")
    tmp.write_text(line + "\n")
    os.replace(tmp, conf)
    results: dict[str, list[float]] = {}
    jobs: dict[str, str] = {}
    try:
        with tempfile.TemporaryDirectory() as td:
            os.chmod(td, 0o755)
            script = Path(td) / "steps.sh"
            script.write_text(
                "#!/bin/bash\n"
                f"for i in $(seq {args.steps}); do\n"
                "  t0=$(date +%s%N); srun -n1 true; t1=$(date +%s%N); echo step_ms=$(( (t1 - t0) / 1000000 ))\n"
                "done\n"
            )
            for mode, extra in (("plain", []), ("profiled", ["--energy-profile=all"])):
                out = Path(td) / f"{mode}.out"
                job = (
                    run(
                        [
                            "sbatch",
                            "--parsable",
                            "-p",
                            "a100",
                            "-N1",
                            "--gres=gpu:a100:8",
                            "-o",
                            str(out),
                            *extra,
                            str(script),
                        ],
                        env,
                    )
                    .strip()
                    .split(";")[0]
                )
                state = wait(job, env)
                if state != "COMPLETED":
                    print(f"{mode} job {job}: {state}", file=sys.stderr)
                    return 1
                jobs[mode] = job
                results[mode] = [float(v) for v in re.findall(r"step_ms=(\d+)", out.read_text())]
    finally:
        tmp.write_text(original)
        os.replace(tmp, conf)
    logs = "".join(p.read_text(errors="replace") for p in (boxdir / "log").glob("slurmd-*.log"))
    job = jobs["profiled"]
    start_ms = [
        float(v) for v in re.findall(rf"\[{job}\.\d+\] easlurm: step \S+: agent started in ([\d.]+) ms", logs)
    ]
    stop_ms = [
        float(v) for v in re.findall(rf"\[{job}\.\d+\] easlurm: step \S+: agent stopped in ([\d.]+) ms", logs)
    ]
    print(
        f"easlurm SPANK latency, {args.steps} sequential srun steps, 1 node, 8 (fake) GPUs, load {os.getloadavg()[0]:.1f}"
    )
    print(summary("srun step wall, without plugin option", results["plain"]))
    print(summary("srun step wall, --energy-profile=all", results["profiled"]))
    added = statistics.median(results["profiled"]) - statistics.median(results["plain"])
    print(f"{'added per step (median difference)':38} {added:8.1f} ms")
    if start_ms:
        print(summary("step start: plugin hook (fork/exec)", start_ms))
    if stop_ms:
        print(summary("step end: stop+record+publish (hook)", stop_ms))
    ok = bool(start_ms) and bool(stop_ms) and max(start_ms) < 100 and max(stop_ms) < 2000
    print("targets (start < 100 ms, end < 2 s):", "met" if ok else "NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
