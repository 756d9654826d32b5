"""Records of the simulator: a job's outcome and its running segment with piecewise-constant rate."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from easlurm.priority.snapshot import RunningJob, StartJob
from easlurm.sim.job import JobSpec


@dataclass
class JobRecord:
    """Outcome of one job (mutable while the simulation runs)."""

    spec: JobSpec
    start_s: float | None = None  # first start
    end_s: float | None = None
    energy_j: float = 0.0
    wasted_energy_j: float = 0.0
    gpu_s: float = 0.0
    node: str | None = None
    gpu_type: str | None = None
    n_gpus: int | None = None
    n_nodes: int | None = None
    batch: int | None = None
    power_limit_w: float | None = None
    preemptions: int = 0
    shared_s: float = 0.0  # time run while sharing its GPU with another job
    resume_wait_s: float = 0.0  # time placed but waiting for powered-down nodes to boot


@dataclass
class Run:
    """One running segment of a job. Its rate and power are piecewise constant: they change when a
    partner joins or leaves its GPU; `pieces` keeps (time since start, samples done, rate, power) at
    each change so that a preemption knows the work and energy up to any instant."""

    record: JobRecord
    node: int
    start: StartJob
    samples_per_s: float
    power_w: float
    start_s: float
    remaining_samples: float  # at the segment's start
    state: RunningJob
    process: Any = None
    alone_samples_per_s: float = 0.0
    alone_power_w: float = 0.0
    gpu_share: float = 1.0  # of its GPUs' time charged to this job (its kernel-busy share when shared)
    partner: str | None = None
    piece_start_s: float = 0.0
    pieces: list[tuple[float, float, float, float]] = field(default_factory=list)
    #: (node index, GPUs) of every node it holds GPUs on (empty: `start.n_gpus` on `node`)
    alloc: tuple[tuple[int, int], ...] = ()

    def done_at(self, rel_s: float) -> float:
        """Samples done `rel_s` seconds after the segment's start."""
        done = 0.0
        for t, d, sps, _ in self.pieces:
            if t > rel_s:
                break
            done = d + (rel_s - t) * sps
        return done

    def energy_between(self, lo_s: float, hi_s: float) -> float:
        """Energy (J) of this job between two instants relative to the segment's start."""
        total = 0.0
        for i, (t, _, _, power) in enumerate(self.pieces):
            end = self.pieces[i + 1][0] if i + 1 < len(self.pieces) else hi_s
            a, b = max(t, lo_s), min(end, hi_s)
            if b > a:
                total += power * (b - a)
        return total
