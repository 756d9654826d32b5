"""The daemon's incremental queue read: every job's scheduling fields each cycle, user text only where needed.

Slurm has no per-job "last updated" field: an `scontrol update Comment=...` changes nothing else that
squeue prints (checked on 22.05 with `squeue -o %all` before and after). So each cycle reads the fields
without user text for every job (a framed `squeue -O`, see squeue_text), and the user text (name,
comment, admin comment) only of jobs that are new, running (their AdminComment grows with each
published step), or updated by this client since the last read; the whole queue's user text is read
again every `text_refresh_s` (a user's own Comment edit is seen within that time). The running jobs'
GPU indices (`gres_detail`, which `squeue -O` cannot print) are read once per job start: with
`scontrol --json show job` where it exists (23.02+), else from `scontrol -d show job` text, checked.
Anything that does not add up raises SqueueTextError: the caller reads that cycle as JSON.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from easlurm.slurm.json_values import JOB_BASE_STATES, integer, job_state, load_document
from easlurm.slurm.squeue_text import (
    QUEUE_FIELDS,
    SHORT_SEP_HEX,
    TEXT_FIELDS,
    Frame,
    SqueueTextError,
    gres_detail_from_show_job,
    json_job,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Runs one Slurm command with extra environment variables and returns its standard output.
Runner = Callable[[Sequence[str], Mapping[str, str]], str]
#: Job ids per `squeue -j` (one argument stays far under Linux's 128 KiB limit).
IDS_PER_READ = 2000
#: The user text of the whole queue is read again after this long (seconds).
TEXT_REFRESH_S = 60.0


@dataclass(frozen=True)
class QueueCapabilities:
    """What this Slurm offers the text read (found by asking it, handed in by the client)."""

    #: `scontrol --json show job ID` exists (else `scontrol -d show job ID` text is read, checked)
    scontrol_json: bool


@dataclass
class QueueReadStats:
    """What the last read cost: commands run and bytes of their output."""

    commands: int = 0
    bytes: int = 0
    text_jobs: int = 0
    detail_jobs: int = 0
    #: jobs whose texts changed since the last read (converted again)
    converted: int = 0


#: Where the job id and the state stand in a QUEUE_FIELDS record.
_STATE_AT = [key for key, _ in QUEUE_FIELDS].index("job_state")
#: One job's cache key: its QUEUE_FIELDS texts and its user-text texts (same texts: same job).
Key = tuple[tuple[str, ...], tuple[str, ...]]


@dataclass
class TextQueueReader(Generic[T]):
    """Reads the queue from framed text into whatever `convert` makes of one `squeue --json` job object
    (the keys SlurmJob needs). A job whose texts are those of the last read is not converted again: the
    steady cycle's cost is the reads' and the text checks', not 10,000 conversions."""

    run: Runner
    caps: QueueCapabilities
    convert: Callable[[dict[str, Any]], T]
    text_refresh_s: float = TEXT_REFRESH_S
    clock: Callable[[], float] = time.monotonic
    #: where each read's delimiters come from (fresh random tokens; recorded ones to replay a capture)
    draw: Callable[..., Frame] = Frame.draw
    stats: QueueReadStats = field(default_factory=QueueReadStats)
    _text: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _detail: dict[tuple[str, int, str], list[str]] = field(default_factory=dict)
    _made: dict[str, tuple[Key, T]] = field(default_factory=dict)
    _dirty: set[str] = field(default_factory=set)
    _full_at: float | None = None

    def seed(self, jobs: Iterable[Mapping[str, Any]]) -> None:
        """Keep the running jobs' `gres_detail` of a JSON read (a cycle that fell back): a job whose name or
        comment prints look-alike lines in `scontrol -d show job` then costs one JSON read per start."""
        for job in jobs:
            if job_state(job.get("job_state"))[0] == "RUNNING" and job.get("gres_detail"):
                key = (
                    str(integer(job.get("job_id"))),
                    integer(job.get("start_time")),
                    str(job.get("nodes") or ""),
                )
                self._detail[key] = [str(d) for d in job.get("gres_detail") or ()]

    def invalidate(self, job_id: str) -> None:
        """This job was updated through this client: read its user text again next time."""
        self._dirty.add(str(job_id))

    def read(self) -> list[T]:
        """Every job slurmctld knows (all states, as `squeue --json` on 22.05 lists them)."""
        self.stats = QueueReadStats()
        rows = self._squeue(QUEUE_FIELDS, (), short=True)
        ids = [values[0] for values in rows]
        self._read_text(ids, {values[0] for values in rows if values[_STATE_AT] == "RUNNING"})
        made: dict[str, tuple[Key, T]] = {}
        for values in rows:
            key: Key = (tuple(values), self._text[values[0]])
            last = self._made.get(values[0])
            same = last is not None and last[0] == key and not self._flagged(values[_STATE_AT])
            made[values[0]] = last if same and last is not None else (key, self._make(key))
        self._made = made
        self._detail = {k: v for k, v in self._detail.items() if k[0] in made}
        return [job for _, job in made.values()]

    def _flagged(self, state: str) -> bool:
        """squeue prints a flag (COMPLETING, CONFIGURING, REQUEUED, ...) instead of the base state, as
        22.05's JSON does; 23.02+'s JSON lists both: such a job (few, for seconds) is read as JSON there."""
        return self.caps.scontrol_json and state not in JOB_BASE_STATES

    def _make(self, key: Key) -> T:
        job = json_job(QUEUE_FIELDS, key[0])
        job.update(json_job(TEXT_FIELDS[1:], key[1]))
        if self._flagged(str(job.get("job_state"))):
            job = self._scontrol_job(str(job["job_id"]))
        elif job.get("job_state") == "RUNNING" and "gres/" in str(job.get("tres_alloc_str") or ""):
            job["gres_detail"] = self._gres_detail(job)
        self.stats.converted += 1
        return self.convert(job)

    def _read_text(self, ids: Sequence[str], running: set[str]) -> None:
        now = self.clock()
        full = self._full_at is None or now - self._full_at >= self.text_refresh_s
        wanted = set(ids) if full else {i for i in ids if i not in self._text} | running | self._dirty
        wanted &= set(ids)
        if full or len(wanted) > IDS_PER_READ:  # one read of all costs slurmctld what one -j read does
            rows = self._squeue(TEXT_FIELDS, ())
            self._full_at = now
        else:
            rows = [r for chunk in _chunks(sorted(wanted, key=int)) for r in self._squeue(TEXT_FIELDS, chunk)]
        got = {values[0]: tuple(values[1:]) for values in rows}
        _check_strays(got, ids)
        missing = [i for i in wanted if i not in got]
        if missing:
            raise SqueueTextError(f"squeue text: no user text for {len(missing)} job(s) (e.g. {missing[0]})")
        self._text = {i: self._text[i] for i in ids if i in self._text}
        self._text.update((job_id, got[job_id]) for job_id in wanted)
        self._dirty.clear()
        self.stats.text_jobs = len(wanted)

    def _squeue(
        self, fields: Sequence[tuple[str, str]], ids: Sequence[str], short: bool = False
    ) -> list[list[str]]:
        frame = self.draw(SHORT_SEP_HEX) if short else self.draw()
        argv = ["squeue", "-h", "-t", "all"] + (["-j", ",".join(ids)] if ids else [])
        out = self._run(argv, frame.env(fields))
        return frame.records(out, fields, "squeue -O " + ",".join(name for _, name in fields[:3]) + ",...")

    def _run(self, argv: Sequence[str], env: Mapping[str, str]) -> str:
        out = self.run(argv, env)
        self.stats.commands += 1
        self.stats.bytes += len(out.encode())
        return out

    def _gres_detail(self, job: Mapping[str, Any]) -> list[str]:
        job_id = str(job["job_id"])
        key = (job_id, integer(job.get("start_time")), str(job.get("nodes") or ""))
        if key not in self._detail:
            self.stats.detail_jobs += 1
            if self.caps.scontrol_json:
                self._detail[key] = [str(d) for d in self._scontrol_job(job_id).get("gres_detail") or ()]
            else:
                text = self._run(["scontrol", "-d", "show", "job", job_id], {})
                self._detail[key] = gres_detail_from_show_job(text, job_id)
        return self._detail[key]

    def _scontrol_job(self, job_id: str) -> dict[str, Any]:
        """One job's object of `scontrol --json show job ID` (23.02+)."""
        doc = load_document(self._run(["scontrol", "--json", "show", "job", job_id], {}), "scontrol --json")
        found = [j for j in doc.get("jobs") or () if str(j.get("job_id")) == job_id]
        if len(found) != 1:
            raise SqueueTextError(f"scontrol --json show job {job_id}: {len(found)} records")
        return dict(found[0])


def _check_strays(got: Mapping[str, tuple[str, ...]], ids: Sequence[str]) -> None:
    """A user-text record of a job the first read did not list must be a job submitted since (a higher id):
    any other is a record too many."""
    known, top = set(ids), max((int(i) for i in ids), default=0)
    stray = [i for i in got if i not in known and int(i) <= top]
    if stray:
        raise SqueueTextError(
            f"squeue text: user text of {len(stray)} job(s) not in the queue (e.g. {stray[0]})"
        )


def _chunks(ids: Sequence[str]) -> Iterable[list[str]]:
    for k in range(0, len(ids), IDS_PER_READ):
        yield list(ids[k : k + IDS_PER_READ])


__all__ = [
    "IDS_PER_READ",
    "TEXT_REFRESH_S",
    "QueueCapabilities",
    "QueueReadStats",
    "Runner",
    "TextQueueReader",
]
