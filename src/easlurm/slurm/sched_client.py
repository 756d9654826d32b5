"""The scheduler daemon's Slurm commands (squeue/sinfo --json, sprio, sacct, scontrol update) and their parsers."""

from __future__ import annotations

import json
import logging
import re
import time
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from easlurm.errors import SlurmError
from easlurm.slurm.client import CliSlurmClient, SlurmClient, parse_scontrol_show

log = logging.getLogger(__name__)

#: squeue/sinfo states in which a node's free GPUs can be given to a job.
_USABLE_NODE_STATES = {"idle", "mixed", "allocated"}
_BAD_NODE_FLAGS = {"DRAIN", "DRAINING", "DRAINED", "DOWN", "FAIL", "FAILING", "MAINTENANCE", "NOT_RESPONDING"}
_GRES_ITEM = re.compile(r"^gpu(?::(?P<type>[A-Za-z0-9_.\-]+?))?(?::(?P<count>\d+))?(?:\(.*\))?$")
_ALLOC_GPU = re.compile(r"(?:^|,)gres/gpu=(\d+)")
_SHARD_ITEM = re.compile(
    r"^(?:gres[:/])?shard(?::[A-Za-z0-9_.\-]*?)?[:=](?P<count>\d+)(?:\((?P<detail>.*)\))?$"
)
_IDX = re.compile(r"IDX:(?P<idx>[0-9,\-]+)")
#: scontrol update keys the daemon may set (a closed list: nothing else is ever changed).
UPDATABLE_FIELDS = (
    "SiteFactor",
    "Priority",
    "StartTime",
    "AdminComment",
    "NumNodes",
    "TresPerNode",
    "Partition",
    "NodeList",
)


@dataclass(frozen=True)
class SlurmJob:
    """One job as `squeue --json` shows it; GPU counts come from the request (pending) or allocation."""

    job_id: str
    name: str
    user: str
    state: str
    reason: str
    partition: str
    nodes: str
    node_count: int
    submit_s: float
    start_s: float | None
    eligible_s: float | None
    priority: int
    gpus_per_node: int
    gpu_type: str | None
    comment: str = ""
    admin_comment: str = ""
    requeue: bool = False
    restarts: int = 0
    time_limit_s: float | None = None
    required_nodes: str = ""
    #: gres/shard per node (requested while pending, allocated while running), and the GPU indices
    #: of the job's GPUs or shards on its node (running jobs; from `gres_detail` "(IDX:0-1)")
    shards: int = 0
    gpu_indices: tuple[int, ...] = ()

    @property
    def n_gpus(self) -> int:
        return self.gpus_per_node * max(self.node_count, 1)

    @property
    def pending(self) -> bool:
        return self.state == "PENDING"

    @property
    def running(self) -> bool:
        return self.state == "RUNNING"


@dataclass(frozen=True)
class SlurmNode:
    """One node from `sinfo --json`: its GPU type and how many GPUs are in use."""

    name: str
    state: str
    flags: tuple[str, ...]
    partitions: tuple[str, ...]
    gpu_type: str | None
    total_gpus: int
    used_gpus: int
    #: gres/shard configured on the node (0: its GPUs are offered whole only)
    total_shards: int = 0

    @property
    def shards_per_gpu(self) -> int:
        return self.total_shards // self.total_gpus if self.total_gpus > 0 else 0

    @property
    def usable(self) -> bool:
        return self.state.lower() in _USABLE_NODE_STATES and not (set(self.flags) & _BAD_NODE_FLAGS)

    @property
    def free_gpus(self) -> int:
        return max(self.total_gpus - self.used_gpus, 0) if self.usable else 0


def parse_gres(text: str) -> tuple[str | None, int]:
    """(type, count) of the GPU entry in a GRES string ("gpu:h100:8(S:0)", "gres:gpu:2"); (None, 0) if none."""
    for raw in re.split(r",(?![^(]*\))", text or ""):
        item = raw.strip()
        if item.startswith("gres:"):
            item = item[5:]
        m = _GRES_ITEM.match(item)
        if not m:
            continue
        gtype, count = m.group("type"), m.group("count")
        if gtype is not None and gtype.isdigit() and count is None:
            gtype, count = None, gtype  # "gpu:2": a count, no type
        return gtype, int(count) if count is not None else 1
    return None, 0


def _gres_items(text: str) -> list[str]:
    """A GRES list split at the commas outside parentheses ("gpu:h100:2(IDX:1-2),shard:1(IDX:0)")."""
    return [i.strip() for i in re.split(r",(?![^(]*\))", text or "") if i.strip()]


def parse_idx(text: str) -> tuple[int, ...]:
    """GPU indices of a "(IDX:0-1,4)" suffix; () for "IDX:N/A" or none."""
    m = _IDX.search(text or "")
    if m is None:
        return ()
    out: list[int] = []
    for part in m.group("idx").split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            out.extend(range(int(lo), int(hi or lo) + 1))
    return tuple(out)


