"""The job-end card's mail queue: Slurm's MailProg queues each mail as a file, one drain sends them.

slurm.conf's `MailProg` (scripts/easlurm-mailprog) only writes a small file into
`<spool>/queue` and returns: slurmctld waits for it, so it must never wait on sacct, the oracle or the mail
system. One drain process at a time (a lock file) sends the queue at a bounded rate, each end-of-job mail
with the job's `easlurm seff` card and efficiency notes once sacct shows the job ended. A burst of
thousands of ending jobs costs slurmctld one fork of a shell script each, slurmdbd one sacct per batch,
and the mailer at most `mail.rate_per_min` runs a minute.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

#: Slurm's mail types whose mail gets the card (SLURM_JOB_MAIL_TYPE: "Ended", "Failed"; the rest go as sent)
CARD_MAIL_TYPES = ("Ended", "Failed")
#: at most this many bytes of a queued mail are read (a subject, a recipient and a short body)
MAX_ENTRY_BYTES = 64 * 1024
QUEUE = "queue"
FAILED = "failed"
LOCK = "drain.lock"


@dataclass(frozen=True)
class MailEntry:
    """One mail MailProg queued: for whom, about which job, what Slurm would have sent."""

    path: Path
    job_id: str
    recipient: str
    subject: str
    mail_type: str
    state: str
    queued_s: float
    body: str = ""

    @property
    def wants_card(self) -> bool:
        return self.mail_type in CARD_MAIL_TYPES and self.job_id.isdigit()


def _clean(text: str) -> str:
    """One line: Slurm's subject holds the job name, which the user chose."""
    return " ".join(text.replace("\r", " ").replace("\n", " ").split())


def write_entry(
    spool: Path,
    job_id: str,
    recipient: str,
    subject: str,
    mail_type: str = "",
    state: str = "",
    body: str = "",
    now_s: float | None = None,
) -> Path:
    """Queue one mail in the format scripts/easlurm-mailprog writes (`key=value` lines, then the body after
    `body=`), under a dot name then renamed, so the drain never reads half a file. For callers other than
    Slurm (tests, a site's own tools)."""
    queue = spool / QUEUE
    queue.mkdir(parents=True, exist_ok=True)
    now = time.time() if now_s is None else now_s
    fields = {
        "job_id": _clean(job_id),
        "recipient": _clean(recipient),
        "subject": _clean(subject),
        "mail_type": _clean(mail_type),
        "state": _clean(state),
        "queued": f"{now:.0f}",
    }
    text = "".join(f"{k}={v}\n" for k, v in fields.items()) + f"body=\n{body}"
    final = queue / f"{now:.0f}-{fields['job_id'] or '0'}-{os.getpid()}-{time.monotonic_ns()}.mail"
    tmp = queue / f".{final.name}"
    tmp.write_text(text)
    os.replace(tmp, final)
    return final


def read_entry(path: Path) -> MailEntry | None:
    """A queued mail; None when it is gone (another drain sent it) or unreadable (logged, moved aside)."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_ENTRY_BYTES)
    except FileNotFoundError:
        return None
    text = raw.decode("utf-8", "replace")
    head, _, body = text.partition("body=\n")
    fields: dict[str, str] = {}
    for line in head.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    try:
        queued = float(fields.get("queued") or path.stat().st_mtime)
    except (ValueError, OSError):
        queued = time.time()
    return MailEntry(
        path=path,
        job_id=fields.get("job_id", ""),
        recipient=fields.get("recipient", ""),
        subject=fields.get("subject", ""),
        mail_type=fields.get("mail_type", ""),
        state=fields.get("state", ""),
        queued_s=queued,
        body=body,
    )


def queued(spool: Path) -> list[Path]:
    """The queue, oldest first (names start with the queueing time)."""
    try:
        names = sorted(
            p for p in (spool / QUEUE).iterdir() if p.suffix == ".mail" and not p.name.startswith(".")
        )
    except FileNotFoundError:
        return []
    return names


def set_aside(entry_path: Path, spool: Path, why: str) -> None:
    """Move a mail that cannot be sent to `<spool>/failed` with the reason beside it (never lost silently)."""
    failed = spool / FAILED
    failed.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(entry_path, failed / entry_path.name)
        (failed / f"{entry_path.name}.why").write_text(why + "\n")
    except FileNotFoundError:
        return
    log.warning("mail %s set aside: %s", entry_path.name, why)


#: how long a drain tries for the lock before it leaves the queue to the drain that holds it (s): MailProg
#: probes the lock (`flock -n drain.lock true`) while it waits for the drain to start, for a few ms each
LOCK_PATIENCE_S = 1.0


@contextmanager
def drain_lock(spool: Path, patience_s: float = 0.0) -> Iterator[bool]:
    """The one-drain-at-a-time lock: yields True when this process holds it, False when another does
    (still after `patience_s` of tries)."""
    spool.mkdir(parents=True, exist_ok=True)
    fd = os.open(spool / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + patience_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(0.02)
        yield True
    finally:
        os.close(fd)  # closing releases the lock


class RateLimit:
    """At most `per_min` events a minute, evenly spaced (the first goes at once)."""

    def __init__(
        self,
        per_min: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.gap_s = 60.0 / per_min
        self._clock = clock
        self._sleep = sleep
        self._next: float | None = None

    def wait(self) -> None:
        now = self._clock()
        if self._next is not None and now < self._next:
            self._sleep(self._next - now)
            now = self._next
        self._next = now + self.gap_s
