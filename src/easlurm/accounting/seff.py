"""The job card of `easlurm seff`: per-step, node and device figures computed from a job's records alone.

Pure: sacct rows and decoded step records in, dataclasses out (no Slurm, files or printing). Every
energy is read from the records; a job's total is `job_total` of its run, the figure `easlurm sacct`
shows on the job row, so the card and sacct always agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from easlurm.accounting.sacct_rows import job_total, run_numbers, split_job_id, unrecorded_steps
from easlurm.accounting.step_record import ADMIN_COMMENT_MAX_STEPS, CarriedTotal, StepRecord
from easlurm.energy.lead_in import LEAD_IN_MAX_S
from easlurm.energy.result import sum_known
from easlurm.energy.spec import ProfileSpec, parse_spec
from easlurm.errors import ConfigError
from easlurm.slurm.hostlist import expand_hostlist
from easlurm.slurm.sacct_jobs import job_of_row

SCHEMA_VERSION = 1
#: A GPU counts as idle when its mean power stays below idle + this share of (limit - idle).
IDLE_DYNAMIC_SHARE = 0.10
#: The lead-in is noted on the card when it is at least this share of the step's measured window.
LEAD_IN_NOTE_SHARE = 0.01


@dataclass(frozen=True)
class GpuLimits:
    """What the card compares a GPU's power with (from the GPU catalogue): its limit and idle draw, W."""

    gpu_type: str
    limit_w: float
    idle_w: float

    @property
    def idle_threshold_w(self) -> float:
        return self.idle_w + IDLE_DYNAMIC_SHARE * (self.limit_w - self.idle_w)


@dataclass
class DeviceLine:
    """One device of one node in one step."""

    step: str
    host: str
    device: str
    kind: str
    energy_j: float | None
    mean_power_w: float | None
    peak_power_w: float | None
    limit_w: float | None
    modelled: bool
    in_total: bool
    apportioned: str | None = None
    share: float | None = None
    #: a GPU's mean utilisation (%) and peak memory in use of its total (bytes), where NVML measured them
    mean_util_pct: float | None = None
    peak_memory_bytes: int | None = None
    memory_total_bytes: int | None = None


@dataclass(frozen=True)
class IdleEpisode:
    """A stretch in which an allocated GPU had no process and near-zero utilisation, as the node agent
    recorded it (step record field `idle_episodes`), with the energy the GPU burned meanwhile."""

    host: str
    gpu: str
    start_s: float
    end_s: float
    energy_j: float | None

    @property
    def duration_s(self) -> float:
        return max(0.0, self.end_s - self.start_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "gpu": self.gpu,
            "start_s": self.start_s,
            "end_s": self.end_s,
            "duration_s": self.duration_s,
            "energy_j": self.energy_j,
        }


@dataclass
class StepLine:
    """One step of the shown run: its energy by device kind and its nodes' devices."""

    step: str
    duration_s: float | None
    gpu_energy_j: float | None
    cpu_energy_j: float | None
    dram_energy_j: float | None
    total_energy_j: float | None
    mean_power_w: float | None
    edp_j_s: float | None
    hosts: list[str]
    devices: list[DeviceLine]
    modelled: list[str]
    partial: bool


@dataclass
class JobCard:
    """Everything `easlurm seff` says about one job (one run of it: the last, unless asked)."""

    job_id: str
    name: str
    user: str
    account: str
    partition: str
    state: str
    elapsed_s: float | None
    nnodes: int | None
    nodelist: str
    gpu_type: str | None
    n_gpus: int
    shards: int
    run: int
    runs: int
    spec: str
    steps: list[StepLine] = field(default_factory=list)
    #: the run's total (job_total: the batch step plus srun steps' other nodes), J
    gpu_energy_j: float | None = None
    cpu_energy_j: float | None = None
    dram_energy_j: float | None = None
    total_energy_j: float | None = None
    mean_power_w: float | None = None
    edp_j_s: float | None = None
    measured_s: float | None = None
    modelled: list[str] = field(default_factory=list)
    #: total energy of each earlier run (requeued or preempted), oldest first; None where unknown
    earlier_runs_j: list[float | None] = field(default_factory=list)
    idle_gpus: list[DeviceLine] = field(default_factory=list)
    #: idle episodes the agents recorded (None: the records predate them; idle_gpus is then the only word)
    idle_episodes: list[IdleEpisode] | None = None
    #: the run's GPUs (job_total's devices), for the efficiency notes
    gpu_devices: list[DeviceLine] = field(default_factory=list)
    limits: GpuLimits | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def has_records(self) -> bool:
        return bool(self.steps)

    @property
    def requeue_energy_j(self) -> float | None:
        return sum_known(self.earlier_runs_j)

    @property
    def work_steps(self) -> int | None:
        """Training steps the SPEC declares (steps=N), the unit of 'energy per step of work'."""
        return parse_spec_quiet(self.spec).steps

    @property
    def energy_per_work_step_j(self) -> float | None:
        n = self.work_steps
        return None if n is None or self.total_energy_j is None else self.total_energy_j / n

    @property
    def gpu_energy_per_work_step_j(self) -> float | None:
        n = self.work_steps
        return None if n is None or self.gpu_energy_j is None else self.gpu_energy_j / n


