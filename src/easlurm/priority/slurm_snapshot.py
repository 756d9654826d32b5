"""Slurm's queue and nodes -> the policies' ClusterSnapshot (declared jobs only; the rest is load)."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from easlurm.accounting.step_record import ADMIN_COMMENT_PREFIX, decode_admin_comment
from easlurm.energy.spec import ProfileSpec, parse_spec
from easlurm.errors import ConfigError, EaslurmError
from easlurm.model.oracle import Placements
from easlurm.model.sharding import declared_workload
from easlurm.model.workload import Precision, Sharding, parse_ckpt
from easlurm.priority.holds import foreign_hold, held_for_own_begin
from easlurm.priority.sharing import colocations, sharing_mode
from easlurm.priority.snapshot import ClusterSnapshot, NodeState, PendingJob, RunningJob
from easlurm.slurm.hostlist import expand_hostlist, first_node
from easlurm.slurm.sched_client import SlurmJob, SlurmNode

log = logging.getLogger(__name__)

#: The job environment variable sbatch/srun set for the SPANK option (plugin "easlurm", option
#: "energy-profile"); verified on 22.05 in StateSaveLocation/hash.N/job.ID/environment.
SPANK_ENV_VAR = "_SLURM_SPANK_OPTION_easlurm_energy_profile"
#: A SPEC in the job's Comment (set by a job_submit.lua copy of the option, or by the user).
COMMENT_PREFIX = "energy-profile="


def spec_from_comment(comment: str) -> str | None:
    """`energy-profile=SPEC` anywhere in the Comment, as its own whitespace-separated word."""
    for word in comment.split():
        if word.startswith(COMMENT_PREFIX):
            return word[len(COMMENT_PREFIX) :]
    return None


#: distinct SPEC texts whose parse the daemon keeps (all of them are dropped past this: a bound, not a policy)
SPEC_TEXTS_KEPT = 100_000
#: What sbatch (22.05) writes for a bare `--energy-profile`: a NULL value printed with "%s".
BARE_OPTION_TEXT = "(null)"


def spec_from_environment(data: bytes) -> str | None:
    """The SPANK option's value in a NUL-separated environment file (None when not given, "" when bare)."""
    key = SPANK_ENV_VAR.encode() + b"="
    for item in data.split(b"\0"):
        if item.startswith(key):
            value = item[len(key) :].decode("ascii", "replace")
            return "" if value == BARE_OPTION_TEXT else value
    return None


class SpecReader:
    """How the daemon learns a job's SPEC on Slurm 22.05 (no job `Extra` field, no environment in squeue):
    first the Comment (`energy-profile=SPEC`), then slurmctld's saved job environment (readable by the
    operator next to slurmctld). A job's environment never changes, so it is read once per job."""

    def __init__(self, state_dir: str | None) -> None:
        self.state_dir = Path(state_dir) if state_dir else None
        self._cache: dict[str, ProfileSpec | None] = {}
        #: job id -> (Comment, its SPEC text, its parse): a Comment can be edited, so it is compared
        #: (parsing 10,000 SPECs every cycle cost ~0.1 s of a 2 s cycle, bench_schedd --slurm)
        self._comment_cache: dict[str, tuple[str, str, ProfileSpec | None]] = {}
        #: SPEC text -> its parse, or why it does not parse
        self._texts: dict[str, ProfileSpec | str] = {}

    def environment_spec(self, job_id: str) -> str | None:
        if self.state_dir is None or not job_id.isdigit():
            return None
        path = self.state_dir / f"hash.{int(job_id) % 10}" / f"job.{job_id}" / "environment"
        try:
            data = path.read_bytes()
        except OSError:
            return None
        # a 22.05 environment file starts with a uint32 count; entries are NUL-separated either way
        return spec_from_environment(data)

    def spec(self, job: SlurmJob) -> ProfileSpec | None:
        """The job's declaration, None when it has none or it does not parse (logged once)."""
        cached = self._comment_cache.get(job.job_id)
        if cached is not None and cached[0] == job.comment:
            return cached[2]
        text = spec_from_comment(job.comment)
        if text is not None:
            if cached is None or cached[1] != text:
                cached = (job.comment, text, self._parse_text(job.job_id, text))
            self._comment_cache[job.job_id] = (job.comment, text, cached[2])
            return cached[2]
        if job.job_id not in self._cache:
            env = self.environment_spec(job.job_id)
            self._cache[job.job_id] = _parse(job.job_id, env) if env is not None else None
        return self._cache[job.job_id]

    def _parse_text(self, job_id: str, text: str) -> ProfileSpec | None:
        """A SPEC text's parse, shared by the jobs that declare the same text (a sweep, an array: at
        10,000 new jobs parsing each took 0.35 s of the first cycle); a bad one is logged per job."""
        parsed = self._texts.get(text)
        if parsed is None:
            try:
                parsed = parse_spec(text)
            except ConfigError as exc:
                parsed = str(exc)
            if len(self._texts) >= SPEC_TEXTS_KEPT:
                self._texts.clear()
            self._texts[text] = parsed
        if isinstance(parsed, str):
            log.warning("job %s: ignoring its declaration: %s", job_id, parsed)
            return None
        return parsed

    def forget(self, live: Iterable[str]) -> None:
        keep = set(live)
        for cache in (self._cache, self._comment_cache):
            for job_id in [j for j in cache if j not in keep]:
                del cache[job_id]


