"""The cluster snapshot a policy reads and the decision it returns: frozen, JSON round-trippable records."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any

from easlurm.errors import ConfigError

SCHEMA_VERSION = 1

#: A node's power state as Slurm's power saving leaves it (docs/power-saving.md): "on", "powering_down"
#: (SuspendProgram ran, `idle%`), "off" (powered down, `idle~`: its GPUs are free but a job waits for its
#: boot) and "powering_up" (ResumeProgram ran, `#`).
NODE_POWER_STATES = ("on", "powering_down", "off", "powering_up")


@dataclass(frozen=True)
class NodeState:
    """One node: its GPU type, how many GPUs are free, and the type's power facts (W per GPU)."""

    name: str
    gpu_type: str
    total_gpus: int
    free_gpus: int
    idle_power_w: float
    tdp_w: float
    min_power_limit_w: float | None = None
    #: how a GPU of this node may hold two jobs: "none" (exclusive), "time-slice" (Slurm gres/shard,
    #: CUDA time-slicing) or "mps" (the site runs the MPS daemon); see docs/colocation.md
    sharing: str = "none"
    #: one of NODE_POWER_STATES; a node whose state is unknown is "on"
    power_state: str = "on"
    #: since when the node, on, has held no job (None: it holds one, or unknown)
    idle_since_s: float | None = None
    #: when the node was last powered down (None: never, or unknown)
    powered_down_s: float | None = None
    #: Slurm's SuspendTime for this node: it is powered down after this long without a job (None: never,
    #: or unknown: power saving off, or the node excluded with SuspendExcNodes)
    suspend_time_s: float | None = None

    def __post_init__(self) -> None:
        if self.power_state not in NODE_POWER_STATES:
            raise ConfigError(
                f"node {self.name}: power_state must be one of {', '.join(NODE_POWER_STATES)},"
                f" got {self.power_state!r}"
            )

    @property
    def awake(self) -> bool:
        """A job placed here starts without waiting for a boot of its own (on, or already booting)."""
        return self.power_state in ("on", "powering_up")


@dataclass(frozen=True)
class RunningJob:
    """A running job; `power_w` is its measured (else predicted) power, all its GPUs together, and
    `predicted_power_w` the prediction for it where `power_w` is measured (None otherwise), so that a
    policy can learn how far off its predictions are."""

    job_id: str
    user: str
    node: str
    gpu_type: str
    n_gpus: int
    batch: int
    power_w: float
    start_s: float
    urgent: bool = False
    #: nodes its GPUs span (Slurm's node count; `node` is the first); the policies start jobs on one node
    n_nodes: int = 1
    deadline_s: float | None = None
    power_limit_w: float | None = None
    expected_end_s: float | None = None
    last_checkpoint_s: float | None = None
    checkpoint_interval_s: float | None = None
    predicted_power_w: float | None = None
    #: the job declared it may share its GPU (SPEC `share`), and the running job it shares with
    shareable: bool = False
    colocated_with: str | None = None
    #: what the job trains (as in PendingJob), so that a policy can predict how it shares a GPU
    #: (None: unknown, the job is never offered as a partner)
    model: str | None = None
    precision: str = "bf16"
    seq_len: int | None = None
    image_size: int | None = None
    #: the job's time limit (s) as Slurm knows it (None: none given); what a backfill plan reserves
    time_limit_s: float | None = None

    def work_lost_gpu_s(self, now_s: float) -> float:
        """GPU-seconds a preemption now would throw away (since the last checkpoint, else the start)."""
        since = self.start_s
        if self.last_checkpoint_s is not None:
            since = max(since, self.last_checkpoint_s)
        if self.checkpoint_interval_s:
            c = self.checkpoint_interval_s
            since = max(since, self.start_s + math.floor((now_s - self.start_s) / c) * c)
        return max(now_s - since, 0.0) * self.n_gpus


@dataclass(frozen=True)
class JobRequest:
    """What a training job asks for: one record for the simulator's submitted jobs (`sim.job.JobSpec`) and
    the policy's queue (`PendingJob`). The first GPU/batch option is the one the user requested (what a
    rigid scheduler or a non-malleable job uses); `total_steps` counts steps at that batch, so the work in
    samples is fixed and another batch covers it in fewer or more steps."""

    job_id: str
    user: str
    submit_s: float
    model: str
    total_steps: int
    batch_options: tuple[int, ...]
    gpu_options: tuple[int, ...]
    gpu_types: tuple[str, ...] | None = None
    power_limit_options_w: tuple[float, ...] = ()
    malleable: bool = True
    urgent: bool = False
    deadline_s: float | None = None
    precision: str = "bf16"
    seq_len: int | None = None
    image_size: int | None = None
    #: how the job trains where it says (SPEC shard=, ckpt=; docs/oracle-llm.md): a ZeRO stage, or auto (the
    #: oracle predicts each option with the cheapest stage that fits), and activation checkpointing
    sharding: str = "none"
    act_ckpt: str = ""
    #: the job declared it may share a GPU with another declared job (SPEC `share`)
    shareable: bool = False
    #: the job asked to run at its GPUs' default power limit (SPEC `nolimit`): no policy caps it
    default_power_limit: bool = False
    #: the job's time limit (s) as submitted (a trace's Timelimit; None: none given), which Slurm's
    #: backfill plans with; see docs/baselines.md
    time_limit_s: float | None = None

    def __post_init__(self) -> None:
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise ConfigError(f"job {self.job_id}: time_limit_s must be > 0, got {self.time_limit_s}")
        if self.total_steps <= 0:
            raise ConfigError(f"job {self.job_id}: total_steps must be > 0, got {self.total_steps}")
        if not self.batch_options or not self.gpu_options:
            raise ConfigError(f"job {self.job_id}: batch_options and gpu_options must not be empty")
        if any(k <= 0 for k in self.gpu_options) or any(b <= 0 for b in self.batch_options):
            raise ConfigError(f"job {self.job_id}: GPU counts and batches must be > 0")
        if not isinstance(self.shareable, bool):
            raise ConfigError(f"job {self.job_id}: share must be true or false, got {self.shareable!r}")

    @property
    def total_samples(self) -> float:
        return float(self.total_steps) * self.batch_options[0]