def parse_spec_quiet(text: str) -> ProfileSpec:
    """The SPEC of a record; an unreadable one (written by another version) reads as a bare SPEC."""
    try:
        return parse_spec(text)
    except ConfigError:
        return ProfileSpec()


def device_lines(rec: StepRecord, limits: GpuLimits | None) -> list[DeviceLine]:
    out = []
    for node in rec.nodes:
        for d in node.devices:
            out.append(
                DeviceLine(
                    step=rec.step,
                    host=node.host,
                    device=d.name,
                    kind=d.kind,
                    energy_j=d.energy_j,
                    mean_power_w=d.mean_power_w,
                    peak_power_w=d.peak_power_w,
                    limit_w=limits.limit_w if limits is not None and d.kind == "gpu" else None,
                    modelled=d.modelled,
                    in_total=d.in_total,
                    apportioned=d.apportioned,
                    share=d.share,
                    mean_util_pct=d.mean_util_pct,
                    peak_memory_bytes=d.peak_memory_bytes,
                    memory_total_bytes=d.memory_total_bytes,
                )
            )
    return out


def _step_line(rec: StepRecord, limits: GpuLimits | None) -> StepLine:
    return StepLine(
        step=rec.step,
        duration_s=rec.duration_s,
        gpu_energy_j=rec.gpu_energy_j,
        cpu_energy_j=rec.cpu_energy_j,
        dram_energy_j=rec.dram_energy_j,
        total_energy_j=rec.total_energy_j,
        mean_power_w=rec.mean_power_w,
        edp_j_s=rec.edp,
        hosts=[n.host for n in rec.nodes],
        devices=device_lines(rec, limits),
        modelled=rec.modelled_kinds,
        partial=rec.partial,
    )


def _step_order(step: str) -> tuple[int, int]:
    return (0, 0) if step == "batch" else (1, int(step)) if step.isdigit() else (2, 0)


def build_card(
    sacct_rows: Sequence[Mapping[str, str]],
    records: Sequence[StepRecord],
    limits_of: Mapping[str, GpuLimits] | None = None,
    run: int | None = None,
    node_gpu_types: Mapping[str, str | None] | None = None,
) -> JobCard:
    """The card of one job from its sacct rows (`--duplicates` order: every run) and its step records.

    `limits_of` maps a Slurm GPU type ("a100") to its power limit and idle draw; `run` picks a run
    (default: the last). `node_gpu_types` maps node names to the GPU type of their GRES: a shard job's
    AllocTRES names no type, so its nodes' is used. Raises ConfigError when the rows hold no job or the
    run does not exist."""
    runs = run_numbers([dict(r) for r in sacct_rows])
    jobs = [
        (row, r) for row, r in zip(sacct_rows, runs, strict=True) if split_job_id(row["JobIDRaw"])[1] is None
    ]
    if not jobs:
        raise ConfigError("sacct returned no job row")
    last = max(r for _, r in jobs)
    shown = last if run is None else run
    if not 0 <= shown <= last:
        job_id = split_job_id(jobs[0][0]["JobIDRaw"])[0]
        raise ConfigError(
            f"job {job_id}: no run {shown + 1} (--run 1..{last + 1}: it ran {last + 1} time(s))"
        )
    row = next(row for row, r in jobs if r == shown)
    job = job_of_row(row, strict=False)
    (n_gpus, gtype), shards = job.alloc_gpus, job.shards
    steps = sorted((s for s in records if s.run == shown), key=lambda s: _step_order(s.step))
    type_note = None
    if gtype is None and shards:
        hosts = [*hosts_of(job.nodelist or ""), *(n.host for s in steps for n in s.nodes)]
        gtype, type_note = shard_gpu_type(hosts, node_gpu_types or {})
    limits = (limits_of or {}).get(gtype or "")
    card = JobCard(
        job_id=split_job_id(row["JobIDRaw"])[0],
        name=job.name or "",
        user=job.user or "",
        account=job.account or "",
        partition=job.partition or "",
        state=job.state or "",
        elapsed_s=job.elapsed_s,
        nnodes=job.n_nodes,
        nodelist=job.nodelist or "",
        gpu_type=gtype,
        n_gpus=n_gpus,
        shards=shards,
        run=shown,
        runs=last + 1,
        spec=next((s.spec for s in steps if s.spec), ""),
        steps=[_step_line(s, limits) for s in steps if not isinstance(s, CarriedTotal)],
        limits=limits,
    )
    if type_note:
        card.notes.append(type_note)
    for r in range(shown):
        earlier = job_total([s for s in records if s.run == r])
        card.earlier_runs_j.append(None if earlier is None else earlier.total_energy_j)
    total = job_total(steps)
    if total is not None:
        _add_totals(card, total, steps, limits)
        card.notes.extend(_unrecorded_note(sacct_rows, runs, records, card.job_id, shown))
        if any(d.apportioned for s in card.steps for d in s.devices):
            card.notes.append(
                "shared GPU: this job's share of the GPU's energy (split by utilisation or time); "
                "its utilisation and memory are the whole GPU's"
            )
        card.notes.extend(unmeasured_activity(card.steps))
    return card