def _parse(job_id: str, text: str) -> ProfileSpec | None:
    try:
        return parse_spec(text)
    except ConfigError as exc:
        log.warning("job %s: ignoring its declaration: %s", job_id, exc)
        return None


def uncontrolled_power_w(inputs: SnapshotInputs, nodes: Sequence[NodeState]) -> float:
    """Power (W above idle, at TDP) of the pending jobs the daemon does not control (undeclared, or out of
    its scope) that Slurm can start now on free GPUs of these nodes: under a budget this headroom is
    theirs, else the daemon starts a job that it must shed seconds later when one of them starts."""
    free = {n.name: n.free_gpus for n in nodes}
    reserved = 0.0
    for job in sorted(inputs.jobs, key=lambda j: (-j.priority, j.submit_s)):
        if not job.pending or schedulable(inputs.specs.get(job.job_id)) or foreign_hold(job):
            continue
        if job.gpus_per_node <= 0 or (job.eligible_s is not None and job.eligible_s > inputs.now_s):
            continue
        for n in nodes:
            if (job.gpu_type is None or job.gpu_type == n.gpu_type) and free[n.name] >= job.gpus_per_node:
                free[n.name] -= job.gpus_per_node
                reserved += job.gpus_per_node * max(n.tdp_w - n.idle_power_w, 0.0)
                break
    return reserved


def schedulable(spec: ProfileSpec | None) -> bool:
    """The oracle needs a model, a step count and a batch size; anything less stays in Slurm's order."""
    return spec is not None and spec.model is not None and spec.steps is not None and bool(spec.batch)


@dataclass(frozen=True)
class GpuFacts:
    """Power facts of one GPU type (W per GPU)."""

    idle_w: float
    tdp_w: float
    min_power_limit_w: float | None


@dataclass
class SnapshotInputs:
    """What one cycle read from Slurm, before conversion."""

    now_s: float
    jobs: list[SlurmJob]
    nodes: list[SlurmNode]
    specs: dict[str, ProfileSpec] = field(default_factory=dict)
    user_gpu_s: dict[str, float] = field(default_factory=dict)
    measured_power_w: dict[str, float] = field(default_factory=dict)
    #: whether Slurm can move a pending job to another GPU type (`SchedClient.retypes_pending_jobs`)
    retype_pending: bool = True


def gpu_facts_from_catalogue(catalogue: Any) -> Callable[[str], GpuFacts | None]:
    """A lookup of Slurm GRES type names ("a100", "h100") in the oracle's GPU catalogue."""

    def lookup(gpu_type: str) -> GpuFacts | None:
        if gpu_type not in catalogue:
            return None
        spec = catalogue.get(gpu_type)
        return GpuFacts(float(spec.idle_w), float(spec.tdp_w), float(spec.min_power_limit_w))

    return lookup


