"""The values of a trace record a reader may hand on: times, durations, energies and counts within reason
(easlurm.inputs' rules), so that no replay runs on a negative, NaN or year-9999 time, an end before its
start, or a job of 10^9 GPUs. Each reader calls `problem` on the job it built and counts a bad one as
a bad row (`--skip-bad` skips it, else the replay stops naming file:line)."""

from __future__ import annotations

import math

from easlurm.inputs import MAX_EPOCH_S
from easlurm.sim.traces.record import TraceJob
from easlurm.units import MAX_INT

#: the most energy one job's record may hold: 10^15 J is 278 GWh, a year of a 30 MW machine
MAX_ENERGY_J = 1e15
#: the most GPUs (and CPUs) one job of a trace may ask for
MAX_JOB_GPUS = 1_000_000


def _time(value: float | None, name: str) -> str | None:
    if value is None:
        return None
    if not math.isfinite(value) or not 0 <= value <= MAX_EPOCH_S:
        return f"field {name}: {value!r} is not a time (>= 0 and before the year 2200)"
    return None


def problem(job: TraceJob) -> str | None:
    """What is wrong with a job's values, in a few words naming the field; None when nothing is."""
    for name, value in (("submit", job.submit_s), ("start", job.start_s), ("end", job.end_s)):
        why = _time(value, name)
        if why:
            return why
    for name, value in (("run time", job.runtime_s), ("time limit", job.timelimit_s)):
        if value is not None and (not math.isfinite(value) or not 0 <= value <= MAX_EPOCH_S):
            return f"field {name}: {value!r} is not a duration (>= 0 s, at most {MAX_EPOCH_S:.0f} s)"
    if job.start_s is not None and job.end_s is not None and job.end_s < job.start_s:
        return f"ends ({job.end_s:g}) before it starts ({job.start_s:g})"
    for name, energy in (("energy_j", job.measured_energy_j), ("gpu_energy_j", job.measured_gpu_energy_j)):
        if energy is not None and (not math.isfinite(energy) or not 0 <= energy <= MAX_ENERGY_J):
            return f"field {name}: {energy!r} is not an energy (>= 0 J, at most {MAX_ENERGY_J:g} J)"
    for name, count in (("gpus", job.n_gpus), ("cpus", job.n_cpus or 0), ("nodes", job.n_nodes or 0)):
        if not 0 <= count <= min(MAX_INT, MAX_JOB_GPUS):
            return f"field {name}: {count} is out of range (0 to {MAX_JOB_GPUS:,})"
    return None