def parse_shards(text: str) -> tuple[int, tuple[int, ...]]:
    """(count, GPU indices) of the shard entry of a GRES string ("gres:shard:2", "shard:2(IDX:0)",
    "shard:h100:24"); (0, ()) when there is none. In `sinfo` gres_used the count is not the number of
    shards in use (22.05 prints the number of GPUs holding shards): use the indices there."""
    for item in _gres_items(text):
        m = _SHARD_ITEM.match(item)
        if m:
            return int(m.group("count")), parse_idx(m.group("detail") or "")
    return 0, ()


def _gpu_idx(text: str) -> tuple[int, ...]:
    for item in _gres_items(text):
        if item.startswith("gpu"):
            return parse_idx(item)
    return ()


def first_node(nodes: str) -> str:
    """First host of a Slurm hostlist ("h100-[1-2]" -> "h100-1")."""
    if "[" not in nodes:
        return nodes.split(",")[0]
    head, _, rest = nodes.partition("[")
    first = rest.split("]")[0].split(",")[0].split("-")[0]
    return head + first


def _epoch(value: Any) -> float | None:
    """Slurm JSON times: 0 means unset."""
    if isinstance(value, dict):  # later Slurm versions: {"set": bool, "number": N}
        value = value.get("number") if value.get("set", True) else None
    if not isinstance(value, int | float) or value <= 0:
        return None
    return float(value)


