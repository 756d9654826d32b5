"""sacct's jobs as one neutral record, read from `sacct -P` rows or `sacct --json` jobs of any version.

Every reader of accounting data (the replay's trace readers, `easlurm report`, `seff`, republish) turns
sacct's output into `SacctJob` here: times in epoch seconds under the one zone rule of
`easlurm.slurm.times`, TRES as maps (`{"cpu": 8.0, "mem": bytes, "gres/gpu": 4.0, "gres/gpu:a100": 4.0}`),
GPU counts and types through `easlurm.slurm.gres`, JSON values of 22.05 (v0.0.38), 24.11 (v0.0.42) and
26.05 (v0.0.45) through `easlurm.slurm.json_values`. A value that cannot be read raises
`SacctValueError` ("field Submit: ...") when reading strictly; a tolerant read leaves it unknown (None).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import Any, TypeVar

from easlurm.slurm.gres import gpus_from_tres, gpus_of_gres, parse_tres
from easlurm.slurm.json_values import MISSING, dig, epoch, job_state, num, text
from easlurm.slurm.times import parse_elapsed_s, parse_timelimit_s, parse_timestamp_s

#: sacct fields that `job_of_row` reads: ask for these (`--format`) to get every field of a SacctJob.
FIELDS = (
    "JobIDRaw",
    "JobID",
    "JobName",
    "User",
    "Account",
    "Partition",
    "QOS",
    "State",
    "ExitCode",
    "Submit",
    "Start",
    "End",
    "ElapsedRaw",
    "TimelimitRaw",
    "NNodes",
    "NCPUS",
    "NodeList",
    "AllocTRES",
    "ReqTRES",
    "Comment",
    "AdminComment",
)
#: sacct's JobID: `123`, array task `123_4` or pending range `123_[1-9%2]`, het part `123+1`, step `123.batch`.
JOBID = re.compile(
    r"^(?P<base>\d+)(?:_(?P<task>\d+|\[[^\]]*\]))?(?:\+(?P<het>\d+))?(?:\.(?P<step>[A-Za-z0-9_+-]+))?$"
)
#: GRES columns of old dumps that name a job's GPUs where its TRES do not.
_GRES_COLUMNS = ("allocgres", "reqgres", "trespernode", "tresperjob")
_T = TypeVar("_T")


class SacctValueError(ValueError):
    """A sacct value that cannot be read; the message names the field as sacct does."""


@dataclass(frozen=True)
class SacctJob:
    """One sacct record (a job, an array task, a het part or a step row); None where sacct does not say.

    `job_id` is the job's id as sacct keys it (a -P row: the JobID before `_`, `+` or `.`; JSON: the
    record's own id); `array_job_id`/`array_task_id` (or `array_tasks`, a pending range) and
    `het_job_id`/`het_offset` place it in its array or heterogeneous job."""

    job_id: str
    step: str | None = None
    array_job_id: str | None = None
    array_task_id: int | None = None
    array_tasks: str | None = None
    het_job_id: str | None = None
    het_offset: int | None = None
    name: str | None = None
    user: str | None = None
    account: str | None = None
    partition: str | None = None
    qos: str | None = None
    #: base state, upper case (COMPLETED, CANCELLED, ...); `cancelled_by` from "CANCELLED by N"
    state: str | None = None
    cancelled_by: str | None = None
    exit_code: int | None = None
    submit_s: float | None = None
    start_s: float | None = None
    end_s: float | None = None
    elapsed_s: float | None = None
    timelimit_s: float | None = None
    n_nodes: int | None = None
    n_cpus: int | None = None
    nodelist: str | None = None
    #: False when sacct says no node was assigned ("None assigned"), None when it does not say
    allocated: bool | None = None
    alloc_tres: dict[str, float] = field(default_factory=dict)
    req_tres: dict[str, float] = field(default_factory=dict)
    #: GPUs the job held (AllocTRES), else asked for (ReqTRES, then old dumps' GRES columns), and their type
    n_gpus: int = 0
    gpu_type: str | None = None
    comment: str | None = None
    admin_comment: str | None = None
    #: step names of a `--json` job ("batch", "0", ...)
    steps: tuple[str, ...] = ()

    @property
    def alloc_gpus(self) -> tuple[int, str | None]:
        """(GPUs, type) of the allocation alone (AllocTRES)."""
        return gpus_from_tres(self.alloc_tres)

    @property
    def shards(self) -> int:
        """gres/shard of the allocation."""
        return round(self.alloc_tres.get("gres/shard", 0.0))


def expand_array(spec: str) -> list[int]:
    """A pending array's task range '[1-3,7,9-11%2]' -> [1, 2, 3, 7, 9, 10, 11] (the %N throttle is dropped)."""
    body = spec.strip("[]").split("%")[0]
    tasks: list[int] = []
    for part in body.split(","):
        lo, sep, hi = part.partition("-")
        step = 1
        if ":" in hi:
            hi, _, st = hi.partition(":")
            step = int(st)
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise SacctValueError(f"field JobID: bad array range {spec!r}")
        tasks.extend(range(int(lo), int(hi if sep else lo) + 1, step))
    return tasks


