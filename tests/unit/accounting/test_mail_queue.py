"""The job-end mail path without Slurm: the shipped MailProg (scripts/easlurm-mailprog) queues one file per
mail and starts a drain only when none holds the lock; the drain sends each mail through the site's mailer
(argv, body on stdin), at most `rate_per_min`, one drain at a time, and sets aside what it cannot send."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import click
import pytest

from easlurm.accounting.mail import RateLimit, drain_lock, queued, read_entry, write_entry
from easlurm.accounting.mail_cli import Drain, job_ended, mail_group
from easlurm.slurm.box import SlurmBox

REPO = Path(__file__).resolve().parents[3]
MAILPROG = REPO / "scripts" / "easlurm-mailprog"


def capture_mailer(tmp_path: Path, exit_code: int = 0) -> list[str]:
    """A mailer that keeps argv and body in `tmp_path/sent` (one file per mail)."""
    sent = tmp_path / "sent"
    sent.mkdir(exist_ok=True)
    script = tmp_path / "mailer.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'f="{sent}/$(date +%s%N)-$$.txt"\n'
        "{ printf 'argv:'; printf ' [%s]' \"$@\"; printf '\\n'; cat; } > \"$f\"\n"
        f"exit {exit_code}\n"
    )
    script.chmod(0o755)
    return [str(script), "-s", "{subject}", "{recipient}"]


def sent_mails(tmp_path: Path) -> list[str]:
    return [p.read_text() for p in sorted((tmp_path / "sent").glob("*.txt"))]


class FakeClock:
    """A clock whose sleeps advance it, recording when each mail left."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def drain(tmp_path: Path, mailer: list[str], per_min: float = 6000.0) -> Drain:
    ctx = click.Context(mail_group)
    return Drain(ctx, tmp_path / "spool", mailer, RateLimit(per_min), max_wait_s=0.0, poll_s=0.05)


def mailprog(
    spool: Path, *args: str, drain_cmd: str = "false", **env: str
) -> subprocess.CompletedProcess[str]:
    full = {
        "PATH": os.environ["PATH"],
        "EASLURM_MAIL_SPOOL": str(spool),
        "EASLURM_MAIL_DRAIN": drain_cmd,
        **env,
    }
    return subprocess.run(
        [str(MAILPROG), *args],
        env=full,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )


def test_mailprog_queues_one_line_fields_and_returns(tmp_path: Path) -> None:
    """Slurm's call: `-s SUBJECT RECIPIENT` with the job in the environment; a newline in the job name
    cannot forge a field."""
    spool = tmp_path / "spool"
    subject = "Slurm Job_id=42 Name=a\nrecipient=evil Ended, Run time 00:00:04, COMPLETED, ExitCode 0"
    res = mailprog(
        spool,
        "-s",
        subject,
        "alice",
        SLURM_JOB_ID="42",
        SLURM_JOB_MAIL_TYPE="Ended",
        SLURM_JOB_STATE="COMPLETED",
    )
    assert res.returncode == 0, res.stderr
    (path,) = queued(spool)
    entry = read_entry(path)
    assert entry is not None
    assert (entry.job_id, entry.recipient, entry.mail_type, entry.state) == (
        "42",
        "alice",
        "Ended",
        "COMPLETED",
    )
    assert entry.subject.startswith("Slurm Job_id=42 Name=a recipient=evil Ended")
    assert entry.wants_card and entry.body == ""
    assert not list((spool / "queue").glob(".*"))  # no half-written file left


