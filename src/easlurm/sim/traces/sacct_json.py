"""Streaming reader for `sacct --json` (22.05 / data_parser v0.0.38 and the later set/infinite/number schema).

It reads what is there and names what is missing: fields a schema lacks are collected in
`TraceStats.missing_fields` (and logged once) instead of failing, except the job id and submit time.
Numbers may be plain or `{"set": bool, "infinite": bool, "number": N}`; `state.current` a string
or a list; the admin comment `comment.administrator` or `admin_comment`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from easlurm.errors import TraceError
from easlurm.sim.traces.energy_hook import decode_energy
from easlurm.sim.traces.jsonstream import JsonArrayStream
from easlurm.sim.traces.record import TraceJob, TraceStats
from easlurm.sim.traces.sacct_text import _array_tasks, _merge_het
from easlurm.sim.traces.source import open_text
from easlurm.slurm.gres import gpus_from_tres
from easlurm.slurm.json_values import MISSING, dig, job_state, num, text

log = logging.getLogger(__name__)

_MISSING = MISSING


def _tres(entries: Any) -> dict[str, float]:
    """[{"type": "gres", "name": "gpu:a100", "count": 4}, ...] -> {"gres/gpu:a100": 4.0, ...}."""
    out: dict[str, float] = {}
    if not isinstance(entries, list):
        return out
    for e in entries:
        if not isinstance(e, dict):
            continue
        kind, name, count = e.get("type"), e.get("name"), num(e.get("count"))
        if not kind or count is None:
            continue
        out[f"{kind}/{name}" if name else str(kind)] = count
    return out


#: Fields this reader uses; those absent from a dump are reported, not guessed.
EXPECTED = (
    "time.start",
    "time.end",
    "time.limit",
    "time.elapsed",
    "state.current",
    "tres.allocated",
    "tres.requested",
    "user",
    "partition",
    "exit_code",
)


class SacctJsonReader:
    """Iterate the jobs of a `sacct --json` document without loading it whole."""

    def __init__(self, path: str | Path, *, skip_bad: bool = False, stats: TraceStats | None = None) -> None:
        self.path = str(path)
        self.skip_bad = skip_bad
        self.stats = stats if stats is not None else TraceStats()
        self.stats.path = self.path
        self.meta: dict[str, Any] = {}

    def __iter__(self) -> Iterator[TraceJob]:
        with open_text(self.path) as fh:
            stream = JsonArrayStream(fh, self.path, key="jobs")
            group: list[TraceJob] = []
            group_key: int | None = None
            for line, obj in stream:
                self.stats.rows += 1
                where = f"{self.path}:{line}"
                if not isinstance(obj, dict):
                    self.stats.bad(f"{where}: job entry is not an object", self.skip_bad)
                    continue
                try:
                    jobs, het_key = self._parse(obj, where)
                except TraceError as exc:
                    self.stats.bad(f"{where}: {exc}", self.skip_bad)
                    continue
                if group and het_key != group_key:
                    yield from self._emit(_merge_het(group))
                    group = []
                if het_key is not None:
                    group.extend(jobs)
                    group_key = het_key
                else:
                    group_key = None
                    yield from self._emit(jobs)
            if group:
                yield from self._emit(_merge_het(group))
            self.meta = stream.others.get("meta") or {}
            if not stream.found:
                raise TraceError(f'{self.path}: no "jobs" array (not a sacct --json document?)')
            errors = stream.others.get("errors")
            if errors:
                log.warning("%s: sacct reported errors: %s", self.path, errors)

    def _emit(self, jobs: list[TraceJob]) -> Iterator[TraceJob]:
        for job in jobs:
            self.stats.jobs += 1
            yield job

    def _parse(self, job: dict[str, Any], where: str) -> tuple[list[TraceJob], int | None]:
        for name in EXPECTED:
            if name not in self.stats.missing_fields and dig(job, name) is _MISSING:
                self.stats.missing_fields.add(name)
                log.info("%s: sacct --json has no %r field: left unknown", self.path, name)
        job_id = num(job.get("job_id", _MISSING))
        if job_id is None:
            raise TraceError(f"field job_id: missing or not a number ({job.get('job_id')!r})")
        submit_s = num(dig(job, "time.submission"))
        if not submit_s:
            raise TraceError(f"field time.submission: missing ({dig(job, 'time.submission')!r})")
        start_s = num(dig(job, "time.start")) or None
        end_s = num(dig(job, "time.end")) or None
        limit_min = num(dig(job, "time.limit"))
        state = job_state(dig(job, "state.current"))[0] or None
        alloc = _tres(dig(job, "tres.allocated"))
        n_gpus, gpu_type = gpus_from_tres(alloc)
        if not n_gpus:
            n_gpus, gpu_type = gpus_from_tres(_tres(dig(job, "tres.requested")))
        exit_code = num(dig(job, "exit_code.return_code"))
        admin = text(dig(job, "comment.administrator"))
        if admin is None:
            admin = text(job.get("admin_comment", _MISSING))
        energy = decode_energy(admin)
        steps = job.get("steps")
        if isinstance(steps, list):
            self.stats.steps_folded += len(steps)
        cpus = num(dig(job, "required.CPUs"))
        nodes = num(job.get("allocation_nodes", _MISSING))
        partition = text(job.get("partition", _MISSING))
        killer = text(job.get("kill_request_user", _MISSING))
        nodelist = text(job.get("nodes", _MISSING))
        base = TraceJob(
            job_id=str(int(job_id)),
            submit_s=submit_s,
            user=text(job.get("user", _MISSING)) or None,
            partition=(partition or "").split(",")[0] or None,
            start_s=start_s,
            end_s=end_s,
            runtime_s=(end_s - start_s) if start_s is not None and end_s is not None else None,
            timelimit_s=limit_min * 60.0 if limit_min is not None else None,
            n_gpus=n_gpus,
            gpu_type=gpu_type,
            n_nodes=int(nodes) if nodes else None,
            n_cpus=int(cpus) if cpus else None,
            state=state.upper() if state else None,
            exit_code=int(exit_code) if exit_code is not None else None,
            cancelled_by=killer or None,
            name=text(job.get("name", _MISSING)) or None,
            qos=text(job.get("qos", _MISSING)) or None,
            model=energy.model if energy else None,
            total_steps=energy.steps if energy else None,
            measured_energy_j=energy.energy_j if energy else None,
            measured_gpu_energy_j=energy.gpu_energy_j if energy else None,
            allocated=None if nodelist is None else nodelist.lower() not in {"none assigned", ""},
            source=where,
        )
        array_job = num(dig(job, "array.job_id"))
        het_job = num(dig(job, "het.job_id"))
        het_key = int(het_job) if het_job else None
        if het_key is not None:
            base = replace(base, job_id=str(het_key))
        if not array_job:
            return [base], het_key
        arr = str(int(array_job))
        task_id = num(dig(job, "array.task_id"))
        if task_id is not None:
            return [
                replace(base, job_id=f"{arr}_{int(task_id)}", array_job_id=arr, array_task_id=int(task_id))
            ], het_key
        spec = text(dig(job, "array.task")) or ""
        if not spec:
            raise TraceError("field array.task: array job without task id or range")
        tasks = _array_tasks(spec)
        return [replace(base, job_id=f"{arr}_{t}", array_job_id=arr, array_task_id=t) for t in tasks], het_key
