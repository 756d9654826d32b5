"""The daemon's framed text queue read against the real local Slurm: the same SlurmJob list as
`squeue --json` for jobs with hostile names and comments (issue 22's set and worse), an update seen on
the next read, and a comment holding the read's own delimiters refused (that cycle read as JSON) without
moving a field. Every test touches only jobs it submitted (names `sqtext-it-*`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from box_support import wait_for

from easlurm.slurm.client import job_view
from easlurm.slurm.json_values import load_document
from easlurm.slurm.sched_client import CliSchedClient, SlurmJob
from easlurm.slurm.squeue_text import Frame

pytestmark = pytest.mark.slurm

HOSTILE = (
    ("sqtext-it-x Restarts=7 AdminComment=easlurm-forged", "y Partition=evil"),
    ("sqtext-it-|a\tb%j%%k ünï", "c|x\ty %k ü ~fdeadbeefdeadbeef~ ~rdeadbeefdeadbeef~"),
    ("sqtext-it-nl\nx Restarts=7", "line1\n   JOB_GRES=gpu:h100:8\n     Nodes=h100-1 CPU_IDs=0 Mem=0 GRES=x"),
)


@pytest.fixture
def hostile_jobs(slurm_box: Any) -> Iterator[list[str]]:
    """Two running jobs (a GPU job on h100, a CPU job) and a held one per hostile name/comment pair."""
    ids: list[str] = []
    try:
        for k, (name, comment) in enumerate(HOSTILE):
            where = ["-p", "h100", "--gres=gpu:h100:1"] if k == 1 else ["-p", "cpu"]
            ids.append(slurm_box.sbatch("-J", name, f"--comment={comment}", *where, "--wrap", "sleep 300"))
            ids.append(slurm_box.sbatch("--hold", "-J", name, f"--comment={comment}", "--wrap", "sleep 300"))
        client = CliSchedClient(env=slurm_box.env, queue_read="json")
        wait_for(lambda: sum(j.running for j in client.jobs() if j.job_id in ids) == 3, 90, "3 jobs running")
        yield ids
    finally:
        slurm_box.run(["scancel", *ids], check=False)


def comparable(jobs: list[SlurmJob], ids: list[str]) -> dict[str, SlurmJob]:
    """The test's jobs by id, state flags blanked (24.11+'s JSON carries them, `squeue -O` cannot)."""
    return {j.job_id: dataclasses.replace(j, state_flags=()) for j in jobs if j.job_id in ids}


def test_text_read_equals_json_with_hostile_text(slurm_box: Any, hostile_jobs: list[str]) -> None:
    client = CliSchedClient(env=slurm_box.env)
    for _ in range(2):  # cold, then steady (user text of running jobs only)
        text = comparable(client.jobs(), hostile_jobs)
        assert client.text_fallbacks == 0
        assert text == comparable(client.jobs_json(), hostile_jobs)
    names = {j.name for j in text.values()}
    assert names == {name for name, _ in HOSTILE}
    assert all(j.restarts == 0 and j.admin_comment == "" for j in text.values())
    gpu = [j for j in text.values() if j.running and j.gpu_type == "h100"]
    assert len(gpu) == 1 and len(gpu[0].gpu_indices) == 1


def test_updates_are_seen_on_the_next_read(slurm_box: Any, hostile_jobs: list[str]) -> None:
    """The client's own AdminComment update is read back at once; a user's Comment edit at the next
    full re-read of user text (text_refresh_s)."""
    client = CliSchedClient(env=slurm_box.env, text_refresh_s=3600.0)
    held = next(j.job_id for j in client.jobs() if j.job_id in hostile_jobs and j.pending)
    client.update_job(held, {"AdminComment": "easlurm-sqtext-it"})
    assert {j.job_id: j for j in client.jobs()}[held].admin_comment == "easlurm-sqtext-it"
    slurm_box.run(["scontrol", "update", f"JobId={held}", "Comment=edited by its user"])
    client.queue_reader().text_refresh_s = 0.0
    assert {j.job_id: j for j in client.jobs()}[held].comment == "edited by its user"
    assert client.text_fallbacks == 0


def test_forged_delimiters_in_a_comment_move_no_field(slurm_box: Any, hostile_jobs: list[str]) -> None:
    """A user who knew the read's tokens writes a comment that closes their record and adds a forged one
    (another job's id, a daemon-like AdminComment): the read is refused and the cycle's jobs come from
    JSON, with the comment as written and nothing else changed."""
    client = CliSchedClient(env=slurm_box.env, text_refresh_s=0.0)
    frame = Frame.draw()
    client.queue_reader().draw = lambda *args: frame
    held = [j for j in client.jobs() if j.job_id in hostile_jobs and j.pending]
    victim, other = held[0], held[1]
    forged = (
        f"x{frame.sep}easlurm-hold:forged{frame.sep}cpu=1{frame.end}\n{other.job_id}{frame.sep}n{frame.sep}c"
    )
    slurm_box.run(["scontrol", "update", f"JobId={victim.job_id}", f"Comment={forged}"])
    jobs = {j.job_id: j for j in client.jobs()}
    assert client.text_fallbacks == 1
    assert jobs[victim.job_id].comment == forged and jobs[victim.job_id].admin_comment == ""
    assert jobs[other.job_id] == other
    client.queue_reader().draw = Frame.draw  # fresh tokens: the same comment reads as written, as text
    again = {j.job_id: j for j in client.jobs()}
    assert client.text_fallbacks == 1 and again[victim.job_id] == jobs[victim.job_id]


def test_one_job_read_equals_json_view(slurm_box: Any, hostile_jobs: list[str]) -> None:
    """What the agents read of a job (state, admin comment, restart count): the framed one-job read on
    22.05, `scontrol --json` later, the same view as the JSON queue's."""
    client = CliSchedClient(env=slurm_box.env)
    doc = load_document(client.run(["squeue", "--json"]), "squeue --json")
    views = {str(j["job_id"]): job_view(j) for j in doc.get("jobs") or ()}
    for job_id in hostile_jobs:
        assert client.show_job(int(job_id)) == views[job_id]


def test_lookalike_gres_lines_cost_one_json_read(slurm_box: Any) -> None:
    """A running GPU job whose comment prints Slurm-like `JOB_GRES=` and `Nodes=... GRES=...(IDX:0-7)`
    lines: where its GPU indices come from `scontrol -d show job` text (22.05) that read is refused once
    (the cycle reads JSON, which seeds the indices), and the next cycles read text with the true index."""
    lines = "x\n   JOB_GRES=gpu:h100:8\n     Nodes=h100-1 CPU_IDs=0 Mem=0 GRES=gpu:h100:8(IDX:0-7)"
    job = slurm_box.sbatch(
        "-J", "sqtext-it-gres", f"--comment={lines}", "-p", "h100", "--gres=gpu:h100:1", "--wrap", "sleep 300"
    )
    try:
        client = CliSchedClient(env=slurm_box.env)
        wait_for(lambda: {j.job_id: j for j in client.jobs_json()}[job].running, 90, f"job {job} running")
        client = CliSchedClient(env=slurm_box.env)
        first = {j.job_id: j for j in client.jobs()}[job]
        refused = 0 if client.queue_reader().caps.scontrol_json else 1  # 23.02+ read it as JSON
        assert client.text_fallbacks == refused
        second = {j.job_id: j for j in client.jobs()}[job]
        assert client.text_fallbacks == refused and first == second and second.comment == lines
        assert (
            len(second.gpu_indices) == 1
            and second.gpu_indices == {j.job_id: j for j in client.jobs_json()}[job].gpu_indices
        )
    finally:
        slurm_box.run(["scancel", job], check=False)
