"""The scheduler daemon's Slurm commands (squeue/sinfo --json, sprio, sacct, scontrol update) and their parsers."""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from easlurm.errors import SlurmError
from easlurm.slurm.client import SCONTROL_JSON_SINCE, CliSlurmClient, SlurmClient
from easlurm.slurm.gres import gpu_indices, gpus_of_gres, gpus_of_tres, shards_of_gres
from easlurm.slurm.job_updates import Hold, Order, Placement, Release
from easlurm.slurm.json_values import (
    NODE_BASE_STATES,
    epoch,
    integer,
    job_state,
    load_document,
    num,
    split_state,
)
from easlurm.slurm.queue_read import TEXT_REFRESH_S, QueueCapabilities, TextQueueReader
from easlurm.slurm.times import format_timestamp

log = logging.getLogger(__name__)

#: Node base states in which a node's free GPUs can be given to a job.
_USABLE_NODE_STATES = {"IDLE", "MIXED", "ALLOCATED"}
_BAD_NODE_FLAGS = {"DRAIN", "DRAINING", "DRAINED", "DOWN", "FAIL", "FAILING", "MAINTENANCE", "NOT_RESPONDING"}
#: Slurm's power saving flags, as sinfo marks them (`idle#`, `idle%`, `idle~`), and the snapshot's power
#: state (priority.snapshot.NODE_POWER_STATES); the first that a node carries wins. POWER_DOWN (`!`:
#: a power-down asked for, not yet begun) leaves the node on.
_POWER_FLAGS = (("POWERING_UP", "powering_up"), ("POWERING_DOWN", "powering_down"), ("POWERED_DOWN", "off"))
#: The first Slurm release verified to move a pending job to another GPU type (22.05.8 does not).
RETYPE_PENDING_SINCE = (24, 11)
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
    #: base state (PENDING, RUNNING, ...); `state_flags` holds the rest of 24.11+'s state list
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
    state_flags: tuple[str, ...] = ()
    #: the GRES request as Slurm shows it (`gres:gpu:2`, `gres/gpu:h100:1`): its prefix and whether it
    #: names a type decide which updates Slurm accepts
    gres_request: str = ""

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
    """One node (`sinfo --json` on 22.05, `scontrol --json show nodes` later): its GPU type and GPU use."""

    name: str
    #: base state, upper case (IDLE, MIXED, ALLOCATED, DOWN, ...); flags such as DRAIN apart
    state: str
    flags: tuple[str, ...]
    partitions: tuple[str, ...]
    gpu_type: str | None
    total_gpus: int
    used_gpus: int
    #: gres/shard configured on the node (0: its GPUs are offered whole only)
    total_shards: int = 0
    #: when the node last ran a job (Slurm's LastBusyTime, epoch s; None: unknown)
    last_busy_s: float | None = None

    @property
    def power_state(self) -> str:
        """ "on", "powering_up", "powering_down" or "off", from Slurm's power saving flags."""
        return next((state for flag, state in _POWER_FLAGS if flag in self.flags), "on")

    @property
    def shards_per_gpu(self) -> int:
        return self.total_shards // self.total_gpus if self.total_gpus > 0 else 0

    @property
    def usable(self) -> bool:
        return self.state.upper() in _USABLE_NODE_STATES and not (set(self.flags) & _BAD_NODE_FLAGS)

    @property
    def free_gpus(self) -> int:
        return max(self.total_gpus - self.used_gpus, 0) if self.usable else 0


def parse_squeue_json(text: str) -> list[SlurmJob]:
    """Jobs of `squeue --json` in any version (22.05 ignores -j/-u filters with --json: callers filter)."""
    return [_job(j) for j in load_document(text, "squeue --json").get("jobs") or ()]


def _job(j: dict[str, Any]) -> SlurmJob:
    state, flags = job_state(j.get("job_state"))
    running = state == "RUNNING"
    details = j.get("gres_detail") or []
    detail = str(details[0]) if running and isinstance(details, list) and details else ""
    request = str(j.get("tres_per_node") or "")
    node_count = max(integer(j.get("node_count"), 1), 1)
    shards, indices = shards_of_gres(detail)
    if not shards:
        shards = shards_of_gres(request)[0]
    if detail:
        per_node, gtype = gpus_of_gres(detail)
        indices = indices or gpu_indices(detail)
    else:
        per_node, gtype = gpus_of_gres(request)
        if per_node == 0 and j.get("tres_per_job"):
            per_node, gtype = gpus_of_gres(str(j["tres_per_job"]))
    if running and per_node == 0:
        allocated, alloc_type = gpus_of_tres(str(j.get("tres_alloc_str") or ""))
        per_node, gtype = allocated // node_count, gtype or alloc_type
    limit_min = num(j.get("time_limit"))
    return SlurmJob(
        job_id=str(integer(j.get("job_id"))),
        name=str(j.get("name") or ""),
        user=str(j.get("user_name") or j.get("user_id") or ""),
        state=state,
        state_flags=flags,
        reason=str(j.get("state_reason") or ""),
        partition=str(j.get("partition") or ""),
        nodes=str(j.get("nodes") or ""),
        node_count=node_count,
        submit_s=epoch(j.get("submit_time")) or 0.0,
        start_s=epoch(j.get("start_time")),
        eligible_s=epoch(j.get("eligible_time")),
        priority=integer(j.get("priority")),
        gpus_per_node=per_node,
        gpu_type=gtype,
        comment=str(j.get("comment") or ""),
        admin_comment=str(j.get("admin_comment") or ""),
        requeue=bool(j.get("requeue")),
        restarts=integer(j.get("restart_cnt")),
        time_limit_s=limit_min * 60.0 if limit_min is not None and limit_min > 0 else None,
        required_nodes=str(j.get("required_nodes") or ""),
        shards=shards,
        gpu_indices=indices,
        gres_request=request,
    )