def shareable(job: SlurmJob, spec: ProfileSpec | None) -> bool:
    """A job the daemon may place beside another: SPEC `share` and a one-node gres/shard request (Slurm
    22.05 cannot turn a pending `gpu` request into shards, so `share` with --gres=gpu stays exclusive)."""
    return (
        spec is not None and spec.share and job.shards > 0 and job.gpus_per_node == 0 and job.node_count <= 1
    )


def pending_job(
    job: SlurmJob, spec: ProfileSpec, pinned_types: tuple[str, ...] | None = None, retype: bool = True
) -> PendingJob:
    """A declared pending job; the first GPU option is the job's current request when it is in the list.
    A job pinned to nodes (`--nodelist`) keeps to their GPU types (`pinned_types`); a typed request keeps
    its type where Slurm cannot move a pending job to another type (`retype` False)."""
    assert spec.model is not None and spec.steps is not None
    share = shareable(job, spec)
    requested = 1 if share else job.n_gpus or 1
    gpus = (1,) if share else spec.gpus or (requested,)
    if requested in gpus:
        gpus = (requested, *(g for g in gpus if g != requested))
    malleable = len(gpus) > 1 or len(spec.batch) > 1
    moves = malleable and retype  # Slurm can move it to another GPU type, and the job allows it
    types: tuple[str, ...] | None = None if job.gpu_type is None or moves else (job.gpu_type,)
    if pinned_types is not None:
        types = pinned_types
    pending = PendingJob(
        job_id=job.job_id,
        user=job.user,
        submit_s=job.submit_s,
        model=spec.model,
        total_steps=spec.steps,
        remaining_steps=float(spec.steps),
        batch_options=spec.batch,
        gpu_options=gpus,
        gpu_types=types,
        malleable=malleable,
        urgent=spec.urgent,
        deadline_s=job.submit_s + spec.deadline_s if spec.deadline_s is not None else None,
        preemptions=job.restarts,
        shareable=share,
        default_power_limit=spec.nolimit,
        time_limit_s=job.time_limit_s,
    )
    return replace(pending, **training_hints(spec)) if spec.precision or spec.shard or spec.ckpt else pending


def training_hints(spec: ProfileSpec) -> dict[str, Any]:
    """How a declared job trains (SPEC precision=, shard=, ckpt=) as PendingJob fields; a job that says
    shard=auto and nothing of checkpointing lets the oracle choose that too (docs/oracle-llm.md)."""
    out: dict[str, str] = {}
    if spec.precision is not None:
        out["precision"] = Precision.parse(spec.precision).value
    if spec.shard is not None:
        out["sharding"] = Sharding.parse(spec.shard).value
    if spec.ckpt is not None or spec.shard == "auto":
        out["act_ckpt"] = parse_ckpt("auto" if spec.ckpt is None else spec.ckpt)
    return out


class PendingMemo:
    """Each pending job's PendingJob from the last cycle, made again only when a field it is made of
    changed (the SPEC, the request, the restart count...): at 10,000 pending jobs building them every
    cycle cost 0.3-0.7 s of the daemon's cycle (bench_schedd). Entries of jobs not seen in a cycle go."""

    def __init__(self) -> None:
        self._jobs: dict[str, tuple[tuple[Any, ...], ProfileSpec, PendingJob]] = {}
        self._seen: dict[str, tuple[tuple[Any, ...], ProfileSpec, PendingJob]] = {}

    def get(
        self, job: SlurmJob, spec: ProfileSpec, pinned_types: tuple[str, ...] | None, retype: bool
    ) -> PendingJob:
        key = (
            job.user,
            job.submit_s,
            job.gpus_per_node,
            job.node_count,
            job.shards,
            job.gpu_type,
            job.restarts,
            job.time_limit_s,
            pinned_types,
            retype,
        )
        hit = self._jobs.get(job.job_id)
        if hit is None or hit[0] != key or (hit[1] is not spec and hit[1] != spec):
            hit = (key, spec, pending_job(job, spec, pinned_types, retype))
        self._seen[job.job_id] = hit
        return hit[2]

    def end_cycle(self) -> None:
        """Keep only the jobs seen since the last call."""
        self._jobs, self._seen = self._seen, {}


