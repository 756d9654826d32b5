"""`squeue -O` text read without JSON: fields framed by delimiters drawn per read, so user text cannot move a field.

A job name, comment or admin comment may hold any character Slurm accepts, newlines, `|` and tabs
included (22.05 accepts all of them). Each read draws two fresh 64-bit tokens, one ends every field
and one every record (`-O Field:0<sep>,...,Last:0<end>`; size 0 prints the whole value), and hands the
format to squeue through its environment (SQUEUE_FORMAT2), which other users cannot read (argv they
can). A read is accepted only when every record has exactly the expected number of fields, every job
id is a number seen once and the output ends with a record's end; anything else raises
SqueueTextError, and the caller reads that cycle's queue as JSON instead.
Values are turned into the keys and values of `squeue --json` (22.05's plain form), so that
`sched_client._job` makes the same SlurmJob from either read.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from easlurm.errors import SlurmError
from easlurm.slurm.times import parse_timelimit_s

#: The fields of the every-cycle read (no user text): `squeue --json` key -> `squeue -O` field.
QUEUE_FIELDS: tuple[tuple[str, str], ...] = (
    ("job_id", "JobID"),
    ("user_name", "UserName"),
    ("job_state", "State"),
    ("state_reason", "Reason"),
    ("partition", "Partition"),
    ("nodes", "NodeList"),
    ("node_count", "NumNodes"),
    ("submit_time", "SubmitTime"),
    ("start_time", "StartTime"),
    ("eligible_time", "EligibleTime"),
    ("priority", "PriorityLong"),
    ("tres_per_node", "tres-per-node"),
    ("tres_per_job", "tres-per-job"),
    ("requeue", "Requeue"),
    ("restart_cnt", "RestartCnt"),
    ("time_limit", "TimeLimit"),
    ("required_nodes", "ReqNodes"),
)
#: The user text (read for new jobs, running jobs and jobs updated since; see queue_read), and the
#: allocated TRES (long, read only where it counts: a running job's GPUs when its request names none).
TEXT_FIELDS: tuple[tuple[str, str], ...] = (
    ("job_id", "JobID"),
    ("name", "Name"),
    ("comment", "Comment"),
    ("admin_comment", "admin_comment"),
    ("tres_alloc_str", "tres-alloc"),
)
#: One job's view for the agents (client.job_view's fields) on a Slurm without `scontrol --json`.
SHOW_FIELDS: tuple[tuple[str, str], ...] = (
    ("job_id", "JobID"),
    ("job_state", "State"),
    ("admin_comment", "admin_comment"),
    ("restart_cnt", "RestartCnt"),
)
#: Hex digits of the field end in the reads without user text (QUEUE_FIELDS, SHOW_FIELDS' are operator text).
SHORT_SEP_HEX = 2
#: Epoch seconds for every time squeue prints (no time zone, no locale).
TIME_ENV = {"SLURM_TIME_FORMAT": "%s"}
_EMPTY = frozenset({"", "(null)", "N/A"})
_TIMES = frozenset({"submit_time", "start_time", "eligible_time"})
_INTS = frozenset({"node_count", "priority", "restart_cnt"})
_FREE = frozenset({"name", "comment", "admin_comment"})
_JOB_ID = re.compile(r"^[0-9]+$")


class SqueueTextError(SlurmError):
    """A text read that does not add up (a field or record too many or missing, an unknown value)."""


@dataclass(frozen=True)
class Frame:
    """The delimiters of one read: `sep` ends each field but the last, `end` ends each record."""

    sep: str
    end: str

    @classmethod
    def draw(cls, sep_hex: int = 16) -> Frame:
        """Fresh tokens (a record's end: 64 bits; a field's end: `sep_hex` hex digits); they start with `~`
        so that squeue never reads a digit of them as a field size. A read without user text (QUEUE_FIELDS)
        may take a short field end: it is then only a second check, and it is printed 17 times per job."""
        token = secrets.token_hex(8)
        return cls(sep=f"~f{token[:sep_hex]}~", end=f"~r{token}~")

    def format(self, fields: Sequence[tuple[str, str]]) -> str:
        """The `-O` format of these fields (size 0: whole values)."""
        names = [name for _, name in fields]
        return ",".join(f"{n}:0{self.end if i == len(names) - 1 else self.sep}" for i, n in enumerate(names))

    def env(self, fields: Sequence[tuple[str, str]]) -> dict[str, str]:
        """The environment that makes `squeue -h` print these fields in this frame."""
        return {"SQUEUE_FORMAT2": self.format(fields), **TIME_ENV}

    def records(self, text: str, fields: Sequence[tuple[str, str]], what: str) -> list[list[str]]:
        """The records of one read, each its fields' texts in `fields` order (the job id first);
        SqueueTextError where anything does not add up."""
        ending = self.end + "\n"
        if text and not text.endswith(ending):
            raise SqueueTextError(f"{what}: output does not end with a record's end ({text[-40:]!r})")
        if fields[0][0] != "job_id":
            raise SqueueTextError(f"{what}: the job id must be the first field")
        chunks = text.split(ending)[:-1] if text else []
        rows = [chunk.split(self.sep) for chunk in chunks]
        width = len(fields)
        for n, (chunk, values) in enumerate(zip(chunks, rows, strict=True), 1):
            if len(values) != width or self.end in chunk:
                raise SqueueTextError(f"{what}: record {n} has {len(values)} fields, expected {width}")
            if not _JOB_ID.match(values[0]):
                raise SqueueTextError(f"{what}: record {n}: bad job id {values[0][:40]!r}")
        if len({values[0] for values in rows}) != len(rows):
            raise SqueueTextError(f"{what}: a job id repeated in {len(rows)} records")
        return rows


def json_value(key: str, text: str) -> Any:
    """One text field as `squeue --json` (22.05) gives it; SqueueTextError for a value it cannot read."""
    if key in _FREE:
        return "" if text == "(null)" else text
    value = text.strip()
    if key in _TIMES:
        if value in _EMPTY or value == "Unknown":
            return 0
        return _int(key, value)
    if key in _INTS:
        return _int(key, value)
    if key == "requeue":
        if value not in ("0", "1"):
            raise SqueueTextError(f"squeue text: Requeue {value[:40]!r} is not 0 or 1")
        return value == "1"
    if key == "time_limit":
        if value.upper() == "NOT_SET":  # squeue's word for a limit not yet established
            return None
        try:
            seconds = parse_timelimit_s(value)
        except ValueError as exc:
            raise SqueueTextError(f"squeue text: TimeLimit {value[:40]!r}: {exc}") from None
        return None if seconds is None else int(seconds // 60)
    return "" if value in _EMPTY else value


def _int(key: str, value: str) -> int:
    if not value.lstrip("-").isdigit():
        raise SqueueTextError(f"squeue text: {key} {value[:40]!r} is not a number")
    return int(value)


def json_job(fields: Sequence[tuple[str, str]], values: Sequence[str]) -> dict[str, Any]:
    """One record -> the job object of `squeue --json` for the keys read (others are left out)."""
    return {key: json_value(key, text) for (key, _), text in zip(fields, values, strict=True)}


def show_job_argv(job_id: int) -> list[str]:
    """The command of one job's SHOW_FIELDS read (with `Frame.env(SHOW_FIELDS)`)."""
    return ["squeue", "-h", "-t", "all", "-j", str(int(job_id))]


