"""Republish step records of ended jobs (cancelled, timed out) from the spool into the accounting database.

Every hook of a cancelled or timed-out job runs while it is COMPLETING, so `scontrol update` is refused
and the agents fall back to `sacctmgr`; slurmctld's own copy of AdminComment (a record published earlier
in the job) then overwrites that value when the job's completion record reaches the database, and again
on a controller restart while the job is within MinJobAge. So a database write is safe only when
slurmctld holds no AdminComment for the job, or has forgotten the job. This module writes then, under
the job's publication lock (one writer per job, shared with the agents), and verifies with
`sacct --json`. It never drops a record: the document is the union of what the database shows and the
spool's step files (the files win, but never with fewer of a step's nodes: a step the database shows
partial while its file is complete is rewritten). Running it again changes nothing.
"""

from __future__ import annotations

import enum
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from easlurm.accounting.admin_codec import AdminValue
from easlurm.accounting.spool import Spool, job_lock, spool_records
from easlurm.accounting.step_record import (
    ADMIN_COMMENT_MAX_CHARS,
    AdminDocument,
    StepRecord,
    decode_admin_document,
    encode_admin_comment,
)
from easlurm.errors import EaslurmError, SlurmError
from easlurm.slurm.client import SlurmClient
from easlurm.slurm.sacct_jobs import SacctJob, jobs_of_json
from easlurm.slurm.states import FINAL_JOB_STATES

log = logging.getLogger(__name__)

#: A step record belongs to the job only if it started within the job's run, give or take this (s):
#: job ids are reused after a controller reset, and the spool may still hold an older job's files.
IDENTITY_SLACK_S = 300.0


class Status(enum.Enum):
    """What republishing did for one job."""

    UP_TO_DATE = "up-to-date"  # the database already shows every step the spool holds
    REPUBLISHED = "republished"  # written with sacctmgr and seen in sacct --json
    WOULD_REPUBLISH = "would-republish"  # dry run
    ACTIVE = "active"  # not ended yet: its agents publish (scontrol); nothing to do
    DEFERRED = "deferred"  # slurmctld holds its own AdminComment: retry after it forgets the job
    NO_RECORDS = "no-records"  # nothing in the spool for this job
    FAILED = "failed"  # a command failed, or sacct does not show what was written


@dataclass
class JobResult:
    """One job's outcome; `missing` are the steps the database lacked before (sorted)."""

    job_id: str
    status: Status
    steps: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "status": self.status.value,
            "steps": self.steps,
            "missing_steps": self.missing,
            "detail": self.detail,
        }


def parse_sacct_json_jobs(doc: dict[str, Any]) -> dict[str, SacctJob]:
    """`sacct --json` (any version) -> {job id: its record}; with several records per id (a requeued job),
    the latest submission: the accounting database's view of the job."""
    out: dict[str, tuple[float, SacctJob]] = {}
    for job in jobs_of_json(doc):
        submitted = job.submit_s or 0.0
        if job.job_id not in out or submitted >= out[job.job_id][0]:
            out[job.job_id] = (submitted, job)
    return {k: v for k, (_, v) in out.items()}


def _step_sort(key: str) -> tuple[int, int, int]:
    """Runs in order, then numbered steps, then batch (`key` is a step name within its run)."""
    step, _, run = key.partition("+r")
    return (
        int(run) if run.isdigit() else 0,
        1 if not step.isdigit() else 0,
        int(step) if step.isdigit() else 0,
    )


def _nodes_known(step: StepRecord) -> int:
    """How many of its nodes a step record holds (a complete record holds all, a partial one fewer)."""
    return step.nnodes - len(step.missing_nodes)


def belongs_to(step: StepRecord, job: SacctJob, slack_s: float = IDENTITY_SLACK_S) -> bool:
    """True unless the record provably started outside the job's run (a reused job id)."""
    starts = [n.step_start_time for n in step.nodes if n.step_start_time is not None]
    if not starts or job.start_s is None:
        return True
    lo = job.start_s - slack_s
    hi = (job.end_s if job.end_s else time.time()) + slack_s
    return all(lo <= t <= hi for t in starts)


def spool_candidates(spool: Path, since_s: float | None, now_s: float) -> list[str]:
    """Job ids with step files in the spool, modified within `since_s` (all when None), oldest first."""
    out: list[tuple[float, str]] = []
    try:
        names = os.listdir(spool)
    except OSError as exc:
        raise EaslurmError(f"spool {spool}: {exc}") from exc
    for name in names:
        if not name.isdigit():
            continue
        try:
            mtime = os.stat(Spool(spool).job_dir(name)).st_mtime
        except OSError:
            continue
        if since_s is None or mtime >= now_s - since_s:
            out.append((mtime, name))
    return [name for _, name in sorted(out)]