def _doc(text: str, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmError(f"{what}: not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise SlurmError(f"{what}: unexpected document")
    errors = [e for e in doc.get("errors") or () if e]
    if errors:
        raise SlurmError(f"{what}: {errors[0]}")
    return doc


def parse_squeue_json(text: str) -> list[SlurmJob]:
    """Jobs of `squeue --json` (22.05 ignores -j/-u filters with --json: callers filter)."""
    jobs = []
    for j in _doc(text, "squeue --json").get("jobs") or ():
        state = str(j.get("job_state", ""))
        detail = j.get("gres_detail") or []
        shards, indices = parse_shards(str(detail[0]) if state == "RUNNING" and detail else "")
        if not shards:
            shards = parse_shards(str(j.get("tres_per_node") or ""))[0]
        if state == "RUNNING" and detail:
            gtype, per_node = parse_gres(str(detail[0]))
            indices = indices or _gpu_idx(str(detail[0]))
        else:
            gtype, per_node = parse_gres(str(j.get("tres_per_node") or ""))
            if per_node == 0 and j.get("tres_per_job"):
                gtype, per_node = parse_gres(str(j["tres_per_job"]))
        if state == "RUNNING" and per_node == 0:
            m = _ALLOC_GPU.search(str(j.get("tres_alloc_str") or ""))
            per_node = int(m.group(1)) // max(int(j.get("node_count") or 1), 1) if m else 0
        limit = j.get("time_limit")
        if isinstance(limit, dict):
            limit = limit.get("number") if limit.get("set", True) and not limit.get("infinite") else None
        jobs.append(
            SlurmJob(
                job_id=str(j["job_id"]),
                name=str(j.get("name") or ""),
                user=str(j.get("user_name") or j.get("user_id") or ""),
                state=state,
                reason=str(j.get("state_reason") or ""),
                partition=str(j.get("partition") or ""),
                nodes=str(j.get("nodes") or ""),
                node_count=int(j.get("node_count") or 1),
                submit_s=_epoch(j.get("submit_time")) or 0.0,
                start_s=_epoch(j.get("start_time")),
                eligible_s=_epoch(j.get("eligible_time")),
                priority=int(j.get("priority") or 0) if not isinstance(j.get("priority"), dict) else 0,
                gpus_per_node=per_node,
                gpu_type=gtype,
                comment=str(j.get("comment") or ""),
                admin_comment=str(j.get("admin_comment") or ""),
                requeue=bool(j.get("requeue")),
                restarts=int(j.get("restart_cnt") or 0),
                time_limit_s=float(limit) * 60.0 if isinstance(limit, int | float) and limit > 0 else None,
                required_nodes=str(j.get("required_nodes") or ""),
                shards=shards,
                gpu_indices=indices,
            )
        )
    return jobs


def parse_sinfo_json(text: str) -> list[SlurmNode]:
    """Nodes of `sinfo --json` with their GPU GRES and GRES usage."""
    nodes = []
    for n in _doc(text, "sinfo --json").get("nodes") or ():
        gtype, total = parse_gres(str(n.get("gres") or ""))
        _, used = parse_gres(str(n.get("gres_used") or ""))
        total_shards = parse_shards(str(n.get("gres") or ""))[0]
        if total_shards:  # a GPU holding shards is not free for a whole-GPU job (and the reverse)
            busy = set(_gpu_idx(str(n.get("gres_used") or "")))
            busy |= set(parse_shards(str(n.get("gres_used") or ""))[1])
            used = max(used, len(busy))
        state = n.get("state")
        if isinstance(state, list):  # later versions: a list of flags
            state = state[0] if state else ""
        nodes.append(
            SlurmNode(
                name=str(n["name"]),
                state=str(state or "").lower(),
                flags=tuple(str(f).upper() for f in n.get("state_flags") or ()),
                partitions=tuple(str(p) for p in n.get("partitions") or ()),
                gpu_type=gtype,
                total_gpus=total,
                used_gpus=used,
                total_shards=total_shards,
            )
        )
    return nodes


def parse_sprio(text: str) -> dict[str, tuple[int, int]]:
    """`sprio -h -o "%i %Y %S"`: job id -> (priority, site factor)."""
    out: dict[str, tuple[int, int]] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 3 or not all(p.lstrip("-").isdigit() for p in parts):
            raise SlurmError(f"sprio output line {lineno}: expected 'JOBID PRIORITY SITE', got {line[:80]!r}")
        out[parts[0]] = (int(parts[1]), int(parts[2]))
    return out


#: Fields of the sacct query behind per-user GPU-seconds.
GPU_HISTORY_FIELDS = ("JobID", "User", "State", "ElapsedRaw", "AllocTRES")


def gpu_seconds_by_user(rows: Sequence[Mapping[str, str]]) -> dict[str, float]:
    """Sum of elapsed seconds x allocated GPUs per user (`sacct -X` rows; jobs without GPUs count 0)."""
    out: dict[str, float] = {}
    for row in rows:
        m = _ALLOC_GPU.search(row.get("AllocTRES", ""))
        elapsed = row.get("ElapsedRaw", "")
        user = row.get("User", "")
        if not m or not elapsed.isdigit() or not user:
            continue
        out[user] = out.get(user, 0.0) + int(m.group(1)) * float(elapsed)
    return out


class SchedClient(SlurmClient):
    """What the scheduler daemon needs on top of `SlurmClient`: the queue, nodes, priorities, history
    and the few job updates it applies. Every update is one command; failures raise SlurmError."""

    @abstractmethod
    def jobs(self) -> list[SlurmJob]:
        """All pending and running jobs (`squeue --json`)."""

    @abstractmethod
    def nodes(self) -> list[SlurmNode]:
        """All nodes (`sinfo --json`)."""

    @abstractmethod
    def site_factors(self) -> dict[str, tuple[int, int]]:
        """Eligible pending jobs' (priority, site factor) (`sprio`)."""

    @abstractmethod
    def user_gpu_s(self, since_s: float) -> dict[str, float]:
        """GPU-seconds per user of jobs since an epoch time (`sacct -a -X`)."""

    @abstractmethod
    def update_job(self, job_id: str, fields: Mapping[str, str]) -> None:
        """`scontrol update JobId=X Key=Value ...` with keys from UPDATABLE_FIELDS."""

    @abstractmethod
    def requeue(self, job_id: str) -> None:
        """`scontrol requeue X` (the job must be requeueable)."""

    @abstractmethod
    def state_save_location(self) -> str | None:
        """slurmctld's StateSaveLocation (`scontrol show config`), None when unknown."""


class CliSchedClient(CliSlurmClient, SchedClient):
    """The CLI implementation; inherits argv handling, retries, `--debug` echo and errors from CliSlurmClient."""

    def jobs(self) -> list[SlurmJob]:
        return parse_squeue_json(self.run(["squeue", "--json"], retry=True))

    def nodes(self) -> list[SlurmNode]:
        return parse_sinfo_json(self.run(["sinfo", "--json"], retry=True))

    def site_factors(self) -> dict[str, tuple[int, int]]:
        return parse_sprio(self.run(["sprio", "-h", "-o", "%i %Y %S"], retry=True))

    def user_gpu_s(self, since_s: float) -> dict[str, float]:
        start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since_s))
        rows = self.sacct(["-a", "-X", "-S", start, "-E", "now"], GPU_HISTORY_FIELDS)
        return gpu_seconds_by_user(rows)

    def update_job(self, job_id: str, fields: Mapping[str, str]) -> None:
        bad = [k for k in fields if k not in UPDATABLE_FIELDS]
        if bad or not fields:
            raise SlurmError(f"update of job {job_id}: refusing fields {bad or 'none'}")
        for key, value in fields.items():
            if any(c in value for c in "\n\r|") or not value.isascii():
                raise SlurmError(f"update of job {job_id}: bad value for {key}")
        self.run(["scontrol", "update", f"JobId={int(job_id)}", *(f"{k}={v}" for k, v in fields.items())])

    def requeue(self, job_id: str) -> None:
        self.run(["scontrol", "requeue", str(int(job_id))])

    def state_save_location(self) -> str | None:
        text = self.run(["scontrol", "show", "config"], retry=True)
        for line in text.splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "StateSaveLocation":
                return value.strip() or None
        return None


__all__ = [
    "GPU_HISTORY_FIELDS",
    "UPDATABLE_FIELDS",
    "CliSchedClient",
    "SchedClient",
    "SlurmJob",
    "SlurmNode",
    "first_node",
    "gpu_seconds_by_user",
    "parse_gres",
    "parse_idx",
    "parse_scontrol_show",
    "parse_shards",
    "parse_sinfo_json",
    "parse_sprio",
    "parse_squeue_json",
]
