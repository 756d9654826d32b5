"""Streaming integration of one sensor's readings: constant memory, plus energy at requested instants."""

from __future__ import annotations

import threading
from collections.abc import Hashable

from easlurm.energy.sensor import Mode

#: The first measured interval whose mean power a lead-in extrapolates spans at least this (s): a
#: counter's first tick or two are quantised (a fake RAPL tree adds energy every 5 ms; a GPU counter
#: refreshes every 20-100 ms).
FIRST_POWER_SPAN_S = 1.0


class StreamIntegrator:
    """Energy (J), peak and mean power of one sensor, updated sample by sample.

    POWER readings are integrated by the trapezoid rule; ENERGY readings are already cumulative.
    Probes ask for the cumulative energy at an instant (region starts/ends, marks); they are resolved
    by linear interpolation when the samples on both sides are known, so nothing is kept per sample.
    """

    def __init__(self, mode: Mode, peak_window_s: float = 0.0) -> None:
        self.mode = mode
        self.peak_window_s = peak_window_s
        self.samples = 0
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.energy_j = 0.0
        self.peak_power_w: float | None = None
        #: Mean power over the first interval at least FIRST_POWER_SPAN_S (and `peak_window_s`) long (W):
        #: what a lead-in without samples of its own extrapolates (easlurm.energy.lead_in); None before
        #: that interval closed.
        self.first_power_w: float | None = None
        self._last_value: float | None = None
        self._e0 = 0.0
        self._win_t: float | None = None
        self._win_e = 0.0
        self._lock = threading.Lock()
        self._pending: dict[Hashable, float] = {}
        self.resolved: dict[Hashable, float | None] = {}

    def add(self, t_s: float, value: float) -> tuple[float, float | None]:
        """Feed one reading; returns (cumulative J, power W over the last interval or instantaneous)."""
        power: float | None
        prev_t, prev_e = self.t_last, self.energy_j
        if self.t_first is None or prev_t is None:
            self.t_first = t_s
            self.energy_j = 0.0
            self._e0 = value
            power = value if self.mode is Mode.POWER else None
            self.first_power_w = power
            self._win_t, self._win_e = t_s, 0.0
        else:
            dt = t_s - prev_t
            if self.mode is Mode.POWER:
                last = self._last_value if self._last_value is not None else value
                self.energy_j += 0.5 * (last + value) * max(dt, 0.0)
                power = value
            else:
                self.energy_j = value - self._e0
                power = (self.energy_j - prev_e) / dt if dt > 0 else None
        self._last_value = value
        self.t_last = t_s
        self.samples += 1
        if self.first_power_w is None and self.t_first is not None:
            span = t_s - self.t_first
            if span > 0 and span >= max(self.peak_window_s, FIRST_POWER_SPAN_S):
                self.first_power_w = self.energy_j / span
        self._update_peak(t_s, power)
        if self._pending:
            self._resolve(prev_t, prev_e, t_s, self.energy_j)
        return self.energy_j, power

    def _update_peak(self, t_s: float, power: float | None) -> None:
        if self.mode is Mode.POWER:
            if power is not None and (self.peak_power_w is None or power > self.peak_power_w):
                self.peak_power_w = power
            return
        # A cumulative counter refreshes in steps: take the peak over windows no shorter than its period.
        assert self._win_t is not None
        span = t_s - self._win_t
        if span > 0 and span >= self.peak_window_s:
            p = (self.energy_j - self._win_e) / span
            if self.peak_power_w is None or p > self.peak_power_w:
                self.peak_power_w = p
            self._win_t, self._win_e = t_s, self.energy_j

    @property
    def duration_s(self) -> float | None:
        if self.t_first is None or self.t_last is None:
            return None
        return self.t_last - self.t_first

    @property
    def mean_power_w(self) -> float | None:
        d = self.duration_s
        if d is None or d <= 0:
            return None
        return self.energy_j / d

    def request(self, key: Hashable, t_s: float) -> None:
        """Ask for the cumulative energy at monotonic instant t_s (resolved as samples arrive)."""
        with self._lock:
            if self.t_first is not None and self.t_last is not None and t_s <= self.t_last:
                # Already past: only happens for instants before the first sample or on a race.
                self.resolved[key] = 0.0 if t_s <= self.t_first else self.energy_j
            else:
                self._pending[key] = t_s

    def _resolve(self, t0: float | None, e0: float, t1: float, e1: float) -> None:
        with self._lock:
            for key, t in list(self._pending.items()):
                if t > t1:
                    continue
                if t0 is None or t <= t0:
                    value = 0.0 if t0 is None else e0
                else:
                    value = e0 + (e1 - e0) * (t - t0) / (t1 - t0)
                self.resolved[key] = value
                del self._pending[key]

    def finish(self) -> None:
        """Probes never reached (the sensor died first) stay unknown."""
        with self._lock:
            for key in self._pending:
                self.resolved[key] = None
            self._pending.clear()