def build_snapshot(
    inputs: SnapshotInputs,
    facts: Callable[[str], GpuFacts | None],
    predict_power_w: Callable[[str, ProfileSpec, str, int, int, int], float | None] | None = None,
    power_budget_w: float | None = None,
    memo: PendingMemo | None = None,
) -> ClusterSnapshot:
    """Declared, startable pending jobs become PendingJobs; every running GPU job is load (measured power,
    else predicted for declared jobs, else TDP x GPUs: conservative under a power budget). `memo` keeps
    the PendingJobs of a daemon's last cycle."""
    nodes = node_states(inputs.nodes, facts)
    gpu_types = {n.name: n.gpu_type for n in nodes}
    pairs = colocations(inputs.jobs)
    pending: list[PendingJob] = []
    running: list[RunningJob] = []
    for job in inputs.jobs:
        spec = inputs.specs.get(job.job_id)
        if job.pending:
            # a job the daemon holds for its user's own begin time cannot start now: not offered
            startable = not foreign_hold(job) and not held_for_own_begin(job, inputs.now_s)
            if spec is not None and startable and schedulable(spec):
                pinned, retype = _pinned_types(job, nodes), inputs.retype_pending
                made = memo.get(job, spec, pinned, retype) if memo else pending_job(job, spec, pinned, retype)
                pending.append(made)
            continue
        load = _running_load(job, spec, gpu_types, inputs, facts, predict_power_w, pairs.get(job.job_id))
        if load is not None:
            running.append(load)
    if memo is not None:
        memo.end_cycle()
    pending.sort(key=lambda p: (p.submit_s, int(p.job_id) if p.job_id.isdigit() else 0))
    if power_budget_w is not None:
        reserved = uncontrolled_power_w(inputs, nodes)
        if reserved > 0:
            log.info("budget: %.0f W kept for uncontrolled jobs Slurm can start now", reserved)
            power_budget_w -= reserved
    return ClusterSnapshot(
        time_s=inputs.now_s,
        nodes=tuple(nodes),
        running=tuple(running),
        pending=tuple(pending),
        user_gpu_s=dict(inputs.user_gpu_s),
        power_budget_w=power_budget_w,
    )


def node_states(slurm_nodes: Iterable[SlurmNode], facts: Callable[[str], GpuFacts | None]) -> list[NodeState]:
    """The GPU nodes the policies may schedule: those whose GPU type the catalogue knows (others are
    logged and left to Slurm)."""
    nodes: list[NodeState] = []
    for n in slurm_nodes:
        if n.gpu_type is None or n.total_gpus <= 0:
            continue
        f = facts(n.gpu_type)
        if f is None:
            log.warning("node %s: GPU type %r not in the catalogue; not scheduled", n.name, n.gpu_type)
            continue
        nodes.append(
            NodeState(
                n.name,
                n.gpu_type,
                n.total_gpus,
                n.free_gpus,
                f.idle_w,
                f.tdp_w,
                f.min_power_limit_w,
                sharing=sharing_mode(n),
                power_state=n.power_state,
                idle_since_s=n.last_busy_s if n.state == "IDLE" and n.power_state == "on" else None,
            )
        )
    return nodes


def _pinned_types(job: SlurmJob, nodes: Sequence[NodeState]) -> tuple[str, ...] | None:
    """The GPU types of the nodes a pending job requires (--nodelist), None when it requires none: a
    policy must not place it on another type."""
    if not job.required_nodes:
        return None
    try:
        names = set(expand_hostlist(job.required_nodes))
    except ValueError as exc:
        log.warning("job %s: required nodes unreadable (%s)", job.job_id, exc)
        names = set()
    return tuple(sorted({n.gpu_type for n in nodes if n.name in names})) or None


