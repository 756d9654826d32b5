"""Periodic sensor reads on a shared tick grid: one daemon thread per sensor backend, streaming
integration per sensor, an optional sample log."""

from __future__ import annotations

import csv
import logging
import math
import threading
import time
from pathlib import Path
from typing import IO

from easlurm.energy.integrate import StreamIntegrator
from easlurm.energy.sensor import Sensor
from easlurm.errors import SensorError

log = logging.getLogger(__name__)

#: A sensor is considered broken after this many consecutive unknown values spanning at least
#: MAX_UNKNOWN_S seconds (a helper process such as nvidia-smi may need a second to say anything).
MAX_TRANSIENT_FAILURES = 50
MAX_UNKNOWN_S = 5.0
SAMPLE_COLUMNS = ["time_s", "device", "kind", "source", "energy_j", "power_w"]


class SampleLog:
    """power_samples.csv, written as samples arrive (nothing is held in memory)."""

    def __init__(self, path: Path, t0: float) -> None:
        self.path = path
        self.t0 = t0
        self._fh: IO[str] | None = path.open("w", newline="", buffering=1 << 16)
        self._writer = csv.writer(self._fh, lineterminator="\n")
        self._writer.writerow(SAMPLE_COLUMNS)
        self._lock = threading.Lock()

    def write(self, t_s: float, sensor: Sensor, energy_j: float, power_w: float | None) -> None:
        row = [f"{t_s - self.t0:.6f}", sensor.name, sensor.kind.value, sensor.source, f"{energy_j:.6f}"]
        row.append("" if power_w is None else f"{power_w:.3f}")
        with self._lock:
            if self._fh is not None:
                self._writer.writerow(row)

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


class SensorSampler:
    """One sensor's readings: streaming integration, degradation on SensorError, the sample log.
    Driven by a SamplingThread (or by hand: `sample()`)."""

    def __init__(self, sensor: Sensor, sample_log: SampleLog | None = None) -> None:
        self.sensor = sensor
        self.integrator = StreamIntegrator(sensor.mode, peak_window_s=2 * sensor.update_period_s)
        self.sample_log = sample_log
        self.error: str | None = None
        self.transient = 0
        self._last_ok: float | None = None

    def sample(self) -> None:
        """Take one reading now; errors degrade this sensor, never the caller."""
        if self.error is not None:
            return
        if self.sensor.batched:
            self._sample_batch()
            return
        try:
            t0 = time.monotonic()
            value = self.sensor.read()
            t = 0.5 * (t0 + time.monotonic())
        except SensorError as exc:
            self.degrade(str(exc))
            return
        except Exception as exc:  # a sensor bug must not take the profiled run down
            self.degrade(f"{type(exc).__name__}: {exc}")
            return
        if value is None:
            self._unknown(t)
            return
        self.transient = 0
        self._last_ok = t
        self._add(t, value)

    def _sample_batch(self) -> None:
        """A buffering sensor: every reading carries its own time; ones not after the last are dropped."""
        try:
            readings = self.sensor.read_batch()
        except SensorError as exc:
            self.degrade(str(exc))
            return
        except Exception as exc:
            self.degrade(f"{type(exc).__name__}: {exc}")
            return
        t = time.monotonic()
        if readings is None:
            self._unknown(t)
            return
        self.transient = 0
        self._last_ok = t
        last = self.integrator.t_last
        for t_s, value in readings:
            if last is None or t_s > last:
                self._add(t_s, value)
                last = t_s

    def _unknown(self, t: float) -> None:
        self.transient += 1
        if self._last_ok is None:
            self._last_ok = t
        if self.transient >= MAX_TRANSIENT_FAILURES and t - self._last_ok >= MAX_UNKNOWN_S:
            self.degrade(f"{self.transient} consecutive unknown values over {t - self._last_ok:.1f} s")

    def _add(self, t: float, value: float) -> None:
        energy_j, power_w = self.integrator.add(t, value)
        if self.sample_log is not None:
            self.sample_log.write(t, self.sensor, energy_j, power_w)

    def degrade(self, why: str) -> None:
        log.warning("sensor %s degraded: %s", self.sensor.name, why)
        self.error = why