def parse_sinfo_json(text: str) -> list[SlurmNode]:
    """Nodes of 22.05's `sinfo --json` (a `nodes` list). Later versions group nodes (`sinfo` entries) and
    lose per-node GPU use: read `scontrol --json show nodes` there (`parse_scontrol_nodes_json`)."""
    doc = load_document(text, "sinfo --json")
    if "nodes" not in doc and "sinfo" in doc:
        raise SlurmError("sinfo --json of this Slurm has no per-node list: use scontrol --json show nodes")
    return [_node(n) for n in doc.get("nodes") or ()]


def parse_scontrol_nodes_json(text: str) -> list[SlurmNode]:
    """Nodes of `scontrol --json show nodes` (23.02+)."""
    return [_node(n) for n in load_document(text, "scontrol --json show nodes").get("nodes") or ()]


def _node(n: dict[str, Any]) -> SlurmNode:
    """One node object; 22.05's sinfo and later scontrol share the keys that matter here."""
    gres, used_text = str(n.get("gres") or ""), str(n.get("gres_used") or "")
    total, gtype = gpus_of_gres(gres)
    used, _ = gpus_of_gres(used_text)
    total_shards = shards_of_gres(gres)[0]
    if total_shards:  # a GPU holding shards is not free for a whole-GPU job (and the reverse)
        busy = set(gpu_indices(used_text)) | set(shards_of_gres(used_text)[1])
        used = max(used, len(busy))
    state, flags = split_state(n.get("state"), NODE_BASE_STATES, n.get("state_flags"))
    return SlurmNode(
        name=str(n.get("name") or n.get("hostname") or ""),
        state=state,
        flags=flags,
        partitions=tuple(str(p) for p in n.get("partitions") or ()),
        gpu_type=gtype,
        total_gpus=total,
        used_gpus=min(used, total),
        total_shards=total_shards,
        last_busy_s=epoch(n.get("last_busy")),
    )


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
        gpus, _ = gpus_of_tres(row.get("AllocTRES", ""))
        elapsed = row.get("ElapsedRaw", "")
        user = row.get("User", "")
        if not gpus or not elapsed.isdigit() or not user:
            continue
        out[user] = out.get(user, 0.0) + gpus * float(elapsed)
    return out


class SchedClient(SlurmClient):
    """What the scheduler daemon needs on top of `SlurmClient`: the queue, nodes, priorities, history
    and the few job updates it applies. Every update is one command; failures raise SlurmError."""

    #: how many independent job updates (site factors) the daemon may have in flight at once
    update_workers: int = 1

    @abstractmethod
    def jobs(self) -> list[SlurmJob]:
        """All jobs slurmctld knows (framed `squeue -O` text, or `squeue --json`): callers keep the live ones."""

    @abstractmethod
    def nodes(self) -> list[SlurmNode]:
        """All nodes with their GPU use (`sinfo --json` on 22.05, `scontrol --json show nodes` later)."""

    def retypes_pending_jobs(self) -> bool:
        """Whether `TresPerNode=` can move a pending job to another GPU type. Slurm 22.05.8 accepts the
        update but keeps the old type in the job's TRES (`gres/gpu:a100=1,gres/gpu:h100=1`): the job then
        pends forever on BadConstraints. 24.11 and 26.05 move it (verified on the local cluster)."""
        return True

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

    # The daemon's verbs: each composes its fields (easlurm.slurm.job_updates) and is one update_job.
    def place(self, job_id: str, placement: Placement) -> None:
        """Ask Slurm to run a pending job where `placement` says (nodes, GRES, partition)."""
        self.update_job(job_id, placement.fields())

    def order(self, job_id: str, site_factor: int) -> None:
        """Set a pending job's site factor (its rank in the daemon's queue order)."""
        self.update_job(job_id, Order(site_factor).fields())

    def hold(self, job_id: str, until_s: int, mark: str) -> None:
        """Defer a pending job until `until_s` (Slurm releases it then by itself), marked in AdminComment."""
        self.update_job(job_id, Hold(until_s, mark).fields())

    def release(self, job_id: str, begin_s: int | None = None) -> None:
        """Undo a daemon hold: eligible at the user's own `begin_s` (if given) or now; the mark cleared."""
        self.update_job(job_id, Release(begin_s).fields())

    @abstractmethod
    def state_save_location(self) -> str | None:
        """slurmctld's StateSaveLocation (`scontrol show config`), None when unknown."""


