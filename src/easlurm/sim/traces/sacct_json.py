"""Streaming reader for `sacct --json` (22.05 / data_parser v0.0.38 and the later set/infinite/number schema).

It reads what is there and names what is missing: fields a schema lacks are collected in
`TraceStats.missing_fields` (and logged once) instead of failing, except the job id and submit time.
Numbers may be plain or `{"set": bool, "infinite": bool, "number": N}`; `state.current` a string
or a list; the admin comment `comment.administrator` or `admin_comment`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from easlurm.errors import TraceError
from easlurm.sim.traces.jsonstream import JsonArrayStream
from easlurm.sim.traces.record import TraceJob, TraceStats
from easlurm.sim.traces.sacct_record import merged_jobs, trace_jobs
from easlurm.sim.traces.source import open_text
from easlurm.slurm.json_values import MISSING, dig
from easlurm.slurm.sacct_jobs import job_of_json

log = logging.getLogger(__name__)


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
            yield from merged_jobs(self._parsed(stream), self.stats)
            self.meta = stream.others.get("meta") or {}
            if not stream.found:
                raise TraceError(f'{self.path}: no "jobs" array (not a sacct --json document?)')
            errors = stream.others.get("errors")
            if errors:
                log.warning("%s: sacct reported errors: %s", self.path, errors)

    def _parsed(self, stream: JsonArrayStream) -> Iterator[tuple[int | None, list[TraceJob]]]:
        """(het job id or None, TraceJobs) per job entry; a bad entry is reported (raised unless --skip-bad)."""
        for line, obj in stream:
            self.stats.rows += 1
            where = f"{self.path}:{line}"
            if not isinstance(obj, dict):
                self.stats.bad(f"{where}: job entry is not an object", self.skip_bad)
                continue
            try:
                yield self._parse(obj, where)
            except TraceError as exc:
                self.stats.bad(f"{where}: {exc}", self.skip_bad)

    def _parse(self, job: dict[str, Any], where: str) -> tuple[int | None, list[TraceJob]]:
        for name in EXPECTED:
            if name not in self.stats.missing_fields and dig(job, name) is MISSING:
                self.stats.missing_fields.add(name)
                log.info("%s: sacct --json has no %r field: left unknown", self.path, name)
        try:
            rec = job_of_json(job)
        except ValueError as exc:
            raise TraceError(str(exc)) from None
        if rec.submit_s is None:
            raise TraceError(f"field time.submission: missing ({dig(job, 'time.submission')!r})")
        self.stats.steps_folded += len(job["steps"]) if isinstance(job.get("steps"), list) else 0
        runtime_s = rec.end_s - rec.start_s if rec.start_s is not None and rec.end_s is not None else None
        het_key = int(rec.het_job_id) if rec.het_job_id else None
        return het_key, trace_jobs(rec, where, runtime_s)