def _count(value: str) -> int | None:
    return int(value) if value else None


class _Row:
    """A `sacct -P` row read by lower-case field name; an unreadable field raises or is unknown (None)."""

    #: the field's text, stripped; None when the row has no such column
    get: Callable[[str], str | None]

    def __init__(self, row: Mapping[str, str], strict: bool, names: Mapping[str, str] | None = None) -> None:
        """`names` given: `row` is already keyed by lower-case name with its values stripped, and `names`
        maps each name to the name as the dump writes it (for messages); `get` is then the dict's own."""
        if names is None:
            self.names: Mapping[str, str] = {k.lower(): k for k in row}
            self.low: Mapping[str, str] = {k.lower(): v for k, v in row.items()}
            self.get = self._stripped
        else:
            self.names, self.low = names, row
            self.get = row.get
        self.strict = strict

    def __contains__(self, name: str) -> bool:
        return name in self.low

    def _stripped(self, name: str) -> str | None:
        value = self.low.get(name)
        return None if value is None else value.strip()

    def read(self, name: str, fn: Callable[..., _T], *args: Any) -> _T | None:
        """`fn(text, *args)`; a ValueError names the field as the row does (strict) or gives None."""
        try:
            return fn(self.get(name) or "", *args)
        except ValueError as exc:
            if self.strict:
                raise SacctValueError(f"field {self.names.get(name, name)}: {exc}") from None
            return None


def job_of_row(row: Mapping[str, str], *, strict: bool = True, tz: tzinfo | None = None) -> SacctJob:
    """One `sacct -P` row (field name -> text, names in any case) as a SacctJob. Naive timestamps are read
    in `tz` (default the process's zone: see easlurm.slurm.times). `strict` raises SacctValueError on
    an unreadable field; otherwise that field is left unknown."""
    return _job_of(_Row(row, strict), tz)


def job_of_fields(
    low: Mapping[str, str], names: Mapping[str, str], *, strict: bool = True, tz: tzinfo | None = None
) -> SacctJob:
    """`job_of_row` of a row already keyed by lower-case field name, its values stripped (`names`:
    lower-case name -> as the dump writes it, for messages): a reader of a whole dump builds one dict per
    row instead of three, and strips each field once."""
    return _job_of(_Row(low, strict, names), tz)


def _job_of(r: _Row, tz: tzinfo | None) -> SacctJob:
    m, display = _row_ids(r)
    base, task, het = display.group("base"), display.group("task"), display.group("het")
    submit_s = r.read("submit", parse_timestamp_s, tz)
    start_s = r.read("start", parse_timestamp_s, tz)
    end_s = r.read("end", parse_timestamp_s, tz)
    elapsed, limit = _row_durations(r)
    alloc, req, n_gpus, gpu_type = _row_gpus(r)
    state, cancelled_by, exit_code, allocated = _row_state(r)
    n_cpus = _row_cpus(r)  # before NNodes, so that a row with both unreadable names NCPUS first
    return SacctJob(
        job_id=m.group("base"),
        step=m.group("step"),
        array_job_id=base if task is not None else None,
        array_task_id=int(task) if task is not None and task.isdigit() else None,
        array_tasks=task if task is not None and task.startswith("[") else None,
        het_job_id=base if het is not None else None,
        het_offset=int(het) if het is not None else None,
        name=r.get("jobname") or None,
        user=r.get("user") or r.get("uid") or None,
        account=r.get("account") or None,
        partition=r.get("partition") or None,
        qos=r.get("qos") or None,
        state=state,
        cancelled_by=cancelled_by,
        exit_code=exit_code,
        submit_s=submit_s,
        start_s=start_s,
        end_s=end_s,
        elapsed_s=elapsed,
        timelimit_s=limit,
        n_nodes=r.read("nnodes", _count),
        n_cpus=n_cpus,
        nodelist=r.get("nodelist"),
        allocated=allocated,
        alloc_tres=alloc,
        req_tres=req,
        n_gpus=n_gpus,
        gpu_type=gpu_type,
        comment=r.get("comment") or None,
        admin_comment=r.get("admincomment") or None,
    )