def _add_totals(
    card: JobCard, total: StepRecord, steps: Sequence[StepRecord], limits: GpuLimits | None
) -> None:
    """The run's totals, its GPUs, the idle ones (post hoc and as the agents recorded them) and its records'
    notes, onto the card."""
    card.gpu_energy_j = total.gpu_energy_j
    card.cpu_energy_j = total.cpu_energy_j
    card.dram_energy_j = total.dram_energy_j
    card.total_energy_j = total.total_energy_j
    card.mean_power_w = total.mean_power_w
    card.edp_j_s = total.edp
    card.measured_s = total.duration_s
    card.modelled = total.modelled_kinds
    lines = device_lines(total, limits)
    card.idle_gpus = idle_gpus(lines, limits)
    card.gpu_devices = [d for d in lines if d.kind == "gpu" and not d.modelled]
    card.idle_episodes = idle_episodes(steps)
    card.notes.extend(record_notes(steps))


def record_notes(steps: Sequence[StepRecord]) -> list[str]:
    """What the totals leave out and why, one note per step: nodes without a record, records found
    impossible (never summed), a spool too full to keep the files."""
    notes = []
    for s in steps:
        if isinstance(s, CarriedTotal):
            notes.append(
                f"detail-omitted: {len(s.omitted)} step(s) of this run are not in AdminComment (it carries "
                f"at most {ADMIN_COMMENT_MAX_STEPS} in detail); the totals are the run's total published "
                "there, the steps' records are in the spool files (--spool DIR)"
            )
        if s.missing_nodes:
            notes.append(
                f"partial: step {s.step} has no record from node(s) {','.join(map(str, s.missing_nodes))} "
                f"of {s.nnodes}; their energy is not in the totals"
            )
        elif s.partial and not s.invalid:
            notes.append(
                f"partial: step {s.step}: a node's measurement failed; its energy is not in the totals"
            )
        for node_id, why in sorted(s.invalid.items()):
            notes.append(f"invalid: step {s.step} node {node_id}: {why}; left out of the totals")
        if s.spool_error:
            notes.append(f"spool-full: step {s.step}: {s.spool_error}")
        notes.extend(lead_in_notes(s))
    return notes


def _lead_in_how(buffered_s: float, extrapolated_s: float) -> str:
    if extrapolated_s <= 0:
        return "from the driver's power samples"
    if buffered_s <= 0:
        return "extrapolated at the first measured power"
    return f"{buffered_s:.2f} s from the driver's power samples, {extrapolated_s:.2f} s extrapolated"


def lead_in_notes(step: StepRecord) -> list[str]:
    """The start of a step its agents did not sample (they start after it): a note where that lead-in
    is a noticeable part of the step (LEAD_IN_NOTE_SHARE), saying how it was covered; a note per node
    whose record covers too little of the step (an agent that started later than a lead-in reaches)."""
    notes = []
    lead = step.lead_in_by_kind
    longest = max((b + e for b, e in lead.values()), default=0.0)
    if longest > 0 and step.duration_s and longest >= LEAD_IN_NOTE_SHARE * step.duration_s:
        kinds_by_how: dict[str, list[str]] = {}
        for kind, (buffered, extrapolated) in sorted(lead.items()):
            kinds_by_how.setdefault(_lead_in_how(buffered, extrapolated), []).append(kind)
        hows = "; ".join(f"{' and '.join(kinds)} {how}" for how, kinds in kinds_by_how.items())
        notes.append(
            f"lead-in: step {step.step}: its first {longest:.2f} s, before its agents' first samples, are "
            f"in the totals: {hows}"
        )
    for node in step.nodes:
        if node.node_id not in step.late_nodes or node.coverage is None:
            continue
        gap = (
            None
            if node.start_time is None or node.step_start_time is None
            else node.start_time - node.step_start_time
        )
        if gap is not None and gap > LEAD_IN_MAX_S:
            why = f"its record starts {gap:.0f} s after the step, more than the {LEAD_IN_MAX_S:.0f} s a lead-in covers"
        elif gap is not None and gap > 0:
            why = "a record written before easlurm covered its agent's start-up"
        else:
            why = "its measurement stopped before the step ended"
        notes.append(
            f"late-start: step {step.step} node {node.node_id}: its record covers {100 * node.coverage:.0f}% of "
            f"the step's time there ({why}); the rest is not in the totals"
        )
    return notes


