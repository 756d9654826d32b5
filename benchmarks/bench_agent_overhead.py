"""The node agent's added CPU per GPU for the live watch (issue 33): utilisation, memory, compute-process
and power-limit reads, the idle rule and the step's metrics file, at the default interval
(metrics.interval_s), on the fake NVML burning the CPU each call costs a real driver.

Two measurements of the same work, so each checks the other:
  per tick   LiveWatch.tick() run back to back in this thread (time.thread_time), scaled to one tick per
             interval: the cost of one read of every GPU plus one file write;
  thread     the watch's own thread running at a short interval for a while, its CPU clock read from
             outside (time.pthread_getcpuclockid), scaled to the default interval.
Both print % of one core per GPU; the target is <= 0.1 %. The energy and power come from a running
EnergyProfiler's integrators (no NVML call). Half the GPUs run a registered fake workload, half are idle
(the idle rule and the node's idle count are exercised). The fake's own Python (reading its process
registry) is counted too: an upper bound of the real cost.

Call costs (ms, EASLURM_BENCH_NVML_COST_MS to change them): the energy counter, power field and sample
buffer as measured on an H100 (driver 580, benchmarks/bench_profiler_overhead.py); utilisation, memory,
process list and power limit are assumed at 0.2, 0.2, 0.4 and 0.2 ms (single driver queries like the
power field; the process list is two): to be measured on a GPU.

    python benchmarks/bench_agent_overhead.py [--gpus 8] [--ticks 200] [--thread-s 15]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fakes"))

from easlurm.accounting.live import LiveWatch, WatchedStep, WatchSettings
from easlurm.config import DEFAULTS
from easlurm.energy import EnergyProfiler
from easlurm.energy.gpu_watch import GpuReader, IdleRule

FAKE_NVML = "easlurm_fakes.fake_nvml"
COST_MS = os.environ.get(
    "EASLURM_BENCH_NVML_COST_MS",
    "energy=4,field=0.2,power=0.2,samples=0.2,util=0.2,memory=0.2,procs=0.4,limit=0.2",
)
TARGET_PCT = 0.1


def setup(tmp: Path, ngpu: int) -> None:
    """Fake NVML with call costs; a registry where this process runs on the first half of the GPUs."""
    registry = tmp / "procs"
    registry.mkdir()
    for gpu in range(ngpu // 2):
        doc = {"pid": os.getpid(), "gpu": gpu, "sm_util": 80, "start_s": time.time()}
        (registry / f"{os.getpid()}-{gpu}.json").write_text(json.dumps(doc))
    os.environ.update(
        {
            "EASLURM_FAKE_NVML_COUNT": str(ngpu),
            "EASLURM_FAKE_NVML_POWER_W": "250",
            "EASLURM_FAKE_NVML_COST_MS": COST_MS,
            "EASLURM_FAKE_NVML_PROCS_DIR": str(registry),
        }
    )


def make_watch(tmp: Path, ngpu: int, interval_s: float, prof: EnergyProfiler) -> LiveWatch:
    settings = WatchSettings(IdleRule(1.0, 0.5), interval_s=interval_s, metrics_dir=tmp)
    reader = GpuReader(list(range(ngpu)), FAKE_NVML)
    reader.open()
    return LiveWatch(
        WatchedStep(123456, "batch", 0, "gpu-node-001", list(range(ngpu))), settings, prof.live_energy, reader
    )


def per_tick(tmp: Path, ngpu: int, ticks: int, prof: EnergyProfiler) -> tuple[float, float]:
    """(ms of CPU per tick for the whole watch, of which the NVML reads alone)."""
    watch = make_watch(tmp, ngpu, 10.0, prof)
    watch.tick()  # the first read also reads the power limits; steady state after
    c0 = time.thread_time()
    for _ in range(ticks):
        watch.tick()
    whole = (time.thread_time() - c0) / ticks
    reader = watch.reader
    c0 = time.thread_time()
    for k in range(ticks):
        reader.read(float(k))  # a limit read every 30 "s": as often as at the default interval
    reads = (time.thread_time() - c0) / ticks
    watch.stop()
    return 1e3 * whole, 1e3 * reads


def thread_cpu(tmp: Path, ngpu: int, interval_s: float, seconds: float, prof: EnergyProfiler) -> float:
    """CPU seconds per tick of the watch's own thread at `interval_s`."""
    watch = make_watch(tmp, ngpu, interval_s, prof)
    watch.start()
    assert watch._thread is not None
    time.sleep(0.05)
    clock = time.pthread_getcpuclockid(watch._thread.ident or threading.get_ident())
    c0, t0 = time.clock_gettime(clock), time.monotonic()
    time.sleep(seconds)
    cpu, elapsed = time.clock_gettime(clock) - c0, time.monotonic() - t0
    episodes = watch.stop()
    assert len({e["gpu"] for e in episodes}) == ngpu - ngpu // 2, "the idle GPUs were not seen idle"
    return cpu / (elapsed / interval_s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--ticks", type=int, default=200)
    ap.add_argument("--thread-s", type=float, default=15.0)
    ap.add_argument("--thread-interval-s", type=float, default=0.5)
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the idle GPUs' warnings are expected here
    default_s = float(DEFAULTS["metrics"]["interval_s"])
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        setup(tmp, args.gpus)
        prof = EnergyProfiler(devices="gpu", interval_s=0.1, nvml_module=FAKE_NVML, sample_log=False)
        prof.start()
        try:
            whole_ms, reads_ms = per_tick(tmp, args.gpus, args.ticks, prof)
            thread_s = thread_cpu(tmp, args.gpus, args.thread_interval_s, args.thread_s, prof)
        finally:
            prof.stop()
    per_gpu = 100 * whole_ms / 1e3 / default_s / args.gpus
    per_gpu_thread = 100 * thread_s / default_s / args.gpus
    print(
        f"fake NVML, {args.gpus} GPUs ({args.gpus // 2} busy, {args.gpus - args.gpus // 2} idle), call costs {COST_MS} ms"
    )
    print(
        f"per tick: {whole_ms:.2f} ms of CPU ({reads_ms:.2f} ms NVML reads, {whole_ms - reads_ms:.2f} ms idle rule, "
        f"metrics file, energy) = {per_gpu:.4f} % of a core per GPU at the default interval ({default_s:g} s)"
    )
    print(
        f"watch thread at {args.thread_interval_s:g} s for {args.thread_s:g} s: {1e3 * thread_s:.2f} ms of CPU per tick "
        f"= {per_gpu_thread:.4f} % of a core per GPU at {default_s:g} s"
    )
    worst = max(per_gpu, per_gpu_thread)
    print(
        f"target <= {TARGET_PCT} % of a core per GPU: {'met' if worst <= TARGET_PCT else 'NOT met'} ({worst:.4f} %)"
    )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
