"""`easlurm mail`: the job-end card, delivered through Slurm's MailProg (queue, one throttled drain, card)."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from easlurm.accounting.mail import (
    LOCK_PATIENCE_S,
    MailEntry,
    RateLimit,
    drain_lock,
    queued,
    read_entry,
    set_aside,
)
from easlurm.accounting.seff_cli import card_view, cluster_gpu_types
from easlurm.cli import load_ctx_config
from easlurm.config import mail_template
from easlurm.errors import ConfigError, EaslurmError
from easlurm.slurm.sacct_jobs import FIELDS, job_of_row
from easlurm.slurm.sched_client import CliSchedClient
from easlurm.slurm.states import FINAL_JOB_STATES

log = logging.getLogger(__name__)

#: jobs asked of sacct at once (one query per batch of ending jobs, never one per job)
BATCH = 100
#: how long the mailer may take for one mail (s)
MAILER_TIMEOUT_S = 60.0


def spool_of(cfg: Any, spool: str | None) -> Path:
    """The mail queue: --spool, else mail.spool, else <spank.spool>/mail."""
    return Path(spool or cfg.get("mail.spool") or Path(cfg.get("spank.spool")) / "mail")


@click.group(
    "mail",
    context_settings={"help_option_names": ["-h", "--help"]},
    help="The job-end card: slurm.conf MailProg (scripts/easlurm-mailprog) queues each mail and returns at "
    "once; `easlurm mail drain` (started by MailProg, one at a time) sends the "
    "queue through the site's mailer (mail.mailer) at most mail.rate_per_min a minute, each end-of-job "
    "mail with the job's `easlurm seff` card and efficiency notes.",
)
def mail_group() -> None:
    pass


@mail_group.command("card", help="Print the mail a job's end would send (subject line, then the body).")
@click.argument("job_id")
@click.pass_context
def card_cmd(ctx: click.Context, job_id: str) -> None:
    if not job_id.isdigit():
        raise ConfigError(f"mail card: JOBID must be a job number, got {job_id[:40]!r}")
    client = CliSchedClient()
    entry = MailEntry(Path("-"), job_id, "-", f"Slurm Job_id={job_id} Ended", "Ended", "", 0.0)
    rows = _rows_by_job(client, [job_id]).get(job_id, [])
    click.echo(card_body(ctx, client, entry, rows, None))


@mail_group.command(
    "drain",
    help="Send the queued mails (one drain at a time: exits at once when another runs). An end-of-job mail "
    "waits until sacct shows the job ended, at most mail.max_wait_s, then goes with or without its card.",
)
@click.option(
    "--spool", type=click.Path(file_okay=False), default=None, help="The queue (default mail.spool)."
)
@click.option(
    "--poll",
    "poll_s",
    type=click.FloatRange(0.05, 60),
    default=2.0,
    show_default=True,
    help="Seconds between looks at mails that wait for their job's end.",
)
@click.option(
    "--linger",
    "linger_s",
    type=click.FloatRange(0, 3600),
    default=10.0,
    show_default=True,
    help="Seconds to stay once the queue is empty: jobs ending one after another then find a drain running "
    "(each start is a Python process).",
)
@click.pass_context
def drain_cmd(ctx: click.Context, spool: str | None, poll_s: float, linger_s: float) -> None:
    cfg = load_ctx_config(ctx)
    mailer = mail_template(cfg.get("mail.mailer"), "mail.mailer")
    limiter = RateLimit(float(cfg.get("mail.rate_per_min")))
    drainer = Drain(
        ctx,
        spool_of(cfg, spool),
        mailer,
        limiter,
        float(cfg.get("mail.max_wait_s")),
        poll_s,
        linger_s=linger_s,
        say=lambda line: click.echo(line, err=True),
    )
    sent = drainer.run()
    log.info("mail drain: %d sent", sent)


class Drain:
    """The one process that empties the queue: batches of jobs asked of sacct at once, a rate limit on the
    mailer, mails that wait for their job's end looked at every `poll_s`, and `linger_s` spent looking at an
    empty queue before it exits."""

    def __init__(
        self,
        ctx: click.Context,
        spool: Path,
        mailer: Sequence[str],
        limiter: RateLimit,
        max_wait_s: float,
        poll_s: float,
        client: Any = None,
        clock: Callable[[], float] = time.time,
        say: Callable[[str], None] = lambda _: None,
        linger_s: float = 0.0,
    ) -> None:
        self.ctx, self.spool, self.mailer, self.limiter = ctx, spool, list(mailer), limiter
        self.max_wait_s, self.poll_s, self.clock = max_wait_s, poll_s, clock
        self.client = client or CliSchedClient()
        self.say = say
        self.linger_s = linger_s
        self._cluster_types: list[str] | None = None

    def run(self) -> int:
        """Drain while holding the lock; after releasing it, look once more: a MailProg that found the lock
        held just before the release started no drain, and its mail must not wait for the next job's end."""
        sent = 0
        while True:
            with drain_lock(self.spool, LOCK_PATIENCE_S) as held:
                if not held:
                    return sent
                self.say(f"{time.time():.3f} drain {os.getpid()}: holds the lock")
                got = self._drain_held()
                sent += got
                self.say(f"{time.time():.3f} drain {os.getpid()}: {got} sent, lets the lock go")
            if not queued(self.spool):
                return sent

    def _drain_held(self) -> int:
        sent = 0
        idle_since: float | None = None
        while True:
            entries = [e for e in (read_entry(p) for p in queued(self.spool)[:BATCH]) if e is not None]
            if not entries:
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since >= self.linger_s:
                    return sent
                time.sleep(min(self.poll_s, 0.5))
                continue
            idle_since = None
            card_jobs = sorted({e.job_id for e in entries if e.wants_card})
            rows = _rows_by_job(self.client, card_jobs) if card_jobs else {}
            progressed = False
            for e in entries:
                job_rows = rows.get(e.job_id, [])
                waiting = e.wants_card and not job_ended(job_rows)
                if waiting and self.clock() - e.queued_s < self.max_wait_s:
                    continue
                body = e.body
                if e.wants_card:
                    body = card_body(self.ctx, self.client, e, job_rows, self._types(), waited=waiting)
                self.limiter.wait()
                sent += self._send(e, body)
                progressed = True
            if not progressed:
                time.sleep(self.poll_s)

    def _types(self) -> list[str]:
        """The cluster's GPU types (sinfo, asked once per drain: slurmctld is not asked per mail)."""
        if self._cluster_types is None:
            self._cluster_types = cluster_gpu_types(self.client)
        return self._cluster_types

    def _send(self, e: MailEntry, body: str) -> int:
        """Hand one mail to the site's mailer (argv, body on stdin); a failure sets the mail aside."""
        if not e.recipient or e.recipient.startswith("-"):
            set_aside(e.path, self.spool, f"recipient {e.recipient!r} is not an address")
            return 0
        argv = [a.format(subject=e.subject, recipient=e.recipient) for a in self.mailer]
        try:
            res = subprocess.run(
                argv, input=body.encode(), capture_output=True, timeout=MAILER_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            set_aside(e.path, self.spool, f"{argv[0]}: {exc}")
            return 0
        if res.returncode != 0:
            why = res.stderr.decode(errors="replace").strip()[-300:]
            set_aside(e.path, self.spool, f"{argv[0]} exited {res.returncode}: {why}")
            return 0
        e.path.unlink(missing_ok=True)
        return 1


def _rows_by_job(client: Any, job_ids: Sequence[str]) -> dict[str, list[dict[str, str]]]:
    """Every run's rows of the jobs, from one sacct call; {} when sacct fails (the mails wait, then go)."""
    try:
        rows = client.sacct(["--jobs", ",".join(job_ids), "--duplicates"], list(FIELDS))
    except EaslurmError as exc:
        log.warning("sacct: %s", exc)
        return {}
    out: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        out.setdefault(r["JobIDRaw"].split(".")[0], []).append(r)
    return out


def job_ended(rows: Sequence[dict[str, str]]) -> bool:
    """sacct shows the job's last run in a final state (its AdminComment is then in the database)."""
    jobs = [r for r in rows if "." not in r["JobIDRaw"]]
    if not jobs:
        return False
    state = (job_of_row(jobs[-1], strict=False).state or "").split(" ")[0]
    return state in FINAL_JOB_STATES


def card_body(
    ctx: click.Context,
    client: Any,
    e: MailEntry,
    rows: list[dict[str, str]],
    cluster_types: Sequence[str] | None,
    waited: bool = False,
) -> str:
    """The mail's body: what Slurm said, then the job's card with its notes (or why there is none)."""
    head = f"{e.subject}\n\n" if e.subject else ""
    if e.body.strip():
        head += e.body.rstrip() + "\n\n"
    if waited:
        return head + "(no energy card: sacct did not show the job ended within mail.max_wait_s)\n"
    if not rows:
        return head + "(no energy card: the job is not in the accounting records)\n"
    cfg = load_ctx_config(ctx)
    spool = Path(cfg.get("spank.spool"))
    try:
        view = card_view(ctx, client, e.job_id, rows, spool, cluster_types=cluster_types)
    except EaslurmError as exc:
        return head + f"(no energy card: {exc})\n"
    footer = f"\n\n(easlurm seff {e.job_id} shows this card again; --json for the figures)\n"
    return head + view.text() + footer
