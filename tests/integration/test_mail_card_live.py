"""The job-end card on the real local cluster: slurmctld runs the box's MailProg (scripts/easlurm-mailprog)
for a profiled job submitted with --mail-type=END; the one drain it starts waits for sacct to show the job
ended and hands the mail, with the job's `easlurm seff` card and efficiency notes, to the box's capture
mailer (BOXDIR/mail). A burst of ending jobs starts one drain, and every mail is captured once."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest
from box_support import wait_for
from spank_support import plugin_with_fake_sensors

pytestmark = pytest.mark.slurm


def mails_of(box: Any, job: str) -> list[str]:
    """The captured mails about one job (its id in the subject, the argv line)."""
    out = []
    for p in sorted((Path(box.dir) / "mail").glob("*.txt")):
        text = p.read_text(errors="replace")
        if f"[Slurm Job_id={job} " in text.split("\n", 1)[0]:
            out.append(text)
    return out


def running_mailprog(box: Any) -> str:
    conf = box.run(["scontrol", "show", "config"]).stdout
    return next((ln.split("=", 1)[1].strip() for ln in conf.splitlines() if ln.startswith("MailProg")), "")


@pytest.fixture
def mailprog(slurm_box: Any) -> Any:
    """The box's MailProg in force: a slurmctld started before the box had one re-reads slurm.conf."""
    want = str(Path(slurm_box.dir) / "etc" / "mailprog")
    if running_mailprog(slurm_box) != want:
        slurm_box.run(["scontrol", "reconfigure"])
        wait_for(lambda: running_mailprog(slurm_box) == want, 30, "MailProg after scontrol reconfigure")
    return slurm_box


def test_a_profiled_job_ending_gets_its_card_by_mail(mailprog: Any) -> None:
    """Two A100s drawing 60 W each (fake NVML), under their idle threshold (50 W idle + 10 % of the 350 W
    above it): the card shows the energy, and the notes name the idle allocated GPUs and the low
    utilisation, as `easlurm seff` does."""
    box = mailprog
    with plugin_with_fake_sensors(box, gpu_w=60.0):
        job = box.sbatch(
            "-J", "mail-it", "-p", "a100", "--gres=gpu:a100:2", "--mail-type=END",
            "--mail-user=alice@example.org", "-o", "/dev/null", "--energy-profile=gpu", "--wrap", "sleep 3",
        )  # fmt: skip
        assert box.wait_job(job, timeout_s=90) == "COMPLETED"
    wait_for(lambda: mails_of(box, job), 60, f"the end mail of job {job}")
    (mail,) = mails_of(box, job)
    argv, body = mail.split("\n", 1)
    assert argv.startswith(f"argv: [-s] [Slurm Job_id={job} Name=mail-it Ended")
    assert argv.endswith("[alice@example.org]")
    assert f"Job {job} (mail-it)" in body and "GPUs 2 x a100" in body
    assert "Energy " in body and "Efficiency notes:" in body
    assert "idle allocated GPUs" in body and "60.0W on average" in body
    assert "low GPU utilisation" in body
    assert f"easlurm seff {job} shows this card again" in body


def test_a_burst_of_ending_jobs_starts_one_drain(mailprog: Any) -> None:
    """Twenty unprofiled one-second jobs ending together: each mail captured once, by one drain process
    (the drain log names each drain's pid when it starts holding the lock), and the queue empties."""
    box = mailprog
    spool = Path(box.dir) / "spool" / "easlurm" / "mail"
    jobs = [
        box.sbatch("-J", f"mail-burst{i}", "-p", "cpu", "--mail-type=END", "--mail-user=bob",
                   "-o", "/dev/null", "--wrap", "sleep 1")
        for i in range(20)
    ]  # fmt: skip
    for job in jobs:
        box.wait_job(job, timeout_s=90)
    wait_for(lambda: all(mails_of(box, j) for j in jobs), 90, "every burst job's mail")
    assert all(len(mails_of(box, j)) == 1 for j in jobs)
    for j in jobs:
        (mail,) = mails_of(box, j)
        assert "no energy records" in mail  # unprofiled: the card says so
    wait_for(lambda: not list((spool / "queue").glob("*.mail")), 30, "an empty queue")
    # a drain lingers on an empty queue (the one the previous test started may have sent these mails)
    wait_for(lambda: every_drain_let_go(spool / "drain.log"), 60, "the drain to let the lock go")
    assert drains_never_overlap(spool / "drain.log")


#: drains this module's tests start (a reused box may keep the log of a drain killed with an earlier box)
SINCE = time.time()


def every_drain_let_go(log: Path) -> bool:
    """Every drain that took the lock since this module was loaded let it go, and there was one."""
    lines = log.read_text().splitlines() if log.exists() else []
    held = {ln.split()[2] for ln in lines if "holds the lock" in ln and float(ln.split()[0]) >= SINCE}
    let_go = {ln.split()[2] for ln in lines if "lets the lock go" in ln}
    return bool(held) and held <= let_go


def drains_never_overlap(log: Path) -> bool:
    """Each drain's lines "T drain PID: holds the lock" ... "T drain PID: N sent, lets the lock go": the
    intervals, in time order, never overlap (a drain started while another held the lock exited at once)."""
    spans: dict[str, list[float]] = {}
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[1] == "drain":
            key = parts[2].rstrip(":")
            if "holds" in line:
                spans.setdefault(key, []).append(float(parts[0]))
            elif "lets" in line and key in spans:
                spans[key].append(float(parts[0]))
    intervals = sorted((t[i], t[i + 1]) for t in spans.values() for i in range(0, len(t) - 1, 2))
    assert intervals, "no drain ran"
    return all(a[1] <= b[0] for a, b in itertools.pairwise(intervals))
