"""Slurm's backfill plan: free GPUs of every node over time, with jobs reserved for their time limits."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Profile:
    """Free GPUs per node over time, as sched/backfill's node_space map: row t holds the free GPUs during
    [times_s[t], times_s[t+1]) (the last row lasts for ever). Availability changes only at a row's start,
    so a job's earliest start is always one of `times_s`."""

    times_s: np.ndarray  # (rows,) ascending, times_s[0] is now
    free: np.ndarray  # (rows, nodes) int64
    _levels: list[np.ndarray] | None = field(default=None, repr=False)

    @classmethod
    def build(
        cls, now_s: float, free_now: Sequence[int], releases: Iterable[tuple[float, int, int]]
    ) -> Profile:
        """The profile from the free GPUs now and (time_s > now_s, node index, GPUs) that running jobs
        give back when they end; releases at infinity are never planned."""
        events = sorted((t, i, g) for t, i, g in releases if math.isfinite(t) and t > now_s and g > 0)
        times = np.array([now_s, *sorted({t for t, _, _ in events})], dtype=np.float64)
        free = np.tile(np.asarray(free_now, dtype=np.int64), (len(times), 1))
        for t, i, g in events:
            free[np.searchsorted(times, t) :, i] += g
        return cls(times, free)

    @property
    def now_s(self) -> float:
        return float(self.times_s[0])

    def window_min(self, duration_s: float) -> np.ndarray:
        """(rows, nodes): per start row, the fewest free GPUs of each node during [start, start + duration)."""
        rows = len(self.times_s)
        first = np.arange(rows)
        if math.isfinite(duration_s):
            end = np.searchsorted(self.times_s, self.times_s + duration_s, side="left")
            end = np.maximum(end, first + 1)
        else:
            end = np.full(rows, rows)
        levels = self._sparse_table()
        level = np.floor(np.log2(end - first)).astype(np.int64)
        out = np.empty_like(self.free)
        for lv in np.unique(level):
            sel = first[level == lv]
            table = levels[int(lv)]
            out[sel] = np.minimum(table[sel], table[end[sel] - (1 << int(lv))])
        return out

    def _sparse_table(self) -> list[np.ndarray]:
        """levels[j][i] = min of rows i .. i + 2^j - 1 (range minima in two lookups)."""
        if self._levels is None:
            levels = [self.free]
            k = 1
            while 2 * k <= len(self.free):
                prev = levels[-1]
                levels.append(np.minimum(prev[:-k], prev[k:]))
                k *= 2
            self._levels = levels
        return self._levels

    def take(self, start_s: float, end_s: float, alloc: Iterable[tuple[int, int]]) -> None:
        """Reserve `alloc` ((node index, GPUs), ...) during [start_s, end_s)."""
        lo = self._row_at(start_s)
        hi = self._row_at(end_s) if math.isfinite(end_s) else len(self.times_s)
        for i, g in alloc:
            self.free[lo:hi, i] -= g
        self._levels = None

    def _row_at(self, t_s: float) -> int:
        """The row starting at t_s, split off the row that holds it where none starts there."""
        row = int(np.searchsorted(self.times_s, t_s, side="left"))
        if row < len(self.times_s) and self.times_s[row] == t_s:
            return row
        self.times_s = np.insert(self.times_s, row, t_s)
        self.free = np.insert(self.free, row, self.free[row - 1], axis=0)
        return row


def choose_nodes(avail: np.ndarray, nodes: np.ndarray, k: int, m: int) -> tuple[tuple[int, int], ...] | None:
    """(node index, GPUs) for k GPUs over m of `nodes` given each node's free GPUs `avail` (all nodes), or
    None: best fit (the nodes with the fewest free GPUs that hold their share), the GPUs split evenly
    (the first k mod m nodes take one more), as `--nodes=m` with GPUs per node would get."""
    per = -(-k // m)
    ok = nodes[avail[nodes] >= per]
    if len(ok) < m:
        return None
    chosen = sorted(ok[np.lexsort((ok, avail[ok]))[:m]].tolist())
    base, extra = divmod(k, m)
    return tuple((int(i), base + (1 if r < extra else 0)) for r, i in enumerate(chosen))


def earliest_row(window: np.ndarray, nodes: np.ndarray, k: int, m: int, rows: int) -> int:
    """First of the first `rows` rows of `window` (fewest free GPUs per node over the job's duration)
    where k GPUs fit on m of `nodes`; -1 when none."""
    if rows <= 0 or len(nodes) < m:
        return -1
    per = -(-k // m)
    fits = (window[:rows, nodes] >= per).sum(axis=1) >= m
    return int(np.argmax(fits)) if fits.any() else -1