@dataclass(frozen=True)
class PendingJob(JobRequest):
    """A queued job: its request and how much of it is left (`remaining_steps`, at the requested batch;
    all of it when not given). `observed_power_ratio` is measured / predicted power of the job's last run
    when it was requeued (None: never ran, or not measured)."""

    remaining_steps: float = math.nan
    preemptions: int = 0
    observed_power_ratio: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.remaining_steps is None or math.isnan(self.remaining_steps):
            object.__setattr__(self, "remaining_steps", float(self.total_steps))

    @classmethod
    def queued(cls, request: JobRequest, **changes: Any) -> PendingJob:
        """`request` entering (or back in) the queue; `changes` set the queue's own fields."""
        shared = {name: getattr(request, name) for name in _request_fields()}
        return cls(**shared, **changes)

    @property
    def remaining_samples(self) -> float:
        return self.remaining_steps * self.batch_options[0]


@cache
def _request_fields() -> tuple[str, ...]:
    """JobRequest's field names (PendingJob.queued reads them once per queued job)."""
    return tuple(f.name for f in fields(JobRequest))


@dataclass(frozen=True)
class ClusterSnapshot:
    """Everything a policy may look at, at one instant; `user_gpu_s` is each user's GPU-seconds so far."""

    time_s: float
    nodes: tuple[NodeState, ...]
    running: tuple[RunningJob, ...] = ()
    pending: tuple[PendingJob, ...] = ()
    user_gpu_s: dict[str, float] = field(default_factory=dict)
    power_budget_w: float | None = None

    @property
    def power_w(self) -> float:
        """Cluster power now: running jobs plus the idle draw of free GPUs."""
        idle = sum(n.free_gpus * n.idle_power_w for n in self.nodes)
        return idle + sum(r.power_w for r in self.running)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "time_s": self.time_s,
            "nodes": [_record_dict(n) for n in self.nodes],
            "running": [_record_dict(r) for r in self.running],
            "pending": [_record_dict(p) for p in self.pending],
            "user_gpu_s": dict(self.user_gpu_s),
            "power_budget_w": self.power_budget_w,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterSnapshot:
        return cls(
            time_s=float(data["time_s"]),
            nodes=tuple(_record_from(NodeState, d) for d in data.get("nodes", ())),
            running=tuple(_record_from(RunningJob, d) for d in data.get("running", ())),
            pending=tuple(_record_from(PendingJob, d) for d in data.get("pending", ())),
            user_gpu_s={str(k): float(v) for k, v in (data.get("user_gpu_s") or {}).items()},
            power_budget_w=data.get("power_budget_w"),
        )


@dataclass(frozen=True)
class StartJob:
    """Start a pending job on one node with a GPU count, global batch, GPU type and optional limit (W/GPU).

    `colocate_with` names a running one-GPU job whose GPU this one-GPU job joins (the node's free GPU
    count does not change); None: the job gets GPUs of its own.

    `nodes` and `node_gpus` spread the GPUs over several nodes (`node` first, GPUs taken on each, summing
    to `n_gpus`); empty: all on `node`."""

    job_id: str
    node: str
    n_gpus: int
    batch: int
    gpu_type: str
    power_limit_w: float | None = None
    predicted_power_w: float | None = None
    colocate_with: str | None = None
    nodes: tuple[str, ...] = ()
    node_gpus: tuple[int, ...] = ()

    @property
    def n_nodes(self) -> int:
        """Nodes the job's GPUs span."""
        return max(len(self.nodes), 1)

    def allocation(self) -> tuple[tuple[str, int], ...]:
        """(node, GPUs on it) for every node of the placement."""
        if not self.nodes:
            return ((self.node, self.n_gpus),)
        return tuple(zip(self.nodes, self.node_gpus, strict=False))


@dataclass(frozen=True)
class Decision:
    """What to do now: preempt (applied first), then start; `hold` lists jobs deliberately kept waiting."""

    starts: tuple[StartJob, ...] = ()
    preempt: tuple[str, ...] = ()
    hold: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.starts or self.preempt)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "starts": [_record_dict(s) for s in self.starts],
            "preempt": list(self.preempt),
            "hold": list(self.hold),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Decision:
        return cls(
            starts=tuple(_record_from(StartJob, d) for d in data.get("starts", ())),
            preempt=tuple(str(j) for j in data.get("preempt", ())),
            hold=tuple(str(j) for j in data.get("hold", ())),
        )


def _record_dict(record: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(record):
        value = getattr(record, f.name)
        if isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, float) and not math.isfinite(value):
            value = None
        out[f.name] = value
    return out


def _record_from(cls: Any, data: dict[str, Any]) -> Any:
    known = {f.name for f in fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in known:
            continue
        kwargs[key] = tuple(value) if isinstance(value, list) else value
    return cls(**kwargs)
