"""A replay's saving per job with its uncertainty: a number is a result only when its interval excludes zero.

A saving against the record is a mean over jobs: one job (or a handful) says nothing of the next, and a
mean of many jobs can still sit within their spread. Each job is paired with its own record (same job,
same work), its busy energy saved is averaged over the policy's seeds, and the seeded bootstrap of
easlurm.stats gives the 95% interval of the mean. Idle energy is the schedule's, not a job's: it is
added to the interval as is (the window of sim/replay_window.py charges every row the same idle power).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from easlurm.stats import bootstrap_ci

#: Fewer jobs paired with the record than this give no interval: the report says "no difference".
MIN_JOBS = 10


@dataclass(frozen=True)
class SavingInterval:
    """One policy's energy per job saved against the record (J; positive: the policy uses less)."""

    label: str
    jobs: int  # jobs paired with the record (both have an energy for them)
    saved_j: float | None
    low_j: float | None
    high_j: float | None

    @property
    def verdict(self) -> str:
        """`saves`, `costs`, `no difference` (the interval holds zero) or `too few jobs`."""
        if self.jobs < MIN_JOBS or self.low_j is None or self.high_j is None:
            return "too few jobs"
        if self.low_j <= 0.0 <= self.high_j:
            return "no difference"
        return "saves" if self.low_j > 0.0 else "costs"

    def to_dict(self) -> dict[str, Any]:
        return {
            "jobs_paired": self.jobs,
            "ci_low_j": self.low_j,
            "ci_high_j": self.high_j,
            "verdict": self.verdict,
        }


class JobEnergies:
    """Each job's energy per label, summed over seeds, aligned with the record's jobs (bounded memory:
    one float array per label)."""

    def __init__(self, record_j: Mapping[str, float]) -> None:
        self.index = {job_id: i for i, job_id in enumerate(record_j)}
        self.record = np.fromiter(record_j.values(), dtype=np.float64, count=len(record_j))
        self._sum: dict[str, np.ndarray] = {}
        self._n: dict[str, np.ndarray] = {}

    def add(self, label: str, rows: Iterable[Mapping[str, Any]] | None) -> None:
        """One run's per-job rows (`job_id`, `energy_j`); jobs the record lacks are left out."""
        if rows is None or not len(self.index):
            return
        total = self._sum.setdefault(label, np.zeros(len(self.index)))
        count = self._n.setdefault(label, np.zeros(len(self.index)))
        for row in rows:
            i = self.index.get(str(row.get("job_id")))
            energy = row.get("energy_j")
            if i is not None and isinstance(energy, int | float) and np.isfinite(energy):
                total[i] += float(energy)
                count[i] += 1.0

    def differences(self, label: str) -> np.ndarray:
        """Record minus the label's seed-mean energy, per job both have."""
        if label not in self._sum:
            return np.zeros(0)
        n = self._n[label]
        have = n > 0
        return self.record[have] - self._sum[label][have] / n[have]


def intervals(
    energies: JobEnergies, rows: Iterable[Mapping[str, Any]], seed: int = 0
) -> list[SavingInterval]:
    """The saving of each row of `savings()` (label, total_j, busy_j) with its 95% interval: the bootstrap
    interval of the jobs' paired busy savings, moved onto the row's own total (its idle part added)."""
    out = []
    for row in rows:
        label, total = str(row["label"]), row.get("total_j")
        d = energies.differences(label)
        ci = bootstrap_ci(d, seed=seed) if d.size >= MIN_JOBS else None
        if ci is None or total is None:
            out.append(SavingInterval(label, int(d.size), total, None, None))
            continue
        mean = float(d.mean())
        out.append(SavingInterval(label, int(d.size), total, total + ci[0] - mean, total + ci[1] - mean))
    return out