def _row_ids(r: _Row) -> tuple[re.Match[str], re.Match[str]]:
    """(the record's own id, the id that names its array or het job): JobIDRaw is the record's own id;
    JobID names its array (`123_4`) or het job (`123+1`). An unreadable id raises even when tolerant."""
    raw_id = r.get("jobidraw") or r.get("jobid") or ""
    m = JOBID.match(raw_id)
    if m is None:
        raise SacctValueError(
            f"field {r.names.get('jobidraw', r.names.get('jobid', 'JobID'))}: cannot parse {raw_id!r}"
        )
    return m, JOBID.match(r.get("jobid") or "") or m


def _row_state(r: _Row) -> tuple[str | None, str | None, int | None, bool | None]:
    """(state, cancelled by, exit code, allocated)."""
    state, by = _row_state_word(r)
    return state, by, _row_exit_code(r), _row_allocated(r, state)


def _row_state_word(r: _Row) -> tuple[str | None, str | None]:
    """(state, cancelled by): State `CANCELLED by 1001` -> ("CANCELLED", "1001")."""
    state_word, _, by = (r.get("state") or "").partition(" by ")
    return state_word.strip().upper().rstrip("+") or None, by.strip() or None


def _row_cpus(r: _Row) -> int | None:
    """NCPUS, else AllocCPUS."""
    n_cpus = r.read("ncpus", _count) if "ncpus" in r else None
    if n_cpus is None and "alloccpus" in r:
        n_cpus = r.read("alloccpus", _count)
    return n_cpus


def _row_durations(r: _Row) -> tuple[float | None, float | None]:
    """(elapsed, time limit) in seconds, from the raw columns where the row has them."""
    if r.get("elapsedraw"):
        elapsed = r.read("elapsedraw", float)
    else:
        elapsed = r.read("elapsed", parse_elapsed_s)
    if "timelimitraw" in r:
        limit = r.read("timelimitraw", parse_timelimit_s, True)
    else:
        limit = r.read("timelimit", parse_timelimit_s)
    return elapsed, limit


def _row_gpus(r: _Row) -> tuple[dict[str, float], dict[str, float], int, str | None]:
    """(AllocTRES, ReqTRES, GPUs, GPU type): the allocation's GPUs, else the request's, else those of an
    old dump's GRES columns."""
    alloc = r.read("alloctres", parse_tres) or {}
    n_gpus, gpu_type = gpus_from_tres(alloc)
    req: dict[str, float] = {}
    if r.get("reqtres"):
        if n_gpus:
            try:  # the request is read only where it names the GPUs, so only then is it an error
                req = parse_tres(r.get("reqtres"))
            except ValueError:
                req = {}
        else:
            req = r.read("reqtres", parse_tres) or {}
            n_gpus, gpu_type = gpus_from_tres(req)
    for col in _GRES_COLUMNS:
        if n_gpus:
            break
        if r.get(col):
            n_gpus, gpu_type = r.read(col, gpus_of_gres, True) or (0, None)
    return alloc, req, n_gpus, gpu_type


def _row_exit_code(r: _Row) -> int | None:
    """The job's return code (ExitCode `2:0` -> 2)."""
    code = (r.get("exitcode") or "").split(":")[0]
    if not code:
        return None
    if code.lstrip("-").isdigit():
        return int(code)
    if r.strict:
        raise SacctValueError(
            f"field {r.names.get('exitcode', 'ExitCode')}: cannot parse {r.get('exitcode')!r}"
        )
    return None


def _row_allocated(r: _Row, state: str | None) -> bool | None:
    """False when sacct says no node was assigned: NodeList `None assigned`, or a cancelled job's empty
    AllocTRES where the row has no NodeList; None when it does not say."""
    if "nodelist" in r:
        return (r.get("nodelist") or "").lower() not in {"none assigned", "(null)"}
    if "alloctres" in r and not r.get("alloctres") and state == "CANCELLED":
        return False
    return None


