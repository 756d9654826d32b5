"""Daemon holds: defer a job's eligibility with a marked, self-expiring StartTime, and undo it exactly.

A hold is one `scontrol update JobId=X StartTime=<until> AdminComment=easlurm-hold:...`: Slurm itself
makes the job eligible again at `until` (the TTL) if the daemon dies, and the marker in AdminComment
(empty on pending jobs; the energy agent overwrites it once the job runs) tells the daemon which
holds are its own, with the user's own begin time to restore. Jobs held any other way (user or
admin holds, priority 0) are never touched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from easlurm.slurm.job_updates import Hold, Release
from easlurm.slurm.sched_client import SlurmJob

HOLD_PREFIX = "easlurm-hold:"
_MARK = re.compile(r"^easlurm-hold:until=(\d+),begin=(\d+)(?:,since=(\d+))?(?:,why=([a-z0-9-]{1,32}))?$")
#: Why the daemon holds a job, as the mark's `why=` says it (readable in `scontrol show job`, sacct and
#: `squeue --json`; squeue's own Reason column shows BeginTime, its START_TIME the hold's end).
WHY_POLICY = "power-budget"  # the policy: its start would exceed the budget
WHY_GATE = "budget-gate"  # under a budget, not started this cycle: Slurm must not start it between cycles
WHY_BEGIN = "budget-gate-begin"  # the same, for a job waiting for its own begin time


@dataclass(frozen=True)
class HoldMark:
    """A daemon hold: eligible again at `until_s` (epoch s); `begin_s` is the user's own begin time, if any;
    `since_s` when the daemon first held the job (kept across extensions); `why` one of the WHY_* words."""

    until_s: int
    begin_s: int | None = None
    since_s: int | None = None
    why: str | None = None

    def encode(self) -> str:
        """ASCII, lowercase, no quotes or `|`: survives scontrol, sacctmgr and sacct -P."""
        text = f"{HOLD_PREFIX}until={self.until_s},begin={self.begin_s or 0}"
        if self.since_s is not None:
            text += f",since={self.since_s}"
        if self.why:
            text += f",why={self.why}"
        return text

    @classmethod
    def decode(cls, text: str | None) -> HoldMark | None:
        """The mark, also as older daemons wrote it (without `since` and `why`); None for anything else."""
        if not text or HOLD_PREFIX not in text:
            return None  # most jobs: an empty AdminComment or energy records (10,000 per cycle)
        m = _MARK.match(text.strip())
        if m is None:
            return None
        begin = int(m.group(2))
        since = int(m.group(3)) if m.group(3) is not None else None
        return cls(until_s=int(m.group(1)), begin_s=begin or None, since_s=since, why=m.group(4))


def mark_of(job: SlurmJob) -> HoldMark | None:
    """The daemon's mark on a job, None when the daemon does not hold it."""
    return HoldMark.decode(job.admin_comment)


def held_by_us(job: SlurmJob, now_s: float) -> bool:
    """Pending, marked and not yet expired: the daemon's own live hold."""
    mark = mark_of(job)
    return job.pending and mark is not None and mark.until_s > now_s


def foreign_hold(job: SlurmJob) -> bool:
    """Held or deferred by someone else (user/admin hold, priority 0, dependency, user begin time)."""
    if job.priority == 0 or job.reason.startswith("JobHeld") or job.reason.startswith("Dependency"):
        return True
    return job.reason == "BeginTime" and mark_of(job) is None


def user_deferred(job: SlurmJob, now_s: float, within_s: float) -> bool:
    """Pending only for the user's own begin time, which comes within `within_s`: the daemon may gate it
    (keeping that begin time: a release never makes the job eligible earlier)."""
    return (
        job.pending
        and job.reason == "BeginTime"
        and job.priority != 0
        and mark_of(job) is None
        and not job.admin_comment
        and job.eligible_s is not None
        and now_s < job.eligible_s <= now_s + within_s
    )


def held_for_own_begin(job: SlurmJob, now_s: float) -> bool:
    """Pending, held by the daemon, and its user's own begin time (kept in the mark) still ahead: the job
    cannot start before it whatever the daemon does, so it stays held and no policy is asked to start it
    (releasing it to start would only restore the begin time, and the next cycle would hold it again)."""
    mark = mark_of(job)
    return job.pending and mark is not None and mark.begin_s is not None and mark.begin_s > now_s


def waits_for_own_begin(job: SlurmJob, now_s: float, within_s: float) -> bool:
    """Deferred by its user's own begin time: coming within `within_s` and not yet held, or already held."""
    return user_deferred(job, now_s, within_s) or held_for_own_begin(job, now_s)


def can_hold(job: SlurmJob, now_s: float | None = None, ttl_s: float = 0.0) -> bool:
    """The daemon may hold only pending jobs whose AdminComment is empty or already its own mark, and
    (given `now_s`) jobs deferred by their user's begin time that comes within the TTL."""
    if now_s is not None and user_deferred(job, now_s, ttl_s):
        return True
    return job.pending and not foreign_hold(job) and (not job.admin_comment or mark_of(job) is not None)


def hold_fields(job: SlurmJob, now_s: float, ttl_s: float, why: str = WHY_POLICY) -> Hold:
    """The one update that holds (or extends the hold of) a job until now + ttl, saying why."""
    previous = mark_of(job)
    begin = previous.begin_s if previous is not None else None
    if previous is None and job.eligible_s is not None and job.eligible_s > now_s:
        begin = int(job.eligible_s)
    since = previous.since_s if previous is not None and previous.since_s is not None else int(now_s)
    until = int(max(now_s + ttl_s, begin or 0))
    return Hold(until, HoldMark(until, begin, since, why).encode())


def held_a_full_ttl(job: SlurmJob, now_s: float, ttl_s: float) -> bool:
    """The daemon has held this job for at least one TTL (since its first hold, across extensions)."""
    mark = mark_of(job)
    return mark is not None and mark.since_s is not None and now_s - mark.since_s >= ttl_s


def release_fields(job: SlurmJob, now_s: float) -> Release:
    """The one update that undoes a daemon hold: the user's own begin time (if still ahead) or now."""
    mark = mark_of(job)
    begin = mark.begin_s if mark is not None else None
    return Release(begin if begin is not None and begin > now_s else None)


def needs_refresh(job: SlurmJob, now_s: float, ttl_s: float) -> bool:
    """Extend a hold when less than half its TTL is left (one update per job every TTL/2)."""
    mark = mark_of(job)
    return mark is None or mark.until_s - now_s < ttl_s / 2.0