#: How the daemon reads the queue: framed `squeue -O` text (queue_read), or `squeue --json` every cycle.
QUEUE_READS = ("text", "json")


class CliSchedClient(CliSlurmClient, SchedClient):
    """The CLI implementation; inherits argv handling, retries, `--debug` echo and errors from CliSlurmClient.
    `queue_read="text"` (the default) reads the queue incrementally from framed text and falls back to
    `squeue --json` for any cycle whose text does not add up (one warning naming why)."""

    #: each update is one `scontrol` round trip (~14 ms on the local cluster) that slurmctld serves
    #: concurrently: the first cycle at 10,000 pending jobs sends 64 site factors (bench_schedd)
    update_workers = 4

    def __init__(
        self, *args: Any, queue_read: str = "text", text_refresh_s: float = TEXT_REFRESH_S, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        if queue_read not in QUEUE_READS:
            raise SlurmError(f"queue_read: {queue_read!r} is not one of {', '.join(QUEUE_READS)}")
        self.queue_read = queue_read
        self.text_refresh_s = text_refresh_s
        self.text_fallbacks = 0
        self._reader: TextQueueReader[SlurmJob] | None = None

    def queue_reader(self) -> TextQueueReader[SlurmJob]:
        """The text reader, made on first use with this Slurm's capabilities."""
        if self._reader is None:
            version = self.slurm_version()
            caps = QueueCapabilities(scontrol_json=version is not None and version >= SCONTROL_JSON_SINCE)
            self._reader = TextQueueReader(
                lambda argv, env: self.run(argv, retry=True, extra_env=env), caps, _job, self.text_refresh_s
            )
        return self._reader

    def jobs(self) -> list[SlurmJob]:
        if self.queue_read == "text":
            try:
                return self.queue_reader().read()
            except (SlurmError, ValueError) as exc:
                self.text_fallbacks += 1
                log.warning("queue text read refused, reading squeue --json this cycle: %s", exc)
        return self.jobs_json()

    def jobs_json(self) -> list[SlurmJob]:
        """The whole queue from `squeue --json` (the fallback, and the reference of the text read); the
        running jobs' GPU detail is kept for the text read's next cycles."""
        raw = load_document(self.run(["squeue", "--json"], retry=True), "squeue --json").get("jobs") or ()
        if self._reader is not None:
            self._reader.seed(raw)
        return [_job(j) for j in raw]

    def nodes(self) -> list[SlurmNode]:
        version = self.slurm_version()
        if version is not None and version >= SCONTROL_JSON_SINCE:
            return parse_scontrol_nodes_json(self.run(["scontrol", "--json", "show", "nodes"], retry=True))
        return parse_sinfo_json(self.run(["sinfo", "--json"], retry=True))

    def retypes_pending_jobs(self) -> bool:
        version = self.slurm_version()
        return version is not None and version >= RETYPE_PENDING_SINCE

    def site_factors(self) -> dict[str, tuple[int, int]]:
        return parse_sprio(self.run(["sprio", "-h", "-o", "%i %Y %S"], retry=True))

    def user_gpu_s(self, since_s: float) -> dict[str, float]:
        start = format_timestamp(since_s)
        rows = self.sacct(["-a", "-X", "-S", start, "-E", "now"], GPU_HISTORY_FIELDS)
        return gpu_seconds_by_user(rows)

    def update_job(self, job_id: str, fields: Mapping[str, str]) -> None:
        bad = [k for k in fields if k not in UPDATABLE_FIELDS]
        if bad or not fields:
            raise SlurmError(f"update of job {job_id}: refusing fields {bad or 'none'}")
        for key, value in fields.items():
            if any(c in value for c in "\n\r|") or not value.isascii():
                raise SlurmError(f"update of job {job_id}: bad value for {key}")
        if self._reader is not None:
            self._reader.invalidate(str(int(job_id)))
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
    "QUEUE_READS",
    "UPDATABLE_FIELDS",
    "CliSchedClient",
    "SchedClient",
    "SlurmJob",
    "SlurmNode",
    "gpu_seconds_by_user",
    "parse_scontrol_nodes_json",
    "parse_sinfo_json",
    "parse_sprio",
    "parse_squeue_json",
]
