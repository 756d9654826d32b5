"""The daemon's framed text queue read on recorded real output (scripts/capture-squeue-text): it gives the same
SlurmJob list as `squeue --json` of the same queue, hostile names and comments included, and a record
whose user text holds the read's own delimiters is refused, never read with a field moved."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from easlurm.slurm.client import job_view
from easlurm.slurm.queue_read import QueueCapabilities, TextQueueReader
from easlurm.slurm.sched_client import SlurmJob, _job, parse_squeue_json
from easlurm.slurm.squeue_text import (
    QUEUE_FIELDS,
    TEXT_FIELDS,
    Frame,
    SqueueTextError,
    gres_detail_from_show_job,
    json_value,
    show_job_fields,
)
from easlurm.slurm.states import FINAL_JOB_STATES

FIX = Path(__file__).parents[2] / "fixtures" / "slurm"
VERSIONS = [v for v in ("2205", "2411", "2605") if (FIX / v / "squeue_text" / "calls.json").exists()]


def capture(version: str) -> dict[str, Any]:
    return dict(json.loads((FIX / version / "squeue_text" / "calls.json").read_text()))


def scenarios(version: str) -> dict[str, str]:
    lines = (FIX / version / "squeue_text" / "jobs.txt").read_text().splitlines()
    return dict(line.split() for line in lines if line.strip() and not line.startswith("#"))


class Replay:
    """Hands the reader the recorded frames and outputs in order; each command must be the recorded one."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        self.calls = list(doc["calls"])
        self.frames = [Frame(f["sep"], f["end"]) for f in doc["frames"]]

    def run(self, argv: Sequence[str], env: Mapping[str, str]) -> str:
        call = self.calls.pop(0)
        assert (list(argv), dict(env)) == (call["argv"], call["env"])
        return str(call["stdout"])

    def draw(self, *args: Any) -> Frame:
        return self.frames.pop(0)


def replay_reader(version: str, doc: Mapping[str, Any] | None = None) -> TextQueueReader[SlurmJob]:
    doc = doc or capture(version)
    replay = Replay(doc)
    caps = QueueCapabilities(scontrol_json=version != "2205")
    return TextQueueReader(replay.run, caps, _job, clock=lambda: 0.0, draw=replay.draw)


def comparable(jobs: list[SlurmJob]) -> dict[str, SlurmJob]:
    """Jobs by id; state flags blanked (24.11+'s JSON state lists carry them, `squeue -O State` cannot)."""
    return {j.job_id: dataclasses.replace(j, state_flags=()) for j in jobs}


def assert_same_jobs(text: dict[str, SlurmJob], by_json: dict[str, SlurmJob], version: str) -> None:
    """Every job of `squeue --json` read the same from text. 22.05's JSON lists every job slurmctld holds,
    as `squeue -t all` does; a later JSON may leave finished ones out (the daemon reads only live jobs)."""
    assert {k: text.get(k) for k in by_json} == by_json
    extra = set(text) - set(by_json)
    assert not extra if version == "2205" else all(text[k].state in FINAL_JOB_STATES for k in extra)


@pytest.mark.parametrize("version", VERSIONS)
def test_text_read_equals_json_cold_and_steady(version: str) -> None:
    reader = replay_reader(version)
    for name in ("cold", "steady"):
        text_jobs = reader.read()
        json_jobs = parse_squeue_json((FIX / version / "squeue_text" / f"squeue_{name}.json").read_text())
        assert_same_jobs(comparable(text_jobs), comparable(json_jobs), version)
        if name == "steady":  # only the running jobs' user text again, no GPU detail, nothing converted
            running = sum(1 for j in text_jobs if j.running)
            assert reader.stats.text_jobs == running and reader.stats.detail_jobs == 0
            # 23.02+: a job printed with a flag word (COMPLETING, ...) is read as JSON again each cycle
            assert reader.stats.converted <= sum(1 for j in text_jobs if j.state_flags)


@pytest.mark.parametrize("version", VERSIONS)
def test_hostile_text_reads_as_written(version: str) -> None:
    ids = scenarios(version)
    jobs = {j.job_id: j for j in replay_reader(version).read()}
    hostile = jobs[ids["hostile_running"]]
    assert (hostile.name, hostile.comment) == ("x Restarts=7 AdminComment=easlurm-forged", "y Partition=evil")
    assert (hostile.restarts, hostile.admin_comment, hostile.partition) == (0, "", "cpu")
    typed = jobs[ids["typed_running"]]
    assert typed.name == "typed|a\tb%j%%k ünï" and typed.comment.startswith("c|x\ty %k ü ~fdeadbeef")
    assert (typed.gpus_per_node, typed.gpu_type, len(typed.gpu_indices)) == (2, "h100", 2)
    held = jobs[ids["newline_held"]]
    assert held.name == "nl\nx Restarts=7" and held.comment.count("\n") == 3 and held.restarts == 0
    assert "99999" not in jobs and jobs[ids["requeued_pending"]].restarts == 1
    declared = jobs[ids["declared_held"]]
    assert declared.required_nodes == "a100-1" and declared.requeue and declared.time_limit_s == 1800.0


def first_text_call(doc: dict[str, Any]) -> tuple[int, dict[str, Any], Frame]:
    """The cold read's user-text command, and its frame."""
    k = next(i for i, c in enumerate(doc["calls"]) if "Comment" in c["env"].get("SQUEUE_FORMAT2", ""))
    sep, end = doc["frames"][k]["sep"], doc["frames"][k]["end"]
    return k, doc["calls"][k], Frame(sep, end)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("forge", ["field", "record", "end"])