def show_job_fields(text: str, frame: Frame, job_id: int) -> dict[str, Any] | None:
    """One job's SHOW_FIELDS as `squeue --json` values from its framed read; None when it is not listed."""
    rows = [r for r in frame.records(text, SHOW_FIELDS, "squeue -j") if r[0] == str(int(job_id))]
    return json_job(SHOW_FIELDS, rows[0]) if rows else None


#: `scontrol -d show job` (22.05): the job's GRES line and the per-node allocation lines under it.
_JOB_GRES = "   JOB_GRES="
_NODE_LINE = re.compile(r"^     Nodes=(?P<nodes>\S+) CPU_IDs=\S* Mem=\S+ GRES=(?P<gres>\S*)$")


def gres_detail_from_show_job(text: str, job_id: str) -> list[str]:
    """`gres_detail` (per-node allocation, `gpu:h100:2(IDX:0-1)`) of one job from `scontrol -d show job`
    text, where there is no `scontrol --json` (22.05). A name or comment with newlines can print lines
    that look like Slurm's, so the read is accepted only when the text has one `JOB_GRES=` line and every
    `     Nodes=` line stands in the block right under it; else SqueueTextError."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith(f"JobId={job_id} "):
        raise SqueueTextError(f"scontrol -d show job {job_id}: not this job's record")
    starts = [i for i, line in enumerate(lines) if line.startswith(_JOB_GRES)]
    nodes_lines = [i for i, line in enumerate(lines) if line.startswith("     Nodes=")]
    if not starts:
        if nodes_lines:
            raise SqueueTextError(f"scontrol -d show job {job_id}: node lines without JOB_GRES")
        return []
    if len(starts) != 1:
        raise SqueueTextError(f"scontrol -d show job {job_id}: {len(starts)} JOB_GRES lines")
    block = nodes_lines == list(range(starts[0] + 1, starts[0] + 1 + len(nodes_lines)))
    if not block:
        raise SqueueTextError(f"scontrol -d show job {job_id}: node lines outside the JOB_GRES block")
    details = []
    for i in nodes_lines:
        m = _NODE_LINE.match(lines[i])
        if m is None:
            raise SqueueTextError(f"scontrol -d show job {job_id}: unreadable node line {lines[i][:80]!r}")
        details.append(m.group("gres"))
    return details


__all__ = [
    "QUEUE_FIELDS",
    "SHORT_SEP_HEX",
    "SHOW_FIELDS",
    "TEXT_FIELDS",
    "TIME_ENV",
    "Frame",
    "SqueueTextError",
    "gres_detail_from_show_job",
    "json_job",
    "json_value",
    "show_job_argv",
    "show_job_fields",
]
