"""Measuring processes run together on one device: a barrier so their timed windows start at once, each
keeping the device busy until all are timed, and the device's energy over the overlap.

The per-process work is injected (`Runner`) so this runs without torch in tests.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import queue as queue_mod
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from easlurm.errors import ModelError
from easlurm.measure.steps import MeasureConfig, Timing

log = logging.getLogger(__name__)

#: Seconds a process may take to build and warm up before the group is given up.
START_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Window:
    """One process's timed window: monotonic start/end (s, the same clock in every process on a node)."""

    start_s: float
    end_s: float
    steps: int

    @property
    def step_time_s(self) -> float:
        return (self.end_s - self.start_s) / self.steps


class Gate:
    """A process's side of the synchronisation: wait for the common start, report the window, then keep
    the GPU busy until every process of the group has reported."""

    def __init__(self, index: int, barrier: Any, stop: Any, reports: Any) -> None:
        self.index = index
        self._barrier = barrier
        self._stop = stop
        self._reports = reports

    def wait_start(self) -> float:
        """Block until every process is warmed up; the window starts at the returned monotonic instant."""
        self._barrier.wait(timeout=START_TIMEOUT_S)
        return time.monotonic()

    def report(self, window: Window) -> None:
        self._reports.put((self.index, window))

    @property
    def stopped(self) -> bool:
        return bool(self._stop.is_set())


class Runner(Protocol):
    """The per-process work: prepare `cfg` on `device`, `gate.wait_start()`, time a window of at least
    `timing.window_s`, `gate.report()` it, then keep stepping until `gate.stopped`."""

    def __call__(self, cfg: MeasureConfig, device: str, timing: Timing, gate: Gate) -> None: ...


@dataclass(frozen=True)
class GroupResult:
    """Windows of the processes run together and the GPU's mean power while all of them were timed."""

    windows: tuple[Window, ...]
    overlap_s: float
    gpu_power_w: float | None


def _child(
    runner: Runner,
    index: int,
    cfg: MeasureConfig,
    device: str,
    timing: Timing,
    barrier: Any,
    stop: Any,
    reports: Any,
) -> None:
    """A measuring process: run the job; a failure is reported as one line and breaks the barrier."""
    try:
        runner(cfg, device, timing, Gate(index, barrier, stop, reports))
    except BaseException as exc:
        text = str(exc).strip().splitlines()
        reports.put((index, f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")))
        barrier.abort()


def run_group(
    jobs: Sequence[MeasureConfig],
    runner: Runner,
    device: str,
    timing: Timing,
    energy_j: Callable[[], float | None] | None,
    context: str = "spawn",
) -> GroupResult:
    """Start one process per job on `device` at once; raises ModelError naming the job that failed."""
    ctx: Any = mp.get_context(context)
    barrier = ctx.Barrier(len(jobs) + 1)
    stop = ctx.Event()
    reports = ctx.Queue()
    procs = [
        ctx.Process(
            target=_child,
            args=(runner, i, cfg, device, timing, barrier, stop, reports),
            name=f"easlurm-measure-{cfg.model}",
            daemon=True,
        )
        for i, cfg in enumerate(jobs)
    ]
    for p in procs:
        p.start()
    windows: dict[int, Window] = {}
    try:
        try:
            barrier.wait(timeout=START_TIMEOUT_S)
        except threading.BrokenBarrierError:
            raise _failure(jobs, reports, procs) from None
        t0, e0 = _energy_at(energy_j)
        t1, e1 = t0, None
        deadline = t0 + START_TIMEOUT_S + 100 * timing.window_s
        while len(windows) < len(jobs):
            try:
                index, what = reports.get(timeout=1.0)
            except queue_mod.Empty:
                gone = any(not p.is_alive() for i, p in enumerate(procs) if i not in windows)
                if gone or time.monotonic() > deadline:
                    raise _failure(jobs, reports, procs) from None
                continue
            if not isinstance(what, Window):
                raise ModelError(job_text(jobs[index]) + f": {what}")
            if not windows:  # the first window ended: every process was timed until now
                t1, e1 = _energy_at(energy_j)
            windows[index] = what
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=30.0)
            if p.is_alive():
                log.warning("measuring process %s did not stop; terminating it", p.pid)
                p.terminate()
                p.join(timeout=5.0)
    power = None if e0 is None or e1 is None or t1 <= t0 else (e1 - e0) / (t1 - t0)
    ordered = tuple(windows[i] for i in range(len(jobs)))
    overlap = min(w.end_s for w in ordered) - max(w.start_s for w in ordered)
    return GroupResult(ordered, overlap, power)


def _energy_at(energy_j: Callable[[], float | None] | None) -> tuple[float, float | None]:
    """(monotonic instant, cumulative J) with the instant in the middle of the read (a counter read
    may take milliseconds)."""
    t0 = time.monotonic()
    if energy_j is None:
        return t0, None
    e = energy_j()
    return 0.5 * (t0 + time.monotonic()), e


def job_text(cfg: MeasureConfig) -> str:
    return f"{cfg.model} batch {cfg.batch} {cfg.precision} {cfg.mode}"


def _failure(jobs: Sequence[MeasureConfig], reports: Any, procs: Sequence[Any]) -> ModelError:
    """The first job that said why it failed, else the first that died."""
    try:
        while True:
            index, what = reports.get(timeout=2.0)
            if not isinstance(what, Window):
                return ModelError(job_text(jobs[index]) + f": {what}")
    except queue_mod.Empty:
        pass
    for cfg, p in zip(jobs, procs):
        if not p.is_alive() and p.exitcode not in (0, None):
            return ModelError(f"{job_text(cfg)}: measuring process exited with code {p.exitcode}")
    return ModelError(f"{' and '.join(job_text(c) for c in jobs)}: no result in time")