def test_mailprog_starts_a_drain_only_when_none_holds_the_lock(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    marker = tmp_path / "started"
    starter = tmp_path / "fake-easlurm"
    starter.write_text(f'#!/bin/sh\necho "$@" >> {marker}\n')
    starter.chmod(0o755)
    with drain_lock(spool) as held:
        assert held
        assert mailprog(spool, "-s", "s", "bob", drain_cmd=str(starter), SLURM_JOB_ID="1").returncode == 0
        time.sleep(0.3)
        assert not marker.exists()  # a drain runs: MailProg only queues
    assert mailprog(spool, "-s", "s", "bob", drain_cmd=str(starter), SLURM_JOB_ID="2").returncode == 0
    deadline = time.monotonic() + 5
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.read_text().split() == ["mail", "drain", "--spool", str(spool)]
    assert len(queued(spool)) == 2


def test_the_drain_sends_each_mail_once_through_the_mailer(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    for job in ("11", "12", "13"):
        write_entry(spool, job, f"user{job}", f"Slurm Job_id={job} Began", "Began", body=f"hello {job}\n")
    assert drain(tmp_path, capture_mailer(tmp_path)).run() == 3
    mails = sent_mails(tmp_path)
    assert sorted(m.splitlines()[0] for m in mails) == [
        f"argv: [-s] [Slurm Job_id={j} Began] [user{j}]" for j in ("11", "12", "13")
    ]
    assert all(m.endswith(f"hello {m.split('Job_id=')[1][:2]}\n") for m in mails)
    assert queued(spool) == []


def test_another_drain_holding_the_lock_is_left_to_it(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    write_entry(spool, "5", "carol", "Slurm Job_id=5 Began", "Began")
    with drain_lock(spool) as held:
        assert held
        assert drain(tmp_path, capture_mailer(tmp_path)).run() == 0
    assert len(queued(spool)) == 1 and sent_mails(tmp_path) == []


def test_what_cannot_be_sent_is_set_aside_with_the_reason(tmp_path: Path) -> None:
    """A recipient that reads as an option to the mailer is never passed; a mailer that fails keeps the mail."""
    spool = tmp_path / "spool"
    write_entry(spool, "6", "-oProxyCommand=x", "Slurm Job_id=6 Began", "Began")
    write_entry(spool, "7", "dave", "Slurm Job_id=7 Began", "Began")
    assert drain(tmp_path, capture_mailer(tmp_path, exit_code=3)).run() == 0
    whys = sorted(p.read_text() for p in (spool / "failed").glob("*.why"))
    assert len(whys) == 2 and "is not an address" in whys[0] + whys[1] and "exited 3" in whys[0] + whys[1]
    assert len(sent_mails(tmp_path)) == 1  # only dave's reached the (failing) mailer
    assert queued(spool) == []


def test_the_rate_limit_spaces_the_mails() -> None:
    clock = FakeClock()
    limit = RateLimit(120.0, clock=clock, sleep=clock.sleep)
    times = []
    for _ in range(5):
        limit.wait()
        times.append(clock.now)
    assert times == pytest.approx([1000.0, 1000.5, 1001.0, 1001.5, 1002.0])


def test_a_job_has_ended_when_its_last_run_is_final() -> None:
    row = {"JobIDRaw": "9", "JobID": "9", "State": "COMPLETED"}
    assert job_ended([row])
    assert job_ended([{**row, "State": "CANCELLED by 0"}])
    assert not job_ended([{**row, "State": "COMPLETING"}])
    assert not job_ended([{**row, "State": "REQUEUED"}, {**row, "State": "RUNNING"}])
    assert not job_ended([])


def test_the_box_mailprog_queues_and_its_drain_captures(tmp_path: Path) -> None:
    """The local cluster's MailProg (slurm.conf) runs the shipped script with the box's queue; its drain
    (this checkout's easlurm, the box's settings) hands the mail to the capture mailer, which keeps it
    under BOXDIR/mail."""
    box = SlurmBox(tmp_path)
    for d in (box.paths.etc, box.paths.spool):
        d.mkdir(parents=True)
    box._write_mail_program()
    assert f"MailProg={box.paths.mail_program}" in box._slurm_conf().splitlines()
    res = subprocess.run(
        [str(box.paths.mail_program), "-s", "Slurm Job_id=77 Name=t Began, Queued time 00:00:01", "erin"],
        env={"SLURM_JOB_ID": "77", "SLURM_JOB_MAIL_TYPE": "Began"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert res.returncode == 0, res.stderr
    deadline = time.monotonic() + 30
    while not list(box.paths.mail_sent.glob("*.txt")) and time.monotonic() < deadline:
        time.sleep(0.1)
    (mail,) = box.paths.mail_sent.glob("*.txt")
    assert mail.read_text().startswith(
        "argv: [-s] [Slurm Job_id=77 Name=t Began, Queued time 00:00:01] [erin]"
    )
    # the drain removes the queued file after the mailer took it: under load that comes a moment later
    while queued(box.paths.spool / "mail") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert queued(box.paths.spool / "mail") == []


def test_a_lingering_drain_sends_what_arrives_while_the_queue_was_empty(tmp_path: Path) -> None:
    """Jobs ending one after another find the drain still running (no new Python process each time)."""
    spool = tmp_path / "spool"
    write_entry(spool, "21", "fay", "Slurm Job_id=21 Began", "Began")
    d = drain(tmp_path, capture_mailer(tmp_path))
    d.linger_s = 1.5
    late = threading.Timer(0.5, lambda: write_entry(spool, "22", "fay", "Slurm Job_id=22 Began", "Began"))
    late.start()
    t0 = time.monotonic()
    assert d.run() == 2
    assert time.monotonic() - t0 >= 1.5 and len(sent_mails(tmp_path)) == 2


def test_a_drain_waits_out_a_short_probe_of_its_lock(tmp_path: Path) -> None:
    """MailProg probes the lock (`flock -n drain.lock true`) while the drain starts: a drain that finds it
    taken for a moment tries again (LOCK_PATIENCE_S) instead of leaving the queue to no one."""
    spool = tmp_path / "spool"
    write_entry(spool, "31", "gus", "Slurm Job_id=31 Began", "Began")
    taken, release = threading.Event(), threading.Event()

    def probe() -> None:
        with drain_lock(spool) as held:
            assert held
            taken.set()
            release.wait(5)

    t = threading.Thread(target=probe)
    t.start()
    taken.wait(5)
    threading.Timer(0.3, release.set).start()
    assert drain(tmp_path, capture_mailer(tmp_path)).run() == 1
    t.join()