class SamplingThread:
    """One daemon thread that reads a group of sensors every interval_s on absolute deadlines (no drift).

    Sensors of one backend share a thread: they share a driver (a stalled NVML stalls every GPU's read
    anyway), and the profiled program loses the GIL once per backend and tick, not once per device.
    Threads sharing `phase_t0` wake on the same grid."""

    def __init__(
        self, samplers: list[SensorSampler], interval_s: float, phase_t0: float | None = None, name: str = ""
    ) -> None:
        self.samplers = samplers
        self.interval_s = interval_s
        self.phase_t0 = phase_t0
        self.cpu_s = 0.0
        #: CPU of the closing reading alone (a fixed cost per run, e.g. the GPU energy counter's).
        self.closing_cpu_s = 0.0
        # A held lock that stop() releases: acquire(timeout) is one C call, cheaper than Event.wait.
        self._stop = threading.Lock()
        self._stop.acquire()
        self._stopping = False
        label = name or ",".join(sp.sensor.name for sp in samplers)
        self._thread = threading.Thread(target=self._run, name=f"easlurm-sampler-{label}", daemon=True)

    def _sample_all(self) -> None:
        for sp in self.samplers:
            sp.sample()

    def _next_read_s(self) -> float | None:
        """The earliest instant a sensor of this thread has work, when every live one buffers; else None."""
        wake: float | None = None
        for sp in self.samplers:
            if sp.error is not None:
                continue
            t = sp.sensor.next_read_s() if sp.sensor.batched else None
            if t is None:
                return None
            wake = t if wake is None else min(wake, t)
        return wake

    def start(self) -> None:
        """First reading synchronously (so every sensor starts together), then the thread."""
        self._sample_all()
        self._thread.start()

    def _run(self) -> None:
        cpu0 = time.thread_time()
        base = self.phase_t0 if self.phase_t0 is not None else time.monotonic()
        tick = 0
        while not all(sp.error is not None for sp in self.samplers):
            now = time.monotonic()
            # Next tick of the shared grid; ticks missed by an overrun are skipped, not burst.
            tick = max(tick + 1, int((now - base) / self.interval_s) + 1)
            wake = self._next_read_s()
            if wake is not None:  # buffering sensors only: sleep to the first grid tick with work
                tick = max(tick, math.ceil((wake - base) / self.interval_s))
            deadline = base + tick * self.interval_s
            if self._stop.acquire(timeout=max(deadline - now, 0.0)):
                break
            self._sample_all()
        for sp in self.samplers:
            sp.sensor.want_exact()
        cpu1 = time.thread_time()
        self._sample_all()  # the closing reading, taken after stop was asked
        self.cpu_s = time.thread_time() - cpu0
        self.closing_cpu_s = time.thread_time() - cpu1

    def request_stop(self) -> None:
        """Wake the thread for its closing reading (idempotent)."""
        if not self._stopping:
            self._stopping = True
            self._stop.release()

    def stop(self, timeout_s: float = 5.0) -> None:
        self.request_stop()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)
            if self._thread.is_alive():
                for sp in self.samplers:
                    sp.degrade(f"sampler did not stop within {timeout_s} s")
        for sp in self.samplers:
            sp.integrator.finish()


def sampling_threads(
    samplers: list[SensorSampler], interval_s: float, phase_t0: float | None = None
) -> list[SamplingThread]:
    """One SamplingThread per sensor backend (the module that reads it)."""
    groups: dict[str, list[SensorSampler]] = {}
    for sp in samplers:
        groups.setdefault(type(sp.sensor).__module__, []).append(sp)
    return [
        SamplingThread(group, interval_s, phase_t0, name=backend.rsplit(".", 1)[-1])
        for backend, group in groups.items()
    ]