def json_tres(entries: Any) -> dict[str, float]:
    """[{"type": "gres", "name": "gpu:a100", "count": 4}, {"type": "mem", "count": 64000}, ...] ->
    {"gres/gpu:a100": 4.0, "mem": bytes, ...}: the map `parse_tres` gives for the same TRES (memory in MiB
    -> bytes)."""
    out: dict[str, float] = {}
    if not isinstance(entries, list):
        return out
    for e in entries:
        if not isinstance(e, dict):
            continue
        kind, name, count = e.get("type"), e.get("name"), num(e.get("count"))
        if not kind or count is None:
            continue
        key = f"{kind}/{name}" if name else str(kind)
        out[key] = count * 1024**2 if key == "mem" else count
    return out


def _step_name(step: Any) -> str | None:
    """A --json step's name: "batch" from 22.05's `id: "batch"` and 24.11+'s `id: "1.batch"`."""
    sid = text(dig(step, "step.id"))
    if sid is None:
        return None
    return sid.rpartition(".")[2] if "." in sid else sid


def job_of_json(job: Mapping[str, Any]) -> SacctJob:
    """One job object of `sacct --json` (any data_parser version) as a SacctJob; SacctValueError without a
    job id."""
    job_id = num(job.get("job_id", MISSING))
    if job_id is None:
        raise SacctValueError(f"field job_id: missing or not a number ({job.get('job_id')!r})")
    limit_min = num(dig(job, "time.limit"))
    alloc = json_tres(dig(job, "tres.allocated"))
    req = json_tres(dig(job, "tres.requested"))
    n_gpus, gpu_type = gpus_from_tres(alloc)
    if not n_gpus:
        n_gpus, gpu_type = gpus_from_tres(req)
    exit_code = num(dig(job, "exit_code.return_code"))
    admin = text(dig(job, "comment.administrator"))
    if admin is None:
        admin = text(job.get("admin_comment", MISSING))
    user_comment = text(dig(job, "comment.job"))
    if user_comment is None:
        user_comment = text(job.get("comment", MISSING)) if not isinstance(job.get("comment"), dict) else None
    cpus = num(dig(job, "required.CPUs"))
    nodes = num(job.get("allocation_nodes", MISSING))
    nodelist = text(job.get("nodes", MISSING))
    array_job = num(dig(job, "array.job_id"))
    task_id = num(dig(job, "array.task_id")) if array_job else None
    het_job = num(dig(job, "het.job_id"))
    het_offset = num(dig(job, "het.job_offset")) if het_job else None
    steps = job.get("steps")
    return SacctJob(
        job_id=str(int(job_id)),
        array_job_id=str(int(array_job)) if array_job else None,
        array_task_id=int(task_id) if task_id is not None else None,
        array_tasks=(text(dig(job, "array.task")) or None) if array_job and task_id is None else None,
        het_job_id=str(int(het_job)) if het_job else None,
        het_offset=int(het_offset) if het_offset is not None else None,
        name=text(job.get("name", MISSING)) or None,
        user=text(job.get("user", MISSING)) or None,
        account=text(job.get("account", MISSING)) or None,
        partition=text(job.get("partition", MISSING)) or None,
        qos=text(job.get("qos", MISSING)) or None,
        state=(job_state(dig(job, "state.current"))[0] or "").upper() or None,
        cancelled_by=text(job.get("kill_request_user", MISSING)) or None,
        exit_code=int(exit_code) if exit_code is not None else None,
        submit_s=epoch(dig(job, "time.submission")),
        start_s=epoch(dig(job, "time.start")),
        end_s=epoch(dig(job, "time.end")),
        elapsed_s=num(dig(job, "time.elapsed")),
        timelimit_s=limit_min * 60.0 if limit_min is not None else None,
        n_nodes=int(nodes) if nodes else None,
        n_cpus=int(cpus) if cpus else None,
        nodelist=nodelist,
        allocated=None if nodelist is None else nodelist.lower() not in {"none assigned", ""},
        alloc_tres=alloc,
        req_tres=req,
        n_gpus=n_gpus,
        gpu_type=gpu_type,
        comment=user_comment or None,
        admin_comment=admin,
        steps=tuple(n for n in (_step_name(s) for s in steps) if n) if isinstance(steps, list) else (),
    )


def jobs_of_json(doc: Mapping[str, Any]) -> list[SacctJob]:
    """Every job of a `sacct --json` document that has a job id (others are left out)."""
    out = []
    for job in doc.get("jobs") or ():
        if isinstance(job, dict) and num(job.get("job_id")) is not None:
            out.append(job_of_json(job))
    return out


__all__ = [
    "FIELDS",
    "JOBID",
    "SacctJob",
    "SacctValueError",
    "expand_array",
    "job_of_fields",
    "job_of_json",
    "job_of_row",
    "jobs_of_json",
    "json_tres",
]