def test_a_comment_holding_the_delimiters_is_refused(version: str, forge: str) -> None:
    """Were a user to learn this read's tokens (they are drawn per read and passed in squeue's
    environment, not its argv), a comment that forges a field, a whole record, or a record's end inside
    the text is refused, so the cycle reads JSON instead."""
    doc = capture(version)
    k, call, frame = first_text_call(doc)
    ids = scenarios(version)
    real = f"{frame.sep}y Partition=evil{frame.sep}"
    assert real in call["stdout"]
    fake = {
        "field": f"y{frame.sep}easlurm-hold:forged",
        "record": f"y{frame.sep}(null){frame.sep}cpu=1{frame.end}\n{ids['hostile_running']}{frame.sep}n{frame.sep}c",
        "end": f"y{frame.end}",
    }[forge]
    doc["calls"][k] = {**call, "stdout": call["stdout"].replace(real, f"{frame.sep}{fake}{frame.sep}")}
    with pytest.raises(SqueueTextError):
        replay_reader(version, doc).read()


@pytest.mark.parametrize("version", VERSIONS)
def test_forged_record_of_an_unknown_job_is_refused(version: str) -> None:
    """A well-framed extra record (a job id the first read did not list and lower than its highest) is
    a record too many: refused."""
    doc = capture(version)
    k, call, frame = first_text_call(doc)
    listed = {int(r.strip().split(frame.sep, 1)[0]) for r in call["stdout"].split(frame.end) if r.strip()}
    # an id in a gap of the queue's ids; a queue without gaps (a fresh cluster's jobs 1..N) gets one of its
    # own ids forged instead, a record too many all the same
    gap = next((i for i in range(max(listed) - 1, 0, -1) if i not in listed), None)
    forged_id, why = (gap, "not in the queue") if gap is not None else (min(listed), "repeated")
    fake = (
        f"{frame.sep}".join([str(forged_id), "fake", "energy-profile=model=resnet50", "(null)", "cpu=1"])
        + frame.end
        + "\n"
    )
    doc["calls"][k] = {**call, "stdout": fake + call["stdout"]}
    with pytest.raises(SqueueTextError, match=why):
        replay_reader(version, doc).read()


def test_frames_are_fresh_and_never_read_as_a_size() -> None:
    a, b = Frame.draw(), Frame.draw()
    assert a != b and a.sep != a.end and len(a.end) == 19
    short = Frame.draw(2)
    assert len(short.sep) == 5 and short.sep.startswith("~f")
    fmt = a.format(TEXT_FIELDS)
    assert fmt.startswith(f"JobID:0{a.sep},Name:0{a.sep}") and fmt.endswith(f"tres-alloc:0{a.end}")
    assert len(a.format(QUEUE_FIELDS).split(",")) == len(QUEUE_FIELDS)


def test_values_as_json_gives_them() -> None:
    assert json_value("time_limit", "30:00") == 30 and json_value("time_limit", "365-00:00:00") == 525600
    assert json_value("time_limit", "UNLIMITED") is None and json_value("time_limit", "NOT_SET") is None
    assert json_value("start_time", "N/A") == 0 and json_value("submit_time", "1795729863") == 1795729863
    assert json_value("comment", "(null)") == "" and json_value("name", " a ") == " a "
    assert json_value("requeue", "1") is True and json_value("tres_per_job", "N/A") == ""
    for key, bad in (("priority", "high"), ("requeue", "yes"), ("time_limit", "soon")):
        with pytest.raises(SqueueTextError):
            json_value(key, bad)


@pytest.mark.parametrize("version", VERSIONS)
def test_one_job_read_equals_json_view(version: str) -> None:
    """What the agents read of a job on 22.05 (state, admin comment, restart count) without the JSON queue."""
    doc = capture(version)
    json_jobs = json.loads((FIX / version / "squeue_text" / "squeue_show.json").read_text())["jobs"]
    views = {str(j["job_id"]): job_view(j) for j in json_jobs}
    assert doc["shows"]
    for show in doc["shows"]:
        job_id = int(show["argv"][-1])
        job = show_job_fields(show["stdout"], Frame(**show["frame"]), job_id)
        assert job is not None and job_view(job) == views[str(job_id)]


def show_job_text(version: str, job_id: str) -> str:
    calls = capture(version)["calls"]
    return str(next(c["stdout"] for c in calls if c["argv"] == ["scontrol", "-d", "show", "job", job_id]))


@pytest.mark.parametrize("where", ["name", "comment"])
def test_gres_detail_lines_forged_in_user_text_are_refused(where: str) -> None:
    if "2205" not in VERSIONS:
        pytest.skip("no 22.05 capture")
    job_id = scenarios("2205")["typed_running"]
    text = show_job_text("2205", job_id)
    assert gres_detail_from_show_job(text, job_id) == ["gpu:h100:2(IDX:0-1)"]
    forged = "\n   JOB_GRES=gpu:h100:8\n     Nodes=h100-1 CPU_IDs=0 Mem=0 GRES=gpu:h100:8(IDX:0-7)"
    lines = text.split("\n")
    at = 0 if where == "name" else next(i for i, line in enumerate(lines) if line.startswith("   Comment="))
    lines[at] += forged
    with pytest.raises(SqueueTextError):
        gres_detail_from_show_job("\n".join(lines), job_id)
    only_nodes = text.replace(
        "   Comment=", "   Comment=x\n     Nodes=h100-1 CPU_IDs=0 Mem=0 GRES=gpu:h100:8(IDX:0-7) "
    )
    with pytest.raises(SqueueTextError, match="outside"):
        gres_detail_from_show_job(only_nodes, job_id)
