"""A target cluster sized like the trace's own: the most GPUs of each type its record ran at once."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from easlurm.errors import ModelError, TraceError
from easlurm.sim.cluster import MAX_GPUS, MAX_NODES, ClusterSpec
from easlurm.sim.traces.record import TraceJob

#: GPUs per node of a sized cluster (more when a single job of the trace needs more).
NODE_GPUS = 8
#: The type of jobs whose trace does not say one (the thesis cluster's first type).
DEFAULT_TYPE = "a100-40gb"


@dataclass(frozen=True)
class TraceSize:
    """The record's concurrency: peak GPUs busy at once, in total and per catalogue type."""

    jobs: int  # jobs that ran with GPUs (start and end known, or run time known: see `estimated`)
    peak_gpus: int
    peak_by_type: dict[str, int]
    largest_job_gpus: int
    #: jobs whose start the trace does not say (SWF wait -1), counted as running from their submission
    #: for their run time: with any, the peaks are estimates, not the record's own.
    estimated: int = 0


def _peak(start: np.ndarray, end: np.ndarray, n: np.ndarray) -> int:
    if len(start) == 0:
        return 0
    times = np.concatenate([start, end])
    delta = np.concatenate([n, -n])
    order = np.lexsort((delta, times))  # at one instant, ends before starts
    return round(float(np.cumsum(delta[order]).max()))


def _catalogue_key(catalogue: Any, name: str | None) -> str | None:
    try:
        return catalogue.resolve(name) if name and name in catalogue else None
    except ModelError:
        return None


def measure(jobs: Iterable[TraceJob], catalogue: Any) -> TraceSize:
    """Peak concurrency of the jobs that ran with GPUs, over their recorded starts and ends.

    A job whose start is unknown but whose run time is known (SWF wait -1) is counted from its
    submission for its run time: the peak of those jobs run without waiting. It is an estimate, not a
    bound of the record's own peak: waits move jobs later, which can spread them out (a lower peak) or
    pile them up (a higher one). `estimated` counts such jobs.
    """
    cols: dict[str, list[tuple[float, float, float]]] = {}
    largest = 0
    count = 0
    estimated = 0
    for job in jobs:
        if job.n_gpus <= 0 or job.never_started or job.state == "REQUEUED":
            continue
        if job.ran:
            assert job.start_s is not None and job.end_s is not None
            start_s, end_s = job.start_s, job.end_s
        elif job.start_unknown and job.runtime_s is not None:
            start_s, end_s = job.submit_s, job.submit_s + job.runtime_s
            estimated += 1
        else:
            continue
        gpu_type = DEFAULT_TYPE
        for name in (job.gpu_type, job.partition):
            key = _catalogue_key(catalogue, name)
            if key is not None:
                gpu_type = key
                break
        cols.setdefault(gpu_type, []).append((start_s, end_s, float(job.n_gpus)))
        largest = max(largest, job.n_gpus)
        count += 1
    by_type: dict[str, int] = {}
    every = []
    for gpu_type, rows in sorted(cols.items()):
        a = np.asarray(rows, dtype=np.float64)
        by_type[gpu_type] = _peak(a[:, 0], a[:, 1], a[:, 2])
        every.append(a)
    total = np.concatenate(every) if every else np.zeros((0, 3))
    return TraceSize(count, _peak(total[:, 0], total[:, 1], total[:, 2]), by_type, largest, estimated)


def cluster_for(
    size: TraceSize,
    *,
    max_gpus: int | None = None,
    max_nodes: int | None = None,
    node_gpus: int | None = None,
) -> Any:
    """Whole nodes of `node_gpus` (default NODE_GPUS; more when the largest job needs more: the replay
    places a job on one node) per type, holding each type's peak; None when no job ran with GPUs (the
    caller keeps its default). `max_gpus` and `max_nodes` (the machine an SWF header describes) bound it:
    an estimated peak never sizes a cluster beyond the machine the log ran on."""
    if not size.peak_by_type:
        return None
    per_node = max(node_gpus or NODE_GPUS, size.largest_job_gpus)
    if max_gpus is not None:
        per_node = max(1, min(per_node, max_gpus))
    counts = {t: max(1, math.ceil(peak / per_node)) for t, peak in size.peak_by_type.items()}
    nodes = sum(counts.values()) if max_nodes is None else min(sum(counts.values()), max_nodes)
    if nodes > MAX_NODES or nodes * per_node > MAX_GPUS:
        raise TraceError(
            f"a cluster sized like the trace would have {nodes:,} nodes of {per_node:,} GPUs (its largest job "
            f"asks for {size.largest_job_gpus:,}; peak {size.peak_gpus:,} GPUs busy at once), over the limit "
            f"of {MAX_NODES:,} nodes and {MAX_GPUS:,} GPUs: give --cluster"
        )
    cap = max(1, max_gpus // per_node) if max_gpus is not None else None
    if max_nodes is not None:
        cap = min(cap, max_nodes) if cap is not None else max_nodes
    while cap is not None and sum(counts.values()) > cap and max(counts.values()) > 1:
        counts[max(counts, key=lambda t: counts[t])] -= 1
    spec = ClusterSpec.mixed([(n, per_node, gpu_type) for gpu_type, n in counts.items()])
    return ClusterSpec(spec.nodes, f"like-trace-{spec.n_gpus}")