_SITE_VALUE_CASE = (
    "not rewritten: sacctmgr would lowercase what the site keeps in AdminComment beside easlurm's "
    "record (easlurm sacct, seff and report read the spool)"
)


_BASE64_CASE = (
    "not rewritten: AdminComment holds a base64 value its reader decodes to the end of the field "
    "(jobstats); easlurm's record stays in the spool (easlurm sacct, seff and report read it there)"
)


def _why_not_beside(held: str | None) -> str | None:
    """Why easlurm's part cannot go beside what the database holds (None: it can)."""
    current = AdminValue.split(held)
    if not current.takes_a_part_after():
        return _BASE64_CASE
    return None if current.survives_sacctmgr() else _SITE_VALUE_CASE


def _beside(held: str | None, steps: list[StepRecord]) -> str | None:
    """The value to write: the steps' document beside what else the field holds (kept byte for byte),
    or None when it cannot go there (_why_not_beside)."""
    if _why_not_beside(held) is not None:
        return None
    current = AdminValue.split(held)
    room = max(0, ADMIN_COMMENT_MAX_CHARS - current.overhead())
    return current.merged(encode_admin_comment(steps, max_chars=room))


def _ctld_view(client: SlurmClient, job_id: str) -> dict[str, str] | None:
    """slurmctld's record of the job, None once it has forgotten it (past MinJobAge)."""
    try:
        return client.show_job(int(job_id))
    except SlurmError as exc:
        if "invalid job id" in str(exc).lower():
            return None
        raise


