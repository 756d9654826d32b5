"""NVML's driver-side power sample buffer (nvmlDeviceGetSamples), drained at a slow cadence.

The driver samples each GPU's power itself and keeps the last few samples; one call returns every
sample newer than a timestamp, so the timeline costs one call every few seconds instead of one power
read per tick ("higher frequency data at lower polling cost", NVML's documentation). The buffer is
bounded: drained too rarely it loses its oldest samples, which shows up as a gap after the last sample
seen; the cadence then halves.
"""

from __future__ import annotations

import itertools
import logging
import statistics
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from easlurm.energy.nvml_errors import NVML_ERROR_NOT_FOUND

log = logging.getLogger(__name__)

NVML_TOTAL_POWER_SAMPLES = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
#: Drain the buffer when this fraction of its time span has filled (the rest is headroom for a late tick).
HEADROOM = 0.5
#: Never drain less often than this (s): a lost GPU or a stalled driver is noticed within it, and the
#: timeline up to the loss is kept (0.2 ms per drain on an H100 is 0.01 % of a core at this cadence).
MAX_POLL_S = 2.0
#: CPU share of one core (fraction) the drain calls may cost; above it the cadence is logged as costly.
CPU_SHARE = 0.0002
#: A first new sample later than this many driver periods after the last one seen means samples were lost.
GAP_PERIODS = 1.8
#: No new sample for this long (s, and at least 20 driver periods): the buffer is not filling any more.
STALL_S = 5.0


def monotonic_offset_s() -> float:
    """monotonic - wall clock (s), from the closest of three clock pairs (a preemption between the two
    reads would shift every converted timestamp)."""
    best: tuple[float, float] | None = None
    for _ in range(3):
        m0 = time.monotonic()
        w = time.time()
        m1 = time.monotonic()
        if best is None or m1 - m0 < best[0]:
            best = (m1 - m0, 0.5 * (m0 + m1) - w)
    assert best is not None
    return best[1]


def wall_us_to_monotonic(ts_us: int, offset_s: float) -> float:
    """A driver timestamp (CPU wall-clock microseconds) on the sampler's monotonic time base (s)."""
    return ts_us * 1e-6 + offset_s


@dataclass
class BufferStats:
    """What the drains did: calls, samples, gaps (lost samples) and the CPU of the calls."""

    polls: int = 0
    samples: int = 0
    gaps: int = 0
    lost_samples: int = 0
    cpu_s: float = 0.0


