"""Cluster power as a step function of time, and its exact integral split into busy and idle energy."""

from __future__ import annotations

import numpy as np


class PowerLedger:
    """Power changes only when a job starts or stops; energy is integrated exactly between changes."""

    def __init__(self, idle_w: float, busy_w: float = 0.0) -> None:
        self.busy_w = busy_w
        self.idle_w = idle_w
        self.busy_j = 0.0
        self.idle_j = 0.0
        self._last_s = 0.0
        self._times: list[float] = [0.0]
        self._power: list[float] = [busy_w + idle_w]
        self.end_s: float | None = None

    @property
    def power_w(self) -> float:
        return self.busy_w + self.idle_w

    def _advance(self, now_s: float) -> None:
        dt = now_s - self._last_s
        if dt > 0:
            self.busy_j += self.busy_w * dt
            self.idle_j += self.idle_w * dt
            self._last_s = now_s

    def change(self, now_s: float, busy_delta_w: float, idle_delta_w: float) -> None:
        self._advance(now_s)
        self.busy_w += busy_delta_w
        self.idle_w += idle_delta_w
        if self._times[-1] == now_s:
            self._power[-1] = self.power_w
        else:
            self._times.append(now_s)
            self._power.append(self.power_w)

    def close(self, end_s: float) -> None:
        self._advance(end_s)
        self.end_s = end_s

    def series(self) -> tuple[np.ndarray, np.ndarray]:
        """(times_s, power_w): power_w[i] holds from times_s[i] to times_s[i+1] (or the end)."""
        return np.asarray(self._times, dtype=np.float64), np.asarray(self._power, dtype=np.float64)

    def max_w(self) -> float:
        return float(max(self._power))

    def time_above_s(self, limit_w: float) -> float:
        t, p = self.series()
        end = self.end_s if self.end_s is not None else float(t[-1])
        dt = np.diff(np.append(t, end))
        return float(dt[p > limit_w + 1e-6].sum())