def _running_load(
    job: SlurmJob,
    spec: ProfileSpec | None,
    gpu_types: Mapping[str, str],
    inputs: SnapshotInputs,
    facts: Callable[[str], GpuFacts | None],
    predict_power_w: Callable[[str, ProfileSpec, str, int, int, int], float | None] | None,
    colocated_with: str | None,
) -> RunningJob | None:
    """A running GPU job as load on its first node (None: not a GPU job, or not on a scheduled node, whose
    GPU type `gpu_types` gives): its measured power, else the prediction for a declared job, else TDP x
    GPUs (conservative under a power budget)."""
    if not job.running or (job.n_gpus <= 0 and not job.shards):
        return None
    n_gpus = max(job.n_gpus, 1)  # a shard job uses (part of) one GPU
    node = first_node(job.nodes)
    gtype = job.gpu_type or gpu_types.get(node)
    if node not in gpu_types or gtype is None:
        return None
    declared = spec if schedulable(spec) else None
    predicted = None
    if declared is not None and predict_power_w is not None:
        nodes_used = max(job.node_count, 1)  # a job Slurm spread over nodes is predicted with that spread
        predicted = predict_power_w(job.job_id, declared, gtype, n_gpus, declared.batch[0], nodes_used)
    measured = inputs.measured_power_w.get(job.job_id)
    power = predicted if measured is None else measured
    if power is None or not math.isfinite(power):
        f = facts(gtype)
        power = n_gpus * (f.tdp_w if f is not None else 0.0)
    return RunningJob(
        job_id=job.job_id,
        user=job.user,
        node=node,
        gpu_type=gtype,
        n_gpus=n_gpus,
        n_nodes=max(job.node_count, 1),
        batch=declared.batch[0] if declared is not None else 0,
        power_w=float(power),
        # beside a measurement only: the pair tells how far off the predictions are
        predicted_power_w=predicted if measured is not None and predicted is not None else None,
        start_s=job.start_s if job.start_s is not None else inputs.now_s,
        # only declared, requeueable jobs may be chosen as victims: others count as urgent
        urgent=declared is None or declared.urgent or not job.requeue,
        deadline_s=job.submit_s + declared.deadline_s
        if declared is not None and declared.deadline_s is not None
        else None,
        # zeus-share predicts the pair from the partner's model
        model=declared.model if declared is not None else None,
        shareable=bool(spec is not None and spec.share and job.shards),
        colocated_with=colocated_with,
        time_limit_s=job.time_limit_s,
    )


def oracle_power(oracle: Any) -> Callable[[str, ProfileSpec, str, int, int, int], float | None]:
    """Predicted power (W, all GPUs) of a declared job on a placement (GPUs on `n_nodes` nodes; 0 = the
    fewest), None when the oracle cannot tell."""

    def predict(
        job_id: str, spec: ProfileSpec, gpu_type: str, n_gpus: int, batch: int, n_nodes: int = 0
    ) -> float | None:
        try:
            wl = declared_workload(str(spec.model), spec.precision, spec.shard, spec.ckpt)
            pred = oracle.predict(wl, Placements.of([n_gpus], [batch], [gpu_type], [math.nan], [n_nodes]))
            return float(pred.power_w[0])
        except (EaslurmError, ValueError, KeyError) as exc:
            log.debug("job %s: no power prediction: %s", job_id, exc)
            return None

    return predict


def measured_power(jobs: Iterable[SlurmJob]) -> dict[str, float]:
    """Mean power of running profiled jobs' latest published step (AdminComment), where available."""
    out: dict[str, float] = {}
    for job in jobs:
        if not job.running or ADMIN_COMMENT_PREFIX not in job.admin_comment:
            continue
        try:
            steps = decode_admin_comment(job.admin_comment)
        except EaslurmError:
            continue
        for step in reversed(steps):
            power = getattr(step, "mean_power_w", None)
            if isinstance(power, int | float) and power > 0:
                out[job.job_id] = float(power)
                break
    return out


def env_state_dir(environ: Mapping[str, str] | None = None) -> str | None:
    """An explicit StateSaveLocation for the SPEC reader (EASLURM_SCHED_STATE_SAVE), else None."""
    return (environ if environ is not None else os.environ).get("EASLURM_SCHED_STATE_SAVE") or None
