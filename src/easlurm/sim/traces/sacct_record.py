"""sacct's neutral job record -> the replay's TraceJob: array tasks expanded, het parts merged, energy decoded."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace

from easlurm.errors import TraceError
from easlurm.frozen import builder
from easlurm.sim.traces.energy_hook import decode_energy
from easlurm.sim.traces.record import TraceJob, TraceStats
from easlurm.sim.traces.sane import problem
from easlurm.slurm.sacct_jobs import SacctJob, SacctValueError, expand_array

#: TraceJob(**values) without its frozen __init__: one per job of a trace
_trace_job = builder(TraceJob)


def trace_jobs(job: SacctJob, where: str, runtime_s: float | None) -> list[TraceJob]:
    """The TraceJobs of one sacct job (one per array task; a het part under its het job's id).

    `submit_s` must be known (the caller names the missing field); `runtime_s` is the recorded run time.
    A damaged easlurm record in AdminComment raises TraceError naming the field."""
    assert job.submit_s is not None
    energy = decode_energy(job.admin_comment)
    base = _trace_job(
        job_id=job.het_job_id or job.job_id,
        submit_s=job.submit_s,
        user=job.user,
        partition=(job.partition or "").split(",")[0] or None,
        start_s=job.start_s,
        end_s=job.end_s,
        runtime_s=runtime_s,
        timelimit_s=job.timelimit_s,
        n_gpus=job.n_gpus,
        gpu_type=job.gpu_type,
        n_nodes=job.n_nodes,
        n_cpus=job.n_cpus,
        state=job.state,
        exit_code=job.exit_code,
        cancelled_by=job.cancelled_by,
        name=job.name,
        qos=job.qos,
        model=energy.model if energy else None,
        total_steps=energy.steps if energy else None,
        measured_energy_j=energy.energy_j if energy else None,
        measured_gpu_energy_j=energy.gpu_energy_j if energy else None,
        allocated=job.allocated,
        source=where,
    )
    why = problem(base)  # a negative, NaN or year-9999 time, an end before its start, 10^9 GPUs
    if why:
        raise TraceError(why)
    arr = job.array_job_id
    if arr is None:
        return [base]
    if job.array_task_id is not None:
        tasks = [job.array_task_id]
    elif job.array_tasks:
        try:
            tasks = expand_array(job.array_tasks)
        except SacctValueError as exc:
            raise TraceError(str(exc)) from None
    else:
        raise TraceError("field array.task: array job without task id or range")
    return [replace(base, job_id=f"{arr}_{t}", array_job_id=arr, array_task_id=t) for t in tasks]


def merged_jobs(parsed: Iterable[tuple[object, list[TraceJob]]], stats: TraceStats) -> Iterator[TraceJob]:
    """The jobs in order, each run of consecutive components of one heterogeneous job (same key, not None)
    merged into one; every job yielded is counted in `stats.jobs`. Both sacct readers (rows and JSON) end here."""
    group: list[TraceJob] = []
    group_key: object = None
    for key, jobs in parsed:
        if group and key != group_key:
            yield from _counted(merge_het(group), stats)
            group = []
        if key is not None:
            group.extend(jobs)
            group_key = key
        else:
            group_key = None
            yield from _counted(jobs, stats)
    if group:
        yield from _counted(merge_het(group), stats)


def _counted(jobs: list[TraceJob], stats: TraceStats) -> Iterator[TraceJob]:
    for job in jobs:
        stats.jobs += 1
        yield job


def merge_het(components: list[TraceJob]) -> list[TraceJob]:
    """Heterogeneous components start together: one job with the GPUs summed, the largest part's type."""
    if len(components) == 1:
        return components
    first = components[0]
    main = max(components, key=lambda c: c.n_gpus)
    starts = [c.start_s for c in components if c.start_s is not None]
    ends = [c.end_s for c in components if c.end_s is not None]
    start_s = min(starts) if len(starts) == len(components) else None
    end_s = max(ends) if len(ends) == len(components) else None
    return [
        replace(
            first,
            submit_s=min(c.submit_s for c in components),
            start_s=start_s,
            end_s=end_s,
            runtime_s=(end_s - start_s) if start_s is not None and end_s is not None else None,
            n_gpus=sum(c.n_gpus for c in components),
            gpu_type=main.gpu_type,
            partition=main.partition or first.partition,
            n_nodes=sum(c.n_nodes or 0 for c in components) or None,
            n_cpus=sum(c.n_cpus or 0 for c in components) or None,
            measured_energy_j=_sum_known([c.measured_energy_j for c in components]),
            measured_gpu_energy_j=_sum_known([c.measured_gpu_energy_j for c in components]),
            het_components=len(components),
            allocated=False if any(c.allocated is False for c in components) else first.allocated,
        )
    ]


def _sum_known(values: list[float | None]) -> float | None:
    """Sum when every part is known (a partial sum would understate the job)."""
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)