def _unrecorded_note(
    sacct_rows: Sequence[Mapping[str, str]],
    runs: list[int],
    records: Sequence[StepRecord],
    job: str,
    run: int,
) -> list[str]:
    """A note naming the run's ended steps that have no record at all (their agents wrote none readable)."""
    lacking = unrecorded_steps([dict(r) for r in sacct_rows], runs, {job: {s.key: s for s in records}})
    if not lacking.get((job, run)):
        return []
    return [
        f"partial: step(s) {','.join(lacking[(job, run)])} have no record (their agents wrote none readable "
        "here; try --spool, or `easlurm accounting republish`); the totals lack them"
    ]


def unmeasured_activity(steps: Sequence[StepLine]) -> list[str]:
    """Where a GPU's utilisation or memory is unknown: the driver does not report it (NVML
    NOT_SUPPORTED, a GPU without NVML) or the record predates them. Said, never shown as 0."""
    gpus = [d for s in steps for d in s.devices if d.kind == "gpu" and not d.modelled]
    no_util = sorted({f"{d.device}@{d.host}" for d in gpus if d.mean_util_pct is None})
    no_mem = sorted({f"{d.device}@{d.host}" for d in gpus if d.peak_memory_bytes is None})
    if no_util and no_util == no_mem:
        return [f"GPU utilisation and memory: not measured on {', '.join(no_util)}"]
    out = [f"GPU utilisation: not measured on {', '.join(no_util)}"] if no_util else []
    return out + ([f"GPU memory: not measured on {', '.join(no_mem)}"] if no_mem else [])


def hosts_of(nodelist: str) -> list[str]:
    """The node names of a NodeList ("h100-[1-2]"); [] for none or an unreadable one."""
    if not nodelist or nodelist in ("None assigned", "(null)"):
        return []
    try:
        return expand_hostlist(nodelist)
    except (ValueError, ConfigError):
        return []


def shard_gpu_type(hosts: Sequence[str], node_gpu_types: Mapping[str, str | None]) -> tuple[str | None, str]:
    """The GPU type of a shard job from its nodes' GRES (one type, or unknown), and a note saying where
    it came from (the node's configuration today, not a record of the job)."""
    named = sorted({h for h in hosts if node_gpu_types.get(h)})
    types = sorted({str(node_gpu_types[h]) for h in named})
    if len(types) == 1:
        return types[
            0
        ], f"GPU type {types[0]}: from the GRES of node {', '.join(named)} (shards name no type)"
    if types:
        return None, f"GPU type unknown: the job's nodes have several ({', '.join(types)})"
    return None, "GPU type unknown: neither the job's AllocTRES (shards) nor its nodes' GRES name one"


def idle_gpus(devices: Sequence[DeviceLine], limits: GpuLimits | None) -> list[DeviceLine]:
    """GPUs held by the job that drew no more than idle power on average (a shared GPU is never idle:
    its power is a share). Unknown without the GPU's limits."""
    if limits is None:
        return []
    return [
        d
        for d in devices
        if d.kind == "gpu"
        and not d.apportioned
        and d.mean_power_w is not None
        and d.mean_power_w <= limits.idle_threshold_w
    ]


def _episode_field(ep: Any, name: str) -> Any:
    return ep.get(name) if isinstance(ep, Mapping) else getattr(ep, name, None)