class Republisher:
    """Republish jobs' spool records into the database. `lock(job_dir, timeout_s)` is the agents' job
    lock (a context manager yielding whether it was acquired); `read_spool(spool, job)` returns
    {step: StepRecord}. Both injectable for tests."""

    def __init__(
        self,
        client: SlurmClient,
        spool: Path,
        read_spool: Callable[[Path, str], dict[str, StepRecord]] | None = None,
        lock: Callable[[Path, float], Any] | None = None,
        lock_timeout_s: float = 10.0,
    ) -> None:
        self.client = client
        self.spool = spool
        self.read_spool = read_spool or spool_records
        self.lock = lock or job_lock
        self.lock_timeout_s = lock_timeout_s

    def db_jobs(self, job_ids: Sequence[str]) -> dict[str, SacctJob]:
        """One `sacct --json` call for all jobs (a bounded comma list per call)."""
        out: dict[str, SacctJob] = {}
        for i in range(0, len(job_ids), 500):
            chunk = ",".join(job_ids[i : i + 500])
            out.update(parse_sacct_json_jobs(self.client.sacct_json(["-X", "-j", chunk])))
        return out

    def run(self, job_ids: Iterable[str], dry_run: bool = False) -> list[JobResult]:
        ids = [str(int(j)) for j in job_ids]
        if not ids:
            return []
        db = self.db_jobs(ids)
        return [self.job(jid, db.get(jid), dry_run) for jid in ids]

    def _plan(self, job_id: str, db: SacctJob) -> tuple[dict[str, StepRecord], list[str], str]:
        """(merged steps, steps the database lacks, why some spool steps were left out)."""
        spool = self.read_spool(self.spool, job_id)
        latest = max((r.run for r in spool.values()), default=0)
        # earlier runs of a requeued job started before its last run: only the latest run is checked
        foreign = sorted(
            (s for s, r in spool.items() if r.run == latest and not belongs_to(r, db)), key=_step_sort
        )
        for s in foreign:
            del spool[s]
        try:
            doc = decode_admin_document(db.admin_comment or "")
        except EaslurmError as exc:  # a damaged value is replaced; nothing readable is lost
            log.warning("job %s: %s; rewriting it from the spool", job_id, exc)
            doc = AdminDocument()
        current = {s.key: s for s in doc.steps}
        named = set(doc.omitted)  # counted in the database's run totals, carried without detail
        # the files win, but a file that knows fewer of a step's nodes than the database never replaces it;
        # a step the database shows with fewer nodes than its file (partial there) is lacking too
        better = {
            k: r for k, r in spool.items() if k not in current or _nodes_known(r) >= _nodes_known(current[k])
        }
        merged = {**current, **better}
        lacking = {
            k
            for k, r in better.items()
            if (k not in current and k not in named)
            or (k in current and _nodes_known(r) > _nodes_known(current[k]))
        }
        notes = [f"left out step(s) {','.join(foreign)} of an earlier job with this id"] if foreign else []
        unheld = sorted(named - set(merged), key=_step_sort)
        if lacking and unheld:  # rewriting would drop them from the run totals: left as it is
            notes.append(
                f"not rewritten: its totals count step(s) {','.join(unheld)} the spool does not hold"
            )
            lacking = set()
        notes += [
            f"step {k} is partial: no record from node(s) {','.join(map(str, merged[k].missing_nodes))}"
            for k in sorted(lacking, key=_step_sort)
            if merged[k].missing_nodes
        ]
        return merged, sorted(lacking, key=_step_sort), "; ".join(notes)

    def job(self, job_id: str, db: SacctJob | None, dry_run: bool = False) -> JobResult:
        """Republish one job (see the module docstring for when it is safe)."""
        if db is None:
            return JobResult(job_id, Status.FAILED, detail="not in the accounting database")
        merged, missing, note = self._plan(job_id, db)
        steps = sorted(merged, key=_step_sort)
        if not merged:
            return JobResult(job_id, Status.NO_RECORDS, detail=note)
        if not missing:
            return JobResult(job_id, Status.UP_TO_DATE, steps, detail=note)
        try:
            ctld = _ctld_view(self.client, job_id)
        except SlurmError as exc:
            return JobResult(job_id, Status.FAILED, steps, missing, str(exc))
        if ctld is not None:
            state = ctld.get("JobState", "")
            if state not in FINAL_JOB_STATES:
                return JobResult(job_id, Status.ACTIVE, steps, missing, f"{state}: its agents publish")
            held = ctld.get("AdminComment", "")
            if held and held != "(null)":
                return JobResult(
                    job_id,
                    Status.DEFERRED,
                    steps,
                    missing,
                    "slurmctld holds its own AdminComment and would overwrite a database write; "
                    "retry once it has forgotten the job (MinJobAge)",
                )
        if dry_run:
            return JobResult(job_id, Status.WOULD_REPUBLISH, steps, missing, note)
        return self._write(job_id, missing, ctld is None)

    def _write(self, job_id: str, missing: list[str], forgotten: bool) -> JobResult:
        """Under the job lock: re-read (an agent may just have written), write, verify with sacct --json."""
        with self.lock(Spool(self.spool).job_dir(job_id), self.lock_timeout_s) as locked:
            if not locked:
                return JobResult(job_id, Status.FAILED, missing=missing, detail="job lock busy; retry later")
            try:
                db = self.db_jobs([job_id]).get(job_id)
                if db is None:
                    return JobResult(job_id, Status.FAILED, missing=missing, detail="left the database")
                merged, missing, note = self._plan(job_id, db)
                steps = sorted(merged, key=_step_sort)
                if not missing:
                    return JobResult(job_id, Status.UP_TO_DATE, steps, detail=note)
                value = _beside(db.admin_comment, list(merged.values()))
                if value is None:
                    return JobResult(
                        job_id, Status.FAILED, steps, missing, _why_not_beside(db.admin_comment) or ""
                    )
                self.client.set_admin_comment_db(int(job_id), value)
                after = self.db_jobs([job_id]).get(job_id)
            except SlurmError as exc:
                return JobResult(job_id, Status.FAILED, missing=missing, detail=str(exc))
        shown: dict[str, int] = {}
        if after is not None:
            try:
                doc = decode_admin_document(after.admin_comment or "")
            except EaslurmError as exc:
                log.warning("job %s: %s", job_id, exc)
            else:  # a step named as left out is counted in its run's total: as shown as the file
                shown = {k: _nodes_known(merged[k]) for k in doc.omitted if k in merged}
                shown.update({s.key: _nodes_known(s) for s in doc.steps})
        lost = [s for s in missing if shown.get(s, -1) < _nodes_known(merged[s])]
        if lost:
            return JobResult(
                job_id, Status.FAILED, steps, missing, f"sacct does not show step(s) {','.join(lost)}"
            )
        how = "slurmctld has forgotten the job" if forgotten else "slurmctld holds no AdminComment"
        return JobResult(job_id, Status.REPUBLISHED, steps, missing, "; ".join(x for x in (how, note) if x))


def run_until_settled(
    rep: Republisher,
    job_ids: Sequence[str],
    wait_s: float,
    dry_run: bool = False,
    poll_s: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[JobResult]:
    """Run, then retry the deferred and active jobs every `poll_s` until none is left or `wait_s` passed
    (EpilogSlurmctld: `--wait 120` in the background covers MinJobAge)."""
    results = {r.job_id: r for r in rep.run(job_ids, dry_run)}
    end = clock() + wait_s
    while not dry_run:
        again = [j for j, r in results.items() if r.status in (Status.DEFERRED, Status.ACTIVE)]
        if not again or clock() >= end:
            break
        sleep(min(poll_s, max(0.0, end - clock())))
        results.update({r.job_id: r for r in rep.run(again)})
    return [results[j] for j in (str(int(x)) for x in job_ids)]