class PowerSampleBuffer:
    """One GPU's driver power samples as (monotonic s, W), newest first seen after `open()`.

    `open()` reads the whole buffer once to learn the driver's sample period and the buffer's span,
    then `drain()` returns the samples that arrived since, when `due()`. NVMLErrors other than
    NOT_FOUND (nothing new) propagate for the caller to classify.
    """

    def __init__(self, nvml: ModuleType, handle: Any, name: str) -> None:
        self.nvml = nvml
        self.handle = handle
        self.name = name
        self.driver_period_s = 0.0
        self.capacity = 0
        self.poll_s = MAX_POLL_S
        self.stats = BufferStats()
        self._last_seen_us = 0
        self._last_poll = 0.0
        self._last_new = 0.0
        self._cost_s = 0.0
        self._costly_logged = False
        self.last_w: float | None = None
        #: The buffer as open() found it, (unix s, W) oldest first: the driver's samples from before this
        #: process opened NVML, which cover a lead-in (easlurm.energy.lead_in).
        self.history: list[tuple[float, float]] = []

    def open(self) -> str | None:
        """Read the whole buffer; None when usable, else why not (the caller polls power instead)."""
        fn = getattr(self.nvml, "nvmlDeviceGetSamples", None)
        if fn is None:
            return "this NVML has no nvmlDeviceGetSamples"
        try:
            value_type, samples = self._call(0)
        except self.nvml.NVMLError as exc:
            return f"nvmlDeviceGetSamples: {exc}"
        if value_type != NVML_VALUE_TYPE_UNSIGNED_INT:
            return f"nvmlDeviceGetSamples: unexpected power sample type {value_type}"
        stamps = sorted(int(s.timeStamp) for s in samples)
        if len(stamps) < 2:
            return f"the driver's power buffer holds {len(stamps)} sample(s), too few to learn its period"
        steps = [b - a for a, b in itertools.pairwise(stamps) if b > a]
        if not steps:
            return "the driver's power samples share one timestamp"
        self.driver_period_s = statistics.median(steps) * 1e-6
        self.capacity = len(stamps)
        self.poll_s = min(MAX_POLL_S, HEADROOM * self.capacity * self.driver_period_s)
        self._last_seen_us = stamps[-1]
        self.history = sorted((int(s.timeStamp) * 1e-6, s.sampleValue.uiVal * 1e-3) for s in samples)
        self.last_w = self.history[-1][1]
        self._last_poll = self._last_new = time.monotonic()
        log.debug(
            "%s: driver power samples every %.3f s, %d buffered; draining every %.2f s",
            self.name,
            self.driver_period_s,
            self.capacity,
            self.poll_s,
        )
        return None

    def _call(self, last_seen_us: int) -> tuple[int, list[Any]]:
        c0 = time.thread_time()
        try:
            value_type, samples = self.nvml.nvmlDeviceGetSamples(
                self.handle, NVML_TOTAL_POWER_SAMPLES, last_seen_us
            )
        finally:
            cost = time.thread_time() - c0
            self.stats.polls += 1
            self.stats.cpu_s += cost
            self._cost_s = cost if self.stats.polls == 1 else 0.8 * self._cost_s + 0.2 * cost
        return int(value_type), list(samples)

    def due(self, now: float) -> bool:
        return now - self._last_poll >= self.poll_s

    def next_poll_s(self) -> float:
        """Monotonic instant (s) the next drain is due."""
        return self._last_poll + self.poll_s

    @property
    def stalled(self) -> bool:
        """No new sample for much longer than the driver's period: the buffer is not filling any more."""
        return time.monotonic() - self._last_new > max(STALL_S, 20 * self.driver_period_s)

    def drain(self) -> list[tuple[float, float]]:
        """Samples newer than the last one seen, as (monotonic s, W) in time order; [] when none."""
        now = time.monotonic()
        self._last_poll = now
        try:
            _, samples = self._call(self._last_seen_us)
        except self.nvml.NVMLError as exc:
            if getattr(exc, "value", None) == NVML_ERROR_NOT_FOUND:
                return []
            raise
        fresh = sorted(
            (
                (int(s.timeStamp), s.sampleValue.uiVal)
                for s in samples
                if int(s.timeStamp) > self._last_seen_us
            ),
        )
        if not fresh:
            return []
        self._check_gap(fresh[0][0])
        self._last_seen_us = fresh[-1][0]
        self._last_new = now
        self.capacity = max(self.capacity, len(fresh))
        self.stats.samples += len(fresh)
        self._check_cost()
        offset = monotonic_offset_s()
        out = [(min(wall_us_to_monotonic(ts, offset), now), mw * 1e-3) for ts, mw in fresh]
        self.last_w = out[-1][1]
        return out

    def _check_gap(self, first_us: int) -> None:
        """Samples lost between the last one seen and the first returned: drain twice as often."""
        period_us = self.driver_period_s * 1e6
        gap_us = first_us - self._last_seen_us
        if gap_us <= GAP_PERIODS * period_us:
            return
        lost = max(round(gap_us / period_us) - 1, 0)
        self.stats.gaps += 1
        self.stats.lost_samples += lost
        self.poll_s = max(0.5 * self.poll_s, self.driver_period_s)
        log.log(
            logging.WARNING if self.stats.gaps == 1 else logging.DEBUG,
            "%s: the driver's power buffer overflowed (%d samples lost); draining every %.3f s now",
            self.name,
            lost,
            self.poll_s,
        )

    def _check_cost(self) -> None:
        share = self._cost_s / self.poll_s
        if share > CPU_SHARE and not self._costly_logged:
            self._costly_logged = True
            log.info(
                "%s: draining the power buffer every %.2f s costs %.3f%% of a core (%.2f ms a call)",
                self.name,
                self.poll_s,
                100 * share,
                1e3 * self._cost_s,
            )
