"""Cluster power as a step function of time, and its exact integral split into busy, idle, off and cycle energy."""

from __future__ import annotations

import numpy as np


class PowerLedger:
    """Power changes only when a job starts or stops or a node changes power state; energy is integrated
    exactly between changes, in four parts: busy (jobs' GPUs), idle (powered-on GPUs without a job and
    the nodes' base power), off (powered-down nodes) and cycle (nodes shutting down or booting). It also
    follows the GPUs' own power (jobs and idle GPUs of powered-on nodes), which a power budget bounds."""

    def __init__(self, idle_w: float, busy_w: float = 0.0, gpu_w: float | None = None) -> None:
        self.busy_w = busy_w
        self.idle_w = idle_w
        self.off_w = 0.0
        self.cycle_w = 0.0
        self.busy_j = 0.0
        self.idle_j = 0.0
        self.off_j = 0.0
        self.cycle_j = 0.0
        self._last_s = 0.0
        self._times: list[float] = [0.0]
        self._power: list[float] = [busy_w + idle_w]
        self.gpu_w = busy_w + idle_w if gpu_w is None else gpu_w
        self._gpu_power: list[float] = [self.gpu_w]
        self.end_s: float | None = None

    @property
    def power_w(self) -> float:
        return self.busy_w + self.idle_w + self.off_w + self.cycle_w

    @property
    def total_j(self) -> float:
        return self.busy_j + self.idle_j + self.off_j + self.cycle_j

    def _advance(self, now_s: float) -> None:
        dt = now_s - self._last_s
        if dt > 0:
            self.busy_j += self.busy_w * dt
            self.idle_j += self.idle_w * dt
            self.off_j += self.off_w * dt
            self.cycle_j += self.cycle_w * dt
            self._last_s = now_s

    def change(
        self,
        now_s: float,
        busy_delta_w: float,
        idle_delta_w: float,
        off_delta_w: float = 0.0,
        cycle_delta_w: float = 0.0,
        gpu_delta_w: float | None = None,
    ) -> None:
        """Move power between the parts; `gpu_delta_w` is the GPUs' share of the change (default: all of
        the busy and idle change, as when a job starts or stops on a powered-on node)."""
        self._advance(now_s)
        self.gpu_w += busy_delta_w + idle_delta_w if gpu_delta_w is None else gpu_delta_w
        self.busy_w += busy_delta_w
        self.idle_w += idle_delta_w
        self.off_w += off_delta_w
        self.cycle_w += cycle_delta_w
        if self._times[-1] == now_s:
            self._power[-1] = self.power_w
            self._gpu_power[-1] = self.gpu_w
        else:
            self._times.append(now_s)
            self._power.append(self.power_w)
            self._gpu_power.append(self.gpu_w)

    def close(self, end_s: float) -> None:
        self._advance(end_s)
        self.end_s = end_s

    def series(self) -> tuple[np.ndarray, np.ndarray]:
        """(times_s, power_w): power_w[i] holds from times_s[i] to times_s[i+1] (or the end)."""
        return np.asarray(self._times, dtype=np.float64), np.asarray(self._power, dtype=np.float64)

    def gpu_series(self) -> tuple[np.ndarray, np.ndarray]:
        """(times_s, gpu_power_w): the GPUs' own power, as `series`."""
        return np.asarray(self._times, dtype=np.float64), np.asarray(self._gpu_power, dtype=np.float64)

    def max_w(self) -> float:
        return float(max(self._power))

    def max_gpu_w(self) -> float:
        return float(max(self._gpu_power))

    def time_above_s(self, limit_w: float) -> float:
        """Time the GPUs' power (what a power budget bounds) was above `limit_w`."""
        t, p = self.gpu_series()
        end = self.end_s if self.end_s is not None else float(t[-1])
        dt = np.diff(np.append(t, end))
        return float(dt[p > limit_w + 1e-6].sum())
