"""Step records are checked when read: a node record no real run could have written is set aside, flagged.

A record may come from a damaged file, a hand edit or a broken sensor: a negative or non-finite number, a
window that ends before it starts, or more GPU energy than the node's GPUs could draw. Such a node's
energy is never summed: readers (sacct, seff, report) get the step without it, with the reason in
`StepRecord.invalid` (EnergyFlags `invalid-nodes:<ids>`; the step is `partial`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

from easlurm.accounting.step_record import NodeRecord, StepRecord
from easlurm.errors import EaslurmError
from easlurm.model.hardware import load_catalogue

#: A GPU's energy over a window may reach at most this many times its power (the step's power limit, or
#: the largest TDP in the catalogue) times the window: anything above is a broken record, not a job.
HEADROOM = 2.0


@functools.cache
def catalogue_max_tdp_w() -> float:
    """The largest TDP of any GPU in the packaged catalogue (W): the ceiling for a GPU of unknown model."""
    try:
        cat = load_catalogue()
        return max(cat.get(k).tdp_w for k in cat)
    except (EaslurmError, OSError, ValueError):  # an unreadable catalogue must not hide the records
        return 1000.0


def _number_problem(what: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{what} {value!r} is not a number"
    if not math.isfinite(value):
        return f"{what} is {value}"
    if value < 0:
        return f"{what} {value:g} is negative"
    return None


def node_problem(node: NodeRecord, gpu_ceiling_w: float | None = None, per_device: bool = True) -> str | None:
    """Why a node record is impossible, None when it is plausible. `gpu_ceiling_w`: one GPU's most
    plausible draw (default: the catalogue's largest TDP, or the step's power limit when higher).
    `per_device` False: a record reduced to one device per kind (AdminComment's size cap), whose GPU
    count is unknown: the draw is not checked."""
    for what, value in (("duration_s", node.duration_s), ("start_time", node.start_time)):
        problem = _number_problem(what, value)
        if problem:
            return problem
    for dev in node.devices:
        problem = _number_problem(f"{dev.name} energy_j", dev.energy_j)
        if problem:
            return problem
    start, end = node.step_start_time, node.step_end_time
    for what, value in (("step_start_time", start), ("step_end_time", end)):
        problem = _number_problem(what, value)
        if problem:
            return problem
    if start is not None and end is not None and end < start:
        return f"ends before it starts ({end:.0f} < {start:.0f})"
    gpus = [d for d in node.devices if d.kind == "gpu" and d.in_total and d.energy_j is not None]
    windows = [w for w in (node.duration_s, None if start is None or end is None else end - start) if w]
    if not per_device or not gpus or not windows:
        return None
    ceiling = max(gpu_ceiling_w or catalogue_max_tdp_w(), node.power_limit_w or 0.0)
    most_j = HEADROOM * ceiling * len(gpus) * max(windows)
    energy_j = sum(float(d.energy_j or 0.0) for d in gpus)
    if energy_j > most_j:
        return (
            f"GPU energy {energy_j:.4g} J is above what {len(gpus)} GPU(s) can draw in {max(windows):.4g} s "
            f"({HEADROOM:g} x {ceiling:g} W each: {most_j:.4g} J)"
        )
    return None


def checked(step: StepRecord, gpu_ceiling_w: float | None = None) -> StepRecord:
    """`step` without its impossible node records, which are named with why in `invalid` (the step itself
    when every node is plausible)."""
    invalid = dict(step.invalid)
    kept = []
    for node in step.nodes:
        problem = node_problem(node, gpu_ceiling_w, step.detail == "device")
        if problem is None:
            kept.append(node)
        else:
            invalid[node.node_id] = problem
    if len(kept) == len(step.nodes):
        return step
    return dataclasses.replace(step, nodes=kept, invalid=invalid)
