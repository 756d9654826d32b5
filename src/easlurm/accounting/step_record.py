"""Per-step energy records (node and step) and the AdminComment encoding (the SPEC is easlurm.energy.spec).

Pure data: no I/O. The node agent builds NodeRecords, node 0 assembles a StepRecord, and every step
of a job is published in the job's AdminComment (framing and versions: easlurm.accounting.admin_codec),
at most ADMIN_COMMENT_MAX_STEPS steps in detail and ADMIN_COMMENT_MAX_CHARS characters; past either, the
document keeps each run's job total and names the steps it left out (their files keep them).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from easlurm.accounting.admin_codec import (
    PREFIXES,
    compact_step,
    expand_ranges,
    full_step,
    key_ranges,
    pack,
    unpack,
)
from easlurm.energy.result import DeviceEnergy, ProfileResult, sum_known
from easlurm.energy.spec import DEVICE_KINDS
from easlurm.errors import TraceError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
#: What every version's document starts with (`easlurm1:`, `easlurm2:`: ADMIN_COMMENT_PREFIXES); a value
#: starting so may hold one (decode_admin_comment tells).
ADMIN_COMMENT_PREFIX = "easlurm"
ADMIN_COMMENT_PREFIXES = PREFIXES
#: The accounting column keeps 65,535 bytes and truncates silently: stay well below.
ADMIN_COMMENT_MAX_CHARS = 60_000
#: Steps an AdminComment document carries in detail (the newest); older ones count in the run's total.
ADMIN_COMMENT_MAX_STEPS = 100
#: Detail levels of the AdminComment document, most detailed first (files keep full detail).
DETAIL_LEVELS = ("device", "node", "step")
#: A node record covering less of its step's wall time than this is late (StepRecord.late_nodes).
LATE_COVERAGE = 0.99

# ------------------------------------------------------------------------------------------- records


def _finite(v: Any) -> float | None:
    """A float JSON can carry: NaN and infinities (a sensor's glitch) become None, unknown."""
    if v is None:
        return None
    f = float(v)
    return f if math.isfinite(f) else None


#: How a profiled device's value becomes a record's, by the field's declared type: plain Python values
#: (no enum members, no numpy scalars) that JSON carries as they are.
_PLAIN: dict[str, Callable[[Any], Any]] = {
    "str": lambda v: str(getattr(v, "value", v)),
    "str | None": lambda v: v,
    "float | None": _finite,
    "int": int,
    "int | None": lambda v: None if v is None else int(v),
    "bool": bool,
}


@dataclass
class DeviceRecord(DeviceEnergy):
    """Energy of one device on one node over the step: the profiler's DeviceEnergy (`from_energy` copies
    it as plain JSON values), then how a device shared with other jobs was split."""

    #: A device shared with other jobs: how its energy was split ("utilisation" or "time" for a GPU,
    #: "cpu-time" for a node's CPU package and DRAM; "shared-unknown" with no share when it could not be
    #: told), this step's share, and the whole device's energy over the window (context only: never
    #: summed across jobs; the name keeps the records' key).
    apportioned: str | None = None
    share: float | None = None
    whole_gpu_energy_j: float | None = None

    def apportion(self, share: float, method: str) -> None:
        """Keep `share` (0..1) of this GPU's energy and power; the rest belongs to the other jobs."""
        self.whole_gpu_energy_j = self.energy_j
        self.energy_j = None if self.energy_j is None else self.energy_j * share
        self.mean_power_w = None if self.mean_power_w is None else self.mean_power_w * share
        self.peak_power_w = None  # the whole GPU's peak is not this job's
        self.share = share
        self.apportioned = method

    @classmethod
    def from_energy(cls, dev: DeviceEnergy) -> DeviceRecord:
        """The record of a profiled device: each of DeviceEnergy's fields as a plain JSON value; the
        sharing fields stay unset until `apportion`."""
        return cls(
            **{f.name: _PLAIN[str(f.type)](getattr(dev, f.name)) for f in dataclasses.fields(DeviceEnergy)}
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DeviceRecord:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass
class NodeRecord:
    """One node's share of a step, written by that node's agent as node-<id>.json."""

    node_id: int
    host: str
    start_time: float | None
    duration_s: float | None
    devices: list[DeviceRecord] = field(default_factory=list)
    #: When slurmstepd started/stopped the agent (unix s): the step's wall time on this node.
    step_start_time: float | None = None
    step_end_time: float | None = None
    error: str | None = None
    #: Requested kinds (gpu, cpu) that had no sensor on this node: their energy is unknown, not zero.
    no_sensor: list[str] = field(default_factory=list)
    #: The GPU power limit the scheduler asked for this step (W per GPU; None: the default limit), the
    #: limit in force on every GPU of the step on this node (None: the default, also when the request
    #: could not be set), and why a requested limit was not set.
    power_limit_requested_w: float | None = None
    power_limit_w: float | None = None
    limit_error: str | None = None
    #: The step's node count and SPEC as this node's agent knew them: a reader that finds node files but
    #: no step record (node 0's agent died) rebuilds the step from them.
    nnodes: int | None = None
    spec: str = ""
    #: Stretches of time an allocated GPU of this node sat idle (easlurm.energy.gpu_watch's rule), each
    #: {"gpu": device name ("gpu0"), "start", "end" (unix s), "energy_j" (drawn meanwhile, None: unknown)}.
    idle_episodes: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_profile(
        cls, result: ProfileResult, node_id: int, step_start: float | None, step_end: float | None
    ) -> NodeRecord:
        """This node's record from its profiled run (NaN and infinities become None)."""
        return cls(
            node_id=node_id,
            host=str(result.host),
            start_time=_finite(result.start_time),
            duration_s=_finite(result.duration_s),
            devices=[DeviceRecord.from_energy(d) for d in result.devices],
            step_start_time=step_start,
            step_end_time=step_end,
            no_sensor=[str(k) for k in result.no_sensor],
        )

    def kind_energy_j(self, kind: str | None) -> float | None:
        return sum_known(d.energy_j for d in self.devices if d.in_total and (kind is None or d.kind == kind))

    @property
    def total_energy_j(self) -> float | None:
        return self.kind_energy_j(None)

    @property
    def mean_power_w(self) -> float | None:
        total = self.total_energy_j
        if total is None or not self.duration_s:
            return None
        return total / self.duration_s

    @property
    def coverage(self) -> float | None:
        """Measured window / step wall time on this node: 1 once the lead-in reaches back to the step's
        start (easlurm.energy.lead_in); below 1 when the agent started later than a lead-in covers."""
        if self.duration_s is None or self.step_start_time is None or self.step_end_time is None:
            return None
        wall = self.step_end_time - self.step_start_time
        return min(1.0, self.duration_s / wall) if wall > 0 else None

    def to_dict(self) -> dict[str, Any]:
        """asdict's result, built field by field: every value is a plain JSON value or a list of them or
        of devices (asdict deep-copies each value, the bulk of a publication's time)."""
        d = {f.name: getattr(self, f.name) for f in _NODE_FIELDS}
        d["devices"] = [{f.name: getattr(dev, f.name) for f in _DEVICE_FIELDS} for dev in self.devices]
        d["no_sensor"] = list(self.no_sensor)
        d["idle_episodes"] = [dict(e) for e in self.idle_episodes]
        d["schema_version"] = SCHEMA_VERSION
        d["total_energy_j"] = self.total_energy_j
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NodeRecord:
        try:
            return cls(
                node_id=int(d["node_id"]),
                host=str(d["host"]),
                start_time=_opt_float(d.get("start_time")),
                duration_s=_opt_float(d.get("duration_s")),
                devices=[DeviceRecord.from_dict(x) for x in d.get("devices", [])],
                step_start_time=_opt_float(d.get("step_start_time")),
                step_end_time=_opt_float(d.get("step_end_time")),
                error=d.get("error"),
                no_sensor=[str(k) for k in d.get("no_sensor", [])],
                power_limit_requested_w=_opt_float(d.get("power_limit_requested_w")),
                power_limit_w=_opt_float(d.get("power_limit_w")),
                limit_error=d.get("limit_error"),
                nnodes=None if d.get("nnodes") is None else int(d["nnodes"]),
                spec=str(d.get("spec") or ""),
                idle_episodes=[_idle_episode(e) for e in d.get("idle_episodes") or []],
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceError(f"node record: malformed ({exc})") from exc


_NODE_FIELDS = dataclasses.fields(NodeRecord)
_DEVICE_FIELDS = dataclasses.fields(DeviceRecord)


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _idle_episode(e: Any) -> dict[str, Any]:
    """One idle episode as a record holds it (records written before episodes have none)."""
    if not isinstance(e, dict):
        raise TypeError(f"idle episode {e!r} is not an object")
    start, end = float(e["start"]), float(e["end"])
    if not (math.isfinite(start) and math.isfinite(end)) or end < start:
        raise ValueError(f"idle episode ends before it starts ({start} > {end})")
    return {"gpu": str(e["gpu"]), "start": start, "end": end, "energy_j": _finite(e.get("energy_j"))}


@dataclass
class StepRecord:
    """A step's energy over all its nodes, assembled by node 0; `partial` when a node's record was missing."""

    job_id: int
    step: str
    nnodes: int
    nodes: list[NodeRecord] = field(default_factory=list)
    spec: str = ""
    missing_nodes: list[int] = field(default_factory=list)
    #: "device", "node" or "step": how much detail survived the AdminComment size cap.
    detail: str = "device"
    #: The job's run (SLURM_RESTART_COUNT): a requeued job keeps one set of steps per run.
    run: int = 0
    #: Why the agent could not keep its records in the spool (it was full): this record came straight
    #: from node 0's memory, and the spool holds none to republish from.
    spool_error: str | None = None
    #: Node records a reader found impossible (easlurm.accounting.record_checks), by node id, with why:
    #: taken out of `nodes`, so never summed.
    invalid: dict[int, str] = field(default_factory=dict)

    @property
    def partial(self) -> bool:
        """Some node's energy is not in the step's: its record is missing, failed or impossible."""
        return bool(self.missing_nodes) or bool(self.invalid) or any(n.error for n in self.nodes)

    @property
    def step_id(self) -> str:
        """`JobID.Step` as sacct prints it."""
        return f"{self.job_id}.{self.step}"

    @property
    def key(self) -> str:
        """The step's name within the job's runs: `<step>` in run 0, `<step>+r<run>` later."""
        return run_step_key(self.step, self.run)

    def kind_energy_j(self, kind: str | None) -> float | None:
        return sum_known(n.kind_energy_j(kind) for n in self.nodes)

    @property
    def gpu_energy_j(self) -> float | None:
        return self.kind_energy_j("gpu")

    @property
    def cpu_energy_j(self) -> float | None:
        return self.kind_energy_j("cpu")

    @property
    def dram_energy_j(self) -> float | None:
        return self.kind_energy_j("dram")

    @property
    def total_energy_j(self) -> float | None:
        return self.kind_energy_j(None)

    @property
    def duration_s(self) -> float | None:
        """The longest node window: nodes run in parallel."""
        known = [n.duration_s for n in self.nodes if n.duration_s is not None]
        return max(known) if known else None

    @property
    def mean_power_w(self) -> float | None:
        total, dur = self.total_energy_j, self.duration_s
        return None if total is None or not dur else total / dur

    @property
    def edp(self) -> float | None:
        """Energy-delay product (J*s)."""
        total, dur = self.total_energy_j, self.duration_s
        return None if total is None or dur is None else total * dur

    @property
    def samples(self) -> int:
        return sum(d.samples for n in self.nodes for d in n.devices)

    @property
    def power_limit_w(self) -> float | None:
        """The GPU power limit the step ran at on every node (None: the default, or not the same
        everywhere: then `power_limit_unset_w` says which request was not met)."""
        limits = {n.power_limit_w for n in self.nodes}
        return limits.pop() if len(limits) == 1 else None

    @property
    def power_limit_unset_w(self) -> float | None:
        """A limit the scheduler asked for that some node could not set (the step ran there at the
        default), else None."""
        missed = [
            n.power_limit_requested_w for n in self.nodes if n.power_limit_requested_w and n.limit_error
        ]
        return missed[0] if missed else None

    @property
    def idle_episodes(self) -> list[dict[str, Any]]:
        """Every node's idle GPU episodes, each with its node's `host` added, by start time."""
        eps = [{**e, "host": n.host} for n in self.nodes for e in n.idle_episodes]
        return sorted(eps, key=lambda e: (e["start"], e["host"], e["gpu"]))

    @property
    def apportioned_devices(self) -> list[str]:
        """Devices holding a share of a GPU used by other jobs too, as "gpu0:utilisation"."""
        return sorted({f"{d.name}:{d.apportioned}" for n in self.nodes for d in n.devices if d.apportioned})

    @property
    def lead_in_by_kind(self) -> dict[str, tuple[float, float]]:
        """The lead-in each device kind's energy covers (easlurm.energy.lead_in), as the longest
        (buffered s, extrapolated s) over its devices; kinds with none covered are absent."""
        out: dict[str, tuple[float, float]] = {}
        for d in (d for n in self.nodes for d in n.devices if d.in_total):
            if d.lead_in_buffered_s is None and d.lead_in_extrapolated_s is None:
                continue
            have = out.get(d.kind, (0.0, 0.0))
            out[d.kind] = (
                max(have[0], d.lead_in_buffered_s or 0.0),
                max(have[1], d.lead_in_extrapolated_s or 0.0),
            )
        return out

    @property
    def late_nodes(self) -> list[int]:
        """Nodes whose record covers less than LATE_COVERAGE of the step's wall time there (the agent
        started later than a lead-in may reach back, or its profiler stopped early)."""
        return [n.node_id for n in self.nodes if n.coverage is not None and n.coverage < LATE_COVERAGE]

    @property
    def no_sensor_kinds(self) -> list[str]:
        """Requested kinds that had no sensor on some node (not the modelled DRAM: that is measured
        differently, this is not measured at all)."""
        return sorted({k for n in self.nodes for k in n.no_sensor})

    @property
    def modelled_kinds(self) -> list[str]:
        """Device kinds whose energy is (partly) modelled rather than measured (the DRAM model)."""
        return sorted({d.kind for n in self.nodes for d in n.devices if d.modelled})

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: snake_case keys, units in names, derived totals included for readers."""
        d = self.stored_dict()
        d.update(
            {
                "partial": self.partial,
                "duration_s": self.duration_s,
                "total_energy_j": self.total_energy_j,
                "gpu_energy_j": self.gpu_energy_j,
                "cpu_energy_j": self.cpu_energy_j,
                "dram_energy_j": self.dram_energy_j,
                "mean_power_w": self.mean_power_w,
                "edp_j_s": self.edp,
                "modelled": self.modelled_kinds,
                "no_sensor": self.no_sensor_kinds,
                "apportioned": self.apportioned_devices,
                "power_limit_w": self.power_limit_w,
            }
        )
        d["nodes"] = d.pop("nodes")  # after the totals, as files have always had it
        return d

    def stored_dict(self) -> dict[str, Any]:
        """to_dict without the derived totals: what from_dict reads (the AdminComment document's form)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "job_id": self.job_id,
            "step": self.step,
            "nnodes": self.nnodes,
            "spec": self.spec,
            "detail": self.detail,
            "run": self.run,
            "missing_nodes": list(self.missing_nodes),
            "spool_error": self.spool_error,
            "invalid_nodes": {str(k): v for k, v in sorted(self.invalid.items())},
            "nodes": [n.to_dict() for n in self.nodes],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepRecord:
        """Inverse of to_dict; derived totals are recomputed, never trusted."""
        if d.get("schema_version") != SCHEMA_VERSION:
            raise TraceError(f"step record: unsupported schema_version {d.get('schema_version')!r}")
        try:
            return cls(
                job_id=int(d["job_id"]),
                step=str(d["step"]),
                nnodes=int(d["nnodes"]),
                nodes=[NodeRecord.from_dict(n) for n in d.get("nodes", [])],
                spec=str(d.get("spec", "")),
                missing_nodes=[int(x) for x in d.get("missing_nodes", [])],
                detail=str(d.get("detail", "device")),
                run=int(d.get("run", 0)),
                spool_error=None if d.get("spool_error") is None else str(d["spool_error"]),
                invalid={int(k): str(v) for k, v in (d.get("invalid_nodes") or {}).items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise TraceError(f"step record: malformed ({exc})") from exc

    def reduced(self, detail: str) -> StepRecord:
        """A copy with less detail: "node" sums devices per kind, "step" also sums nodes into one."""
        if detail not in DETAIL_LEVELS:
            raise ValueError(detail)
        if DETAIL_LEVELS.index(detail) <= DETAIL_LEVELS.index(self.detail):
            return self
        nodes = self.nodes if self.detail == "node" else [_per_kind(n) for n in self.nodes]
        if detail == "step" and nodes:
            merged = _per_kind(
                NodeRecord(
                    node_id=-1,
                    host=",".join(n.host for n in nodes),
                    start_time=min((n.start_time for n in nodes if n.start_time is not None), default=None),
                    duration_s=self.duration_s,
                    devices=[d for n in nodes for d in n.devices],
                    error="; ".join(n.error for n in nodes if n.error) or None,
                    no_sensor=sorted({k for n in nodes for k in n.no_sensor}),
                    power_limit_requested_w=next(
                        (n.power_limit_requested_w for n in nodes if n.power_limit_requested_w), None
                    ),
                    power_limit_w=self.power_limit_w,
                    limit_error="; ".join(n.limit_error for n in nodes if n.limit_error) or None,
                    idle_episodes=[
                        {**e, "gpu": f"{n.host}:{e['gpu']}"} for n in nodes for e in n.idle_episodes
                    ],
                )
            )
            nodes = [merged]
        return dataclasses.replace(self, nodes=nodes, missing_nodes=list(self.missing_nodes), detail=detail)


def run_step_key(step: str, run: int) -> str:
    """Spool and record name of a step in a run: run 0 keeps the bare step name (files written before
    runs were counted stay readable), later runs add `+r<run>`."""
    return step if run == 0 else f"{step}+r{run}"


def _per_kind(node: NodeRecord) -> NodeRecord:
    """One synthetic device per kind holding the node's sums (sub-domains stay out of the sums)."""
    devices = []
    for kind in DEVICE_KINDS:
        chosen = [d for d in node.devices if d.kind == kind and d.in_total]
        if not chosen:
            continue
        energy = sum_known(d.energy_j for d in chosen)
        utils = [d.mean_util_pct for d in chosen if d.mean_util_pct is not None]
        # the fullest device's memory: a job's limit is per GPU, not their sum
        fullest = max(
            (d for d in chosen if d.peak_memory_bytes is not None),
            key=lambda d: d.peak_memory_bytes or 0,
            default=None,
        )
        devices.append(
            DeviceRecord(
                name=kind,
                kind=kind,
                energy_j=energy,
                mean_power_w=sum_known(d.mean_power_w for d in chosen),
                samples=sum(d.samples for d in chosen),
                modelled=any(d.modelled for d in chosen),
                source="+".join(sorted({d.source for d in chosen})),
                error="; ".join(d.error for d in chosen if d.error) or None,
                apportioned="+".join(sorted({d.apportioned for d in chosen if d.apportioned})) or None,
                mean_util_pct=sum(utils) / len(utils) if utils else None,
                peak_memory_bytes=None if fullest is None else fullest.peak_memory_bytes,
                memory_total_bytes=None if fullest is None else fullest.memory_total_bytes,
                lead_in_buffered_s=_max_known(d.lead_in_buffered_s for d in chosen),
                lead_in_extrapolated_s=_max_known(d.lead_in_extrapolated_s for d in chosen),
            )
        )
    return dataclasses.replace(node, devices=devices, no_sensor=list(node.no_sensor))


def _max_known(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


# ------------------------------------------------------------------------------------- job totals


def job_total(steps: Sequence[StepRecord]) -> StepRecord | None:
    """The whole job of one run as one record (None without steps), built from the same step records the
    rows show. Rule: the batch step measures its node (node 0 of the allocation: all its devices) for the
    job's whole time, so srun steps' records from that node are already in it; srun steps' other nodes
    are added. Without a batch record (srun-only jobs, salloc) every step's nodes are summed. So that
    the parts add up (a step never exceeds its job, whatever the two samplers' timing), each of the batch
    node's devices counts at least the sum of the srun steps' readings of that device (of that kind where
    some records are summed per kind: all are then, so that `gpu0` and `gpu` are never counted apart).
    A run whose AdminComment left steps out has its total carried there (CarriedTotal): that is the
    run's total."""
    if not steps:
        return None
    carried = next((s for s in steps if isinstance(s, CarriedTotal)), None)
    if carried is not None:
        return carried
    coarsest = max(DETAIL_LEVELS.index(s.detail) for s in steps)
    if any(DETAIL_LEVELS.index(s.detail) != coarsest for s in steps):  # devices are named alike only then
        steps = [s.reduced(DETAIL_LEVELS[coarsest]) for s in steps]
    batch = next((s for s in steps if s.step == "batch"), None)
    others = [s for s in steps if s is not batch]
    covered = {n.host for n in batch.nodes} if batch is not None else set()
    nodes = []
    if batch is not None:
        nodes = [_at_least(n, [m for s in others for m in s.nodes if m.host == n.host]) for n in batch.nodes]
    for s in others:
        nodes.extend(n for n in s.nodes if n.host not in covered)
    first = steps[0]
    return StepRecord(
        first.job_id,
        "job",
        len({n.host for n in nodes}),
        nodes,
        missing_nodes=sorted({m for s in steps for m in s.missing_nodes}),
        run=first.run,
        spool_error=next((s.spool_error for s in steps if s.spool_error), None),
        invalid={k: v for s in steps for k, v in s.invalid.items()},
    )


def _at_least(node: NodeRecord, parts: Sequence[NodeRecord]) -> NodeRecord:
    """The batch step's record of a node, each device raised to the steps' summed reading of it where
    that is higher (devices only the steps saw are added). Sums plain numbers (a job of 1,000 steps
    adds 1,000 readings per device), and copies a device once."""
    first: dict[str, DeviceRecord] = {}
    summed: dict[str, float | None] = {}
    for part in parts:
        for dev in part.devices:
            if dev.name not in first:
                first[dev.name], summed[dev.name] = dev, dev.energy_j
            elif dev.energy_j is not None:
                have = summed[dev.name]
                summed[dev.name] = dev.energy_j if have is None else have + dev.energy_j
    if not first:
        return node
    devices = []
    for dev in node.devices:
        if dev.name in first:
            del first[dev.name]
            steps_j = summed.pop(dev.name)
            if steps_j is not None and (dev.energy_j is None or steps_j > dev.energy_j):
                dev = dataclasses.replace(dev, energy_j=steps_j)
        devices.append(dev)
    devices.extend(dataclasses.replace(dev, energy_j=summed[name]) for name, dev in first.items())
    return dataclasses.replace(node, devices=devices)


@dataclass
class CarriedTotal(StepRecord):
    """A run's job total as an AdminComment document carries it when it leaves steps out (step "job",
    one node per host, devices summed per kind), with the keys of the steps it left out: their records
    are in the spool files only."""

    omitted: list[str] = field(default_factory=list)


def run_totals(steps: Sequence[StepRecord]) -> list[StepRecord]:
    """Each run's job_total over `steps` (full or node-detail records), one node per host with devices
    summed per kind: a size that grows with the job's hosts, not its steps."""
    by_run: dict[int, list[StepRecord]] = {}
    for s in steps:
        by_run.setdefault(s.run, []).append(s.reduced("node"))
    out = []
    for run in sorted(by_run):
        total = job_total(by_run[run])
        assert total is not None
        hosts: dict[str, list[NodeRecord]] = {}
        for n in total.nodes:
            hosts.setdefault(n.host, []).append(n)
        merged = [
            dataclasses.replace(
                dataclasses.replace(total, nodes=group, detail="node").reduced("step").nodes[0],
                node_id=i,
                host=host,
            )
            for i, (host, group) in enumerate(hosts.items())
        ]
        out.append(dataclasses.replace(total, nodes=merged, nnodes=len(merged), detail="node"))
    return out


# ------------------------------------------------------------------------------------- AdminComment


def _document(carried: Sequence[StepRecord], totals: Sequence[StepRecord], omitted: Sequence[str]) -> str:
    doc: dict[str, Any] = {"v": 2, "steps": [compact_step(s.stored_dict()) for s in carried]}
    if omitted:
        doc["omitted"] = key_ranges(list(omitted))
        doc["totals"] = [compact_step(t.stored_dict()) for t in totals]
        doc["limit_steps"] = ADMIN_COMMENT_MAX_STEPS
    return pack(doc)


def encode_admin_comment(
    steps: Sequence[StepRecord],
    max_chars: int = ADMIN_COMMENT_MAX_CHARS,
    max_steps: int = ADMIN_COMMENT_MAX_STEPS,
    folded: Sequence[StepRecord] = (),
    folded_keys: Sequence[str] = (),
) -> str:
    """A job's steps as one AdminComment value (version 2): the newest `max_steps` of `steps` in detail,
    reduced (device detail summed per kind, then per step) and then fewer until the text fits
    `max_chars`. The steps it leaves out, and those of `folded_keys` (which the caller holds only as
    `folded`: node-detail summaries or run totals already summed), are named in `omitted`, and each
    run's job total over all of them is carried beside (run_totals): never a silent truncation. Full
    detail stays in the per-step files."""
    ordered = sorted(steps, key=lambda s: (s.run, s.step == "batch", _step_order(s.step)))
    carried = ordered[max(0, len(ordered) - max_steps) :]
    out = [*folded, *ordered[: len(ordered) - len(carried)]]
    out_keys = [*folded_keys, *(s.key for s in ordered[: len(ordered) - len(carried)])]
    totals: list[StepRecord] = []
    while True:
        if out_keys and not totals:
            totals = run_totals([*out, *carried])
        for detail in DETAIL_LEVELS:
            text = _document([s.reduced(detail) for s in carried], totals, out_keys)
            if len(text) <= max_chars:
                if detail != "device" or out_keys:
                    log.info(
                        "AdminComment: %d steps at %r detail, %d left out",
                        len(carried),
                        detail,
                        len(out_keys),
                    )
                return text
        if not carried:
            break
        keep = len(carried) // 2
        out.extend(carried[: len(carried) - keep])
        out_keys.extend(s.key for s in carried[: len(carried) - keep])
        carried = carried[len(carried) - keep :]
    log.warning("AdminComment: the job totals alone exceed %d chars; totals at step detail", max_chars)
    return _document([], [t.reduced("step") for t in totals], out_keys)


def _step_order(step: str) -> int:
    return int(step) if step.isdigit() else -1


@dataclass
class AdminDocument:
    """What an AdminComment value holds: the step records it carries in detail, and for runs whose
    steps it left out (ADMIN_COMMENT_MAX_STEPS or the size cap) each run's total naming those steps.
    `dropped` counts steps a version-1 document left out without naming them."""

    steps: list[StepRecord] = field(default_factory=list)
    totals: list[CarriedTotal] = field(default_factory=list)
    dropped: int = 0

    @property
    def omitted(self) -> list[str]:
        return [key for t in self.totals for key in t.omitted]


def decode_admin_document(text: str | None) -> AdminDocument:
    """The document in an AdminComment value (empty when it holds none), version 1 or 2; raises
    TraceError when an easlurm document is present but damaged (e.g. truncated by the database)."""
    doc = unpack(text)
    if doc is None:
        return AdminDocument()
    raw_steps = doc.get("steps", [])
    if not isinstance(raw_steps, list):
        raise TraceError("AdminComment: damaged easlurm record (steps)")
    if doc["v"] == 1:
        dropped = doc.get("dropped_steps") or 0
        return AdminDocument([StepRecord.from_dict(s) for s in raw_steps], [], int(dropped))
    steps = [StepRecord.from_dict(full_step(s, SCHEMA_VERSION)) for s in raw_steps]
    omitted = expand_ranges(doc.get("omitted", []))
    by_run: dict[int, list[str]] = {}
    for key in omitted:
        run = key.partition("+r")[2] or "0"
        if not run.isdigit():
            raise TraceError(f"AdminComment: damaged easlurm record (omitted step {key!r})")
        by_run.setdefault(int(run), []).append(key)
    raw_totals = doc.get("totals", []) if omitted else []
    if not isinstance(raw_totals, list):
        raise TraceError("AdminComment: damaged easlurm record (totals)")
    totals = []
    for t in raw_totals:
        rec = StepRecord.from_dict(full_step(t, SCHEMA_VERSION))
        fields = {f.name: getattr(rec, f.name) for f in dataclasses.fields(StepRecord)}
        totals.append(CarriedTotal(**fields, omitted=by_run.get(rec.run, [])))
    return AdminDocument(steps, totals)


def decode_admin_comment(text: str | None) -> list[StepRecord]:
    """The step records an AdminComment value carries in detail ([] when it holds none); raises
    TraceError when an easlurm document is present but damaged (e.g. truncated by the database)."""
    return decode_admin_document(text).steps