def idle_episodes(steps: Sequence[StepRecord]) -> list[IdleEpisode] | None:
    """The run's idle episodes (node records' `idle_episodes`), one per GPU and stretch; None when no record
    holds one (written before agents recorded them, or none found: the card's post-hoc idle check speaks
    then). The batch step and an srun step on the same node watch the same GPU: their overlapping episodes
    of one GPU are merged, keeping the larger energy, so nothing is counted twice."""
    found = False
    raw: dict[tuple[str, str], list[tuple[float, float, float | None]]] = {}
    for s in steps:
        for node in s.nodes:
            for ep in getattr(node, "idle_episodes", None) or ():
                try:
                    start, end = float(_episode_field(ep, "start")), float(_episode_field(ep, "end"))
                except (TypeError, ValueError):
                    continue  # unreadable: written by another version
                found = True
                energy = _episode_field(ep, "energy_j")
                gpu = str(_episode_field(ep, "gpu")).removeprefix(f"{node.host}:")  # a node-detail record's
                gpu = f"gpu{gpu}" if gpu.isdigit() else gpu
                raw.setdefault((node.host, gpu), []).append(
                    (start, end, None if energy is None else float(energy))
                )
    if not found:
        return None
    out: list[IdleEpisode] = []
    for (host, gpu), spans in raw.items():
        spans.sort()
        merged: list[list[Any]] = []
        for start, end, energy in spans:
            if merged and start <= merged[-1][1]:
                last = merged[-1]
                last[1] = max(last[1], end)
                last[2] = None if last[2] is None or energy is None else max(last[2], energy)
            else:
                merged.append([start, end, energy])
        out.extend(IdleEpisode(host, gpu, a, b, e) for a, b, e in merged)
    return sorted(out, key=lambda e: (e.start_s, e.host, e.gpu))


def card_document(
    card: JobCard, whatifs: Sequence[Any] = (), whatif_note: str | None = None
) -> dict[str, Any]:
    """The `--json` document: snake_case keys, SI units in key names, None where unknown."""

    def dev(d: DeviceLine) -> dict[str, Any]:
        return {
            "step": d.step,
            "host": d.host,
            "device": d.device,
            "kind": d.kind,
            "energy_j": d.energy_j,
            "mean_power_w": d.mean_power_w,
            "peak_power_w": d.peak_power_w,
            "limit_w": d.limit_w,
            "modelled": d.modelled,
            "in_total": d.in_total,
            "apportioned": d.apportioned,
            "share": d.share,
            "mean_util_pct": d.mean_util_pct,
            "peak_memory_bytes": d.peak_memory_bytes,
            "memory_total_bytes": d.memory_total_bytes,
        }

    return {
        "schema_version": SCHEMA_VERSION,
        "job_id": card.job_id,
        "name": card.name,
        "user": card.user,
        "account": card.account,
        "partition": card.partition,
        "state": card.state,
        "elapsed_s": card.elapsed_s,
        "nnodes": card.nnodes,
        "nodelist": card.nodelist,
        "gpu_type": card.gpu_type,
        "n_gpus": card.n_gpus,
        "shards": card.shards,
        "gpu_limit_w": None if card.limits is None else card.limits.limit_w,
        "run": card.run,  # Slurm's restart count of the run shown (0: the first run)
        "run_number": card.run + 1,  # as the text and --run number it: 1..runs
        "runs": card.runs,
        "spec": card.spec,
        "has_records": card.has_records,
        "gpu_energy_j": card.gpu_energy_j,
        "cpu_energy_j": card.cpu_energy_j,
        "dram_energy_j": card.dram_energy_j,
        "total_energy_j": card.total_energy_j,
        "mean_power_w": card.mean_power_w,
        "edp_j_s": card.edp_j_s,
        "measured_s": card.measured_s,
        "modelled": card.modelled,
        "work_steps": card.work_steps,
        "energy_per_work_step_j": card.energy_per_work_step_j,
        "gpu_energy_per_work_step_j": card.gpu_energy_per_work_step_j,
        "requeue_energy_j": card.requeue_energy_j,
        "earlier_runs_energy_j": list(card.earlier_runs_j),
        "idle_gpus": [dev(d) for d in card.idle_gpus],
        "idle_episodes": None if card.idle_episodes is None else [e.to_dict() for e in card.idle_episodes],
        "steps": [
            {
                "step": s.step,
                "duration_s": s.duration_s,
                "gpu_energy_j": s.gpu_energy_j,
                "cpu_energy_j": s.cpu_energy_j,
                "dram_energy_j": s.dram_energy_j,
                "total_energy_j": s.total_energy_j,
                "mean_power_w": s.mean_power_w,
                "edp_j_s": s.edp_j_s,
                "hosts": s.hosts,
                "modelled": s.modelled,
                "partial": s.partial,
                "devices": [dev(d) for d in s.devices],
            }
            for s in card.steps
        ],
        "notes": list(card.notes),
        "whatif": [w.to_dict() for w in whatifs],
        "whatif_note": whatif_note,
    }
