"""`easlurm accounting republish` on an in-memory Slurm: writes only when safe (the job ended and
slurmctld holds no AdminComment, or has forgotten the job), never drops a record, verifies what sacct
shows, and does nothing the second time."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from easlurm.accounting.republish import (
    Republisher,
    Status,
    parse_sacct_json_jobs,
    run_until_settled,
    spool_candidates,
)
from easlurm.accounting.step_record import (
    DeviceRecord,
    NodeRecord,
    StepRecord,
    decode_admin_comment,
    encode_admin_comment,
)
from easlurm.errors import SlurmError
from easlurm.slurm.client import SlurmClient

T0 = 1_800_000_000.0


def step(job: int, name: str, start_s: float = T0 + 10, energy_j: float = 500.0) -> StepRecord:
    dev = DeviceRecord("gpu0", "gpu", energy_j, energy_j / 5, samples=50, duration_s=5.0)
    node = NodeRecord(0, "a100-1", start_s, 5.0, [dev], step_start_time=start_s, step_end_time=start_s + 5)
    return StepRecord(job, name, 1, [node])


class FakeSlurm(SlurmClient):
    """One job's slurmctld record (None: forgotten) and database record; every write is recorded.
    `persist=False` makes database writes vanish (what slurmctld's late copy does)."""

    def __init__(self, jobs: dict[str, dict[str, Any]]) -> None:
        self.jobs = jobs
        self.writes: list[tuple[int, str]] = []
        self.persist = True

    def sacct(self, selection: Sequence[str], fields: Sequence[str]) -> list[dict[str, str]]:
        raise AssertionError("not used")

    def sacct_json(self, selection: Sequence[str]) -> dict[str, Any]:
        ids = selection[selection.index("-j") + 1].split(",")
        return {
            "jobs": [
                {
                    "job_id": int(j),
                    "state": {"current": self.jobs[j]["db_state"]},
                    "comment": {"administrator": self.jobs[j]["db_admin"] or None},
                    "time": {"start": int(T0), "end": int(T0 + 60), "submission": int(T0 - 5)},
                }
                for j in ids
                if j in self.jobs
            ]
        }

    def sacct_fields(self) -> tuple[str, ...]:
        return ("JobID", "State", "AdminComment")

    def show_job(self, job_id: int) -> dict[str, str]:
        ctld = self.jobs[str(job_id)]["ctld"]
        if ctld is None:
            raise SlurmError("scontrol failed: slurm_load_jobs error: Invalid job id specified")
        return dict(ctld)

    def set_admin_comment(self, job_id: int, text: str) -> None:
        raise AssertionError("the republisher never writes through slurmctld")

    def set_admin_comment_db(self, job_id: int, text: str) -> None:
        self.writes.append((job_id, text))
        if self.persist:
            self.jobs[str(job_id)]["db_admin"] = text.lower()


def spool_with(tmp_path: Path, job: int, *steps: StepRecord) -> Path:
    spool = tmp_path / "spool"
    (spool / str(job)).mkdir(parents=True, exist_ok=True)
    for s in steps:
        (spool / str(job) / f"step-{s.step}.json").write_text(json.dumps(s.to_dict()))
    return spool


def shown(fake: FakeSlurm, job: str) -> list[str]:
    return sorted(s.step for s in decode_admin_comment(fake.jobs[job]["db_admin"]))


def job_state(ctld_admin: str | None, db_admin: str, state: str = "CANCELLED") -> dict[str, Any]:
    ctld = None if ctld_admin is None else {"JobState": state, "AdminComment": ctld_admin}
    return {"ctld": ctld, "db_state": state, "db_admin": db_admin}


def test_forgotten_job_gets_the_union_written_and_verified(tmp_path: Path) -> None:
    """The database keeps step 0 (slurmctld's copy), the spool has 1 and batch: all three end up in sacct."""
    spool = spool_with(tmp_path, 7, step(7, "1"), step(7, "batch"))
    fake = FakeSlurm({"7": job_state(None, encode_admin_comment([step(7, "0", energy_j=42.0)]))})
    [res] = Republisher(fake, spool).run(["7"])
    assert res.status is Status.REPUBLISHED and res.missing == ["1", "batch"]
    assert shown(fake, "7") == ["0", "1", "batch"]
    kept = {s.step: s for s in decode_admin_comment(fake.jobs["7"]["db_admin"])}
    assert kept["0"].total_energy_j == pytest.approx(42.0)  # nothing readable is dropped
    [again] = Republisher(fake, spool).run(["7"])
    assert again.status is Status.UP_TO_DATE and len(fake.writes) == 1


def test_ctld_with_own_copy_defers_and_empty_copy_writes_at_once(tmp_path: Path) -> None:
    spool = spool_with(tmp_path, 8, step(8, "0"), step(8, "batch"))
    spool_with(tmp_path, 9, step(9, "0"))
    copy = encode_admin_comment([step(8, "0")])
    fake = FakeSlurm({"8": job_state(copy, copy), "9": job_state("", "")})
    res = {r.job_id: r for r in Republisher(fake, spool).run(["8", "9"])}
    assert res["8"].status is Status.DEFERRED and res["8"].missing == ["batch"]
    assert res["9"].status is Status.REPUBLISHED and shown(fake, "9") == ["0"]
    assert [w[0] for w in fake.writes] == [9]


def test_running_and_completing_jobs_are_left_to_their_agents(tmp_path: Path) -> None:
    spool = spool_with(tmp_path, 5, step(5, "0"))
    spool_with(tmp_path, 6, step(6, "0"))
    fake = FakeSlurm({"5": job_state("", "", "RUNNING"), "6": job_state("", "", "COMPLETING")})
    res = Republisher(fake, spool).run(["5", "6"])
    assert [r.status for r in res] == [Status.ACTIVE, Status.ACTIVE] and not fake.writes


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    spool = spool_with(tmp_path, 7, step(7, "0"))
    fake = FakeSlurm({"7": job_state(None, "")})
    [res] = Republisher(fake, spool).run(["7"], dry_run=True)
    assert res.status is Status.WOULD_REPUBLISH and res.missing == ["0"] and not fake.writes


def test_write_that_does_not_show_in_sacct_fails(tmp_path: Path) -> None:
    spool = spool_with(tmp_path, 7, step(7, "0"))
    fake = FakeSlurm({"7": job_state(None, "")})
    fake.persist = False
    [res] = Republisher(fake, spool).run(["7"])
    assert res.status is Status.FAILED and "does not show" in res.detail


def test_records_of_an_earlier_job_with_the_same_id_are_left_out(tmp_path: Path) -> None:
    """Job ids are reused after a controller reset: a spool record from before the job ran is not its own."""
    spool = spool_with(tmp_path, 7, step(7, "0"), step(7, "1", start_s=T0 - 86_400))
    fake = FakeSlurm({"7": job_state(None, "")})
    [res] = Republisher(fake, spool).run(["7"])
    assert res.status is Status.REPUBLISHED and shown(fake, "7") == ["0"]
    assert "earlier job" in res.detail


def test_missing_spool_and_unknown_jobs() -> None:
    fake = FakeSlurm({"7": job_state(None, "")})
    res = {r.job_id: r for r in Republisher(fake, Path("/nonexistent/spool")).run(["7", "8"])}
    assert res["7"].status is Status.NO_RECORDS
    assert res["8"].status is Status.FAILED and "database" in res["8"].detail


def test_wait_retries_deferred_jobs_until_slurmctld_forgets_them(tmp_path: Path) -> None:
    spool = spool_with(tmp_path, 8, step(8, "0"), step(8, "batch"))
    copy = encode_admin_comment([step(8, "0")])
    fake = FakeSlurm({"8": job_state(copy, copy)})
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s
        if now[0] >= 30:  # MinJobAge passed: slurmctld forgets the job
            fake.jobs["8"]["ctld"] = None

    [res] = run_until_settled(Republisher(fake, spool), ["8"], 120.0, clock=lambda: now[0], sleep=sleep)
    assert res.status is Status.REPUBLISHED and 30 <= now[0] < 40 and shown(fake, "8") == ["0", "batch"]
    fake.jobs["8"]["ctld"] = {"JobState": "CANCELLED", "AdminComment": copy}
    fake.jobs["8"]["db_admin"] = copy
    now[0] = 0.0

    def tick(s: float) -> None:  # slurmctld keeps the job this time
        now[0] += s

    [res] = run_until_settled(Republisher(fake, spool), ["8"], 10.0, clock=lambda: now[0], sleep=tick)
    assert res.status is Status.DEFERRED and 10 <= now[0] < 15  # bounded by --wait; cron retries later


def test_sacct_json_takes_the_latest_record_per_id() -> None:
    doc = {
        "jobs": [
            {"job_id": 3, "state": {"current": "COMPLETED"}, "comment": {}, "time": {"submission": 20}},
            {
                "job_id": 3,
                "state": {"current": "CANCELLED"},
                "comment": {"administrator": "x"},
                "time": {"submission": 90},
            },
            {"job_id": "bad"},
        ]
    }
    jobs = parse_sacct_json_jobs(doc)
    assert list(jobs) == ["3"] and jobs["3"].state == "CANCELLED" and jobs["3"].admin_comment == "x"


def test_spool_candidates_by_age(tmp_path: Path) -> None:
    for name, age_s in (("10", 100.0), ("11", 10_000.0), ("12", 5.0)):
        (tmp_path / name).mkdir()
        os.utime(tmp_path / name, (T0 - age_s, T0 - age_s))
    (tmp_path / "sched").mkdir()
    assert spool_candidates(tmp_path, 3600.0, T0) == ["10", "12"]
    assert spool_candidates(tmp_path, None, T0) == ["11", "10", "12"]


def test_cli_lists_what_it_did_and_fails_on_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from easlurm import cli
    from easlurm.slurm import client as client_mod

    spool = spool_with(tmp_path, 7, step(7, "0"))
    fake = FakeSlurm({"7": job_state(None, "")})
    monkeypatch.setattr(client_mod, "CliSlurmClient", lambda **_: fake)
    runner = CliRunner()
    out = runner.invoke(cli.cli, ["accounting", "republish", "-j", "7", "--spool", str(spool)])
    assert out.exit_code == 0, out.output
    assert "republished" in out.output and shown(fake, "7") == ["0"]
    fake.persist = False
    fake.jobs["7"]["db_admin"] = ""
    out = runner.invoke(cli.cli, ["accounting", "republish", "-j", "7", "--spool", str(spool), "--json"])
    assert out.exit_code == 1 and json.loads(out.output)["jobs"][0]["status"] == "failed"
    bad = runner.invoke(cli.cli, ["accounting", "republish", "-j", "7;rm"])
    assert bad.exit_code != 0


def test_a_job_past_the_step_limit_is_republished_without_losing_the_steps_it_only_counts(
    tmp_path: Path,
) -> None:
    """The database's AdminComment (version 2) carries the newest steps and names the older ones, counted
    in the run's total. A step it lacks altogether is republished; the named ones are not lacking, stay
    counted after the write, and the verification sees them."""
    from easlurm.accounting.step_record import decode_admin_document, job_total

    steps = [step(7, str(i), energy_j=100.0 + i) for i in range(150)]
    spool = spool_with(tmp_path, 7, *steps)
    fake = FakeSlurm({"7": job_state(None, encode_admin_comment(steps[:149]))})
    [res] = Republisher(fake, spool).run(["7"])
    assert res.status is Status.REPUBLISHED and res.missing == ["149"]
    doc = decode_admin_document(fake.jobs["7"]["db_admin"])
    assert len(doc.steps) == 100 and len(doc.omitted) == 50
    assert doc.totals[0].total_energy_j == pytest.approx(job_total(steps).total_energy_j)  # type: ignore[union-attr]
    [again] = Republisher(fake, spool).run(["7"])
    assert again.status is Status.UP_TO_DATE and len(fake.writes) == 1


def test_a_named_step_the_spool_lacks_keeps_the_database_value(tmp_path: Path) -> None:
    """Rewriting from a spool that lost some of the named steps would drop them from the total: left as
    it is, and said."""
    steps = [step(7, str(i)) for i in range(150)]
    spool = spool_with(tmp_path, 7, *steps[1:])
    fake = FakeSlurm({"7": job_state(None, encode_admin_comment(steps[:149]))})
    [res] = Republisher(fake, spool).run(["7"])
    assert res.status is Status.UP_TO_DATE and fake.writes == []
    assert "not rewritten: its totals count step(s) 0 the spool does not hold" in res.detail
