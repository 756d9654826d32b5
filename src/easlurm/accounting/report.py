"""`easlurm report`'s figures: energy over a period grouped by user, account, partition or GPU type.

Pure: sacct rows (every run, `--duplicates` order), decoded step records and a grid intensity in; one
`RunEnergy` per job run and one `GroupTotals` per group out. A run's energy is `job_total` of its steps,
the figure `easlurm sacct` shows on its job row, so a report's total is the sum of those rows.
"""

from __future__ import annotations

import bisect
import csv
import io
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from easlurm.accounting.notes import NoteRules, RunFigures, efficiency_notes, idle_energy_j
from easlurm.accounting.sacct_rows import job_total, run_numbers, split_job_id
from easlurm.accounting.seff import (
    GpuLimits,
    device_lines,
    hosts_of,
    idle_episodes,
    idle_gpus,
    shard_gpu_type,
)
from easlurm.accounting.step_record import StepRecord
from easlurm.errors import ConfigError
from easlurm.slurm.sacct_jobs import job_of_row
from easlurm.slurm.times import parse_timestamp_s

SCHEMA_VERSION = 1
J_PER_KWH = 3.6e6


class GroupBy(StrEnum):
    """What a report's rows are."""

    USER = "user"
    ACCOUNT = "account"
    PARTITION = "partition"
    GPU_TYPE = "gpu-type"


@dataclass(frozen=True)
class RunEnergy:
    """One run of one job: who, where, how long, and what it drew (None: no records)."""

    job_id: str
    run: int
    user: str
    account: str
    partition: str
    gpu_type: str
    state: str
    start_s: float | None
    end_s: float | None
    elapsed_s: float
    gpu_hours: float
    energy_j: float | None
    #: this run was ended by a requeue (a later run exists): all its energy is lost to the requeue
    requeued: bool
    #: energy of allocated GPUs that drew no more than idle power over the run
    idle_gpu_energy_j: float | None
    #: the run's measured window (job_total's: the longest node's profiled time), s; mean power is
    #: energy over it, as sacct's AvgPower and seff's Mean power
    measured_s: float | None = None
    #: some node's energy is not in `energy_j`: its record is missing, failed, or was found impossible
    partial: bool = False
    #: node records set aside as impossible (easlurm.accounting.record_checks), as "step/node: why"
    invalid: tuple[str, ...] = ()
    #: the efficiency-note rules that found something in this run (NOTE_RULES names; none unless asked)
    notes: tuple[str, ...] = ()

    @property
    def midpoint_s(self) -> float | None:
        if self.start_s is None:
            return self.end_s
        return self.start_s if self.end_s is None else (self.start_s + self.end_s) / 2


@dataclass
class GroupTotals:
    """Sums over one group's runs; means are over the runs with records only."""

    key: str
    jobs: set[str] = field(default_factory=set)
    runs: int = 0
    profiled_runs: int = 0
    gpu_hours: float = 0.0
    profiled_gpu_hours: float = 0.0
    profiled_s: float = 0.0
    #: the profiled runs' measured windows, and the energy of the runs whose window is known
    measured_s: float = 0.0
    measured_energy_j: float = 0.0
    energy_j: float = 0.0
    requeue_energy_j: float = 0.0
    idle_gpu_energy_j: float = 0.0
    co2_g: float | None = None
    #: efficiency notes: rule -> the runs it found something in ("JOB" or "JOB+rN")
    notes: dict[str, list[str]] = field(default_factory=dict)

    @property
    def mean_power_w(self) -> float | None:
        """Energy over the runs' measured windows: the group's mean draw while its jobs were profiled (the
        one definition sacct's AvgPower and seff's Mean power use too; not over Slurm's Elapsed)."""
        return self.measured_energy_j / self.measured_s if self.measured_s > 0 else None

    @property
    def energy_per_gpu_hour_j(self) -> float | None:
        """Energy per GPU-hour of the profiled runs (J; the tables show it in kWh per GPU-hour)."""
        return self.energy_j / self.profiled_gpu_hours if self.profiled_gpu_hours > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "jobs": len(self.jobs),
            "runs": self.runs,
            "profiled_runs": self.profiled_runs,
            "energy_j": self.energy_j,
            "gpu_hours": self.gpu_hours,
            "profiled_gpu_hours": self.profiled_gpu_hours,
            "mean_power_w": self.mean_power_w,
            "energy_per_gpu_hour_j": self.energy_per_gpu_hour_j,
            "requeue_energy_j": self.requeue_energy_j,
            "idle_gpu_energy_j": self.idle_gpu_energy_j,
            "co2_g": self.co2_g,
        }


# ------------------------------------------------------------------------------------ grid intensity


@dataclass(frozen=True)
class GridIntensity:
    """Grams of CO2 per kWh: one constant, or a step series (each value holds from its time on)."""

    times_s: tuple[float, ...]
    g_per_kwh: tuple[float, ...]

    @classmethod
    def constant(cls, g_per_kwh: float) -> GridIntensity:
        if not (math.isfinite(g_per_kwh) and g_per_kwh >= 0):
            raise ConfigError(f"grid intensity: {g_per_kwh!r} is not a number of g/kWh >= 0")
        return cls((-math.inf,), (float(g_per_kwh),))

    def at(self, t_s: float | None) -> float:
        """The intensity in force at `t_s` (the first value before the series starts or without a time)."""
        if t_s is None:
            return self.g_per_kwh[0]
        i = bisect.bisect_right(self.times_s, t_s) - 1
        return self.g_per_kwh[max(i, 0)]


def _csv_time_s(text: str) -> float | None:
    """A CSV time: unix seconds (0 included), or a timestamp as Slurm's (easlurm.slurm.times: a naive one
    is local time); None when unreadable."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return parse_timestamp_s(text)
    except ValueError:
        return None


def parse_intensity_csv(text: str, source: str = "CSV") -> GridIntensity:
    """A `time,g_per_kwh` CSV (header optional; time ISO 8601 or unix seconds), sorted by time."""
    pairs = []
    for n, row in enumerate(csv.reader(io.StringIO(text)), 1):
        if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
            continue
        if len(row) < 2:
            raise ConfigError(f"{source} line {n}: expected time,g_per_kwh")
        t = _csv_time_s(row[0])
        try:
            value = float(row[1])
        except ValueError:
            if n == 1:
                continue  # a header
            raise ConfigError(f"{source} line {n}: {row[1]!r} is not a number of g/kWh") from None
        if t is None or not math.isfinite(value) or value < 0:
            raise ConfigError(f"{source} line {n}: bad time or intensity ({','.join(row)[:60]!r})")
        pairs.append((t, value))
    if not pairs:
        raise ConfigError(f"{source}: no intensity rows")
    pairs.sort()
    return GridIntensity(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs))


# -------------------------------------------------------------------------------------------- runs


def job_runs(
    sacct_rows: Sequence[Mapping[str, str]],
    records: Mapping[str, Sequence[StepRecord]],
    limits_of: Mapping[str, GpuLimits] | None = None,
    node_gpu_types: Mapping[str, str | None] | None = None,
    rules: NoteRules | None = None,
) -> list[RunEnergy]:
    """One RunEnergy per job row (each run of a requeued job is its own). A shard job, whose AllocTRES
    names no GPU type, takes its nodes' (`node_gpu_types`, as the card does), else counts as "shard".
    A run's idle-GPU energy is its recorded idle episodes' (the card's), else its GPUs at idle power over
    the whole run; with `rules`, each run carries the efficiency notes those rules find (no oracle)."""
    rows = [dict(r) for r in sacct_rows]
    runs = run_numbers(rows)
    last: dict[str, int] = {}
    for row, run in zip(rows, runs, strict=True):
        last[split_job_id(row["JobIDRaw"])[0]] = run
    out = []
    for row, run in zip(rows, runs, strict=True):
        job, step = split_job_id(row["JobIDRaw"])
        if step is not None:
            continue
        sj = job_of_row(row, strict=False)
        (n_gpus, gtype), shards = sj.alloc_gpus, sj.shards
        elapsed = sj.elapsed_s or 0.0
        total = job_total([s for s in records.get(job, ()) if s.run == run])
        if gtype is None and shards and node_gpu_types:
            hosts = [*hosts_of(sj.nodelist or ""), *(n.host for n in (total.nodes if total else ()))]
            gtype = shard_gpu_type(hosts, node_gpu_types)[0]
        energy = None if total is None else total.total_energy_j
        gpu_hours = n_gpus * elapsed / 3600.0
        idle_j = None
        found: tuple[str, ...] = ()
        if total is not None:
            shares = [
                d.share for n in total.nodes for d in n.devices if d.kind == "gpu" and d.share is not None
            ]
            if not n_gpus and shares:  # a shard job: its share of each GPU it used
                gpu_hours = sum(shares) * elapsed / 3600.0
            steps = [s for s in records.get(job, ()) if s.run == run]
            figures = run_figures(total, steps, (limits_of or {}).get(gtype or ""), n_gpus)
            idle_j = idle_energy_j(figures)
            if rules is not None:
                found = tuple(n.rule for n in efficiency_notes(figures, rules))
        out.append(
            RunEnergy(
                job_id=job,
                run=run,
                user=sj.user or "",
                account=sj.account or "",
                partition=sj.partition or "",
                gpu_type=gtype or ("shard" if shards else "none"),
                state=sj.state or "",
                start_s=sj.start_s,
                end_s=sj.end_s,
                elapsed_s=elapsed,
                gpu_hours=gpu_hours,
                energy_j=energy,
                requeued=run < last[job],
                idle_gpu_energy_j=idle_j,
                measured_s=None if total is None else total.duration_s,
                partial=total is not None and total.partial,
                invalid=() if total is None else _invalid_notes(records.get(job, ()), run),
                notes=found,
            )
        )
    return out


def run_figures(
    total: StepRecord, steps: Sequence[StepRecord], limits: GpuLimits | None, n_gpus: int
) -> RunFigures:
    """What the note rules read about a run: its job total's GPUs and the agents' idle episodes."""
    lines = device_lines(total, limits)
    return RunFigures(
        gpus=[d for d in lines if d.kind == "gpu" and not d.modelled],
        limits=limits,
        episodes=idle_episodes(steps),
        idle_gpus=idle_gpus(lines, limits),
        measured_s=total.duration_s,
        gpu_energy_j=total.gpu_energy_j,
        n_gpus=n_gpus,
    )


def _invalid_notes(records: Sequence[StepRecord], run: int) -> tuple[str, ...]:
    return tuple(
        f"{s.step}/node{k}: {why}" for s in records if s.run == run for k, why in sorted(s.invalid.items())
    )


_KEY: dict[GroupBy, Callable[[RunEnergy], str]] = {
    GroupBy.USER: lambda r: r.user,
    GroupBy.ACCOUNT: lambda r: r.account,
    GroupBy.PARTITION: lambda r: r.partition,
    GroupBy.GPU_TYPE: lambda r: r.gpu_type,
}


def aggregate(
    runs: Sequence[RunEnergy], by: GroupBy, intensity: GridIntensity | None = None
) -> tuple[list[GroupTotals], GroupTotals]:
    """Groups sorted by energy (largest first) and the grand total; CO2 only with an intensity."""
    groups: dict[str, GroupTotals] = {}
    total = GroupTotals("TOTAL")
    for r in runs:
        for g in (groups.setdefault(_KEY[by](r) or "-", GroupTotals(_KEY[by](r) or "-")), total):
            g.jobs.add(r.job_id)
            g.runs += 1
            for rule in r.notes:
                g.notes.setdefault(rule, []).append(r.job_id + (f"+r{r.run}" if r.run else ""))
            g.gpu_hours += r.gpu_hours
            if r.energy_j is None:
                continue
            g.profiled_runs += 1
            g.profiled_gpu_hours += r.gpu_hours
            g.profiled_s += r.elapsed_s
            g.energy_j += r.energy_j
            if r.measured_s:
                g.measured_s += r.measured_s
                g.measured_energy_j += r.energy_j
            if r.requeued:  # all of it lost, idle GPUs included
                g.requeue_energy_j += r.energy_j
            else:
                g.idle_gpu_energy_j += r.idle_gpu_energy_j or 0.0
            if intensity is not None:
                g.co2_g = (g.co2_g or 0.0) + r.energy_j / J_PER_KWH * intensity.at(r.midpoint_s)
    ordered = sorted(groups.values(), key=lambda g: (-g.energy_j, g.key))
    return ordered, total


# ------------------------------------------------------------------------------------------ output

COLUMNS = (
    ("Group", "key", None),
    ("Jobs", "jobs", None),
    ("Runs", "runs", None),
    ("Profiled", "profiled_runs", None),
    ("Energy_kWh", "energy_j", ".4g"),
    ("GPU_h", "gpu_hours", ".3f"),
    ("MeanPower_W", "mean_power_w", ".1f"),
    ("kWh_per_GPU_h", "energy_per_gpu_hour_j", ".4g"),
    ("Requeue_kWh", "requeue_energy_j", ".4g"),
    ("IdleGPU_kWh", "idle_gpu_energy_j", ".4g"),
    ("CO2_kg", "co2_g", ".4g"),
)


def table_rows(
    groups: Sequence[GroupTotals], total: GroupTotals, co2: bool
) -> tuple[list[str], list[list[str]]]:
    """Header and formatted cells, the grand total last; kWh and kg at the edge (SI inside)."""
    cols = [c for c in COLUMNS if co2 or c[1] != "co2_g"]
    rows = []
    for g in [*groups, total]:
        d = g.to_dict()
        cells = []
        for _name, key, digits in cols:
            v = d[key]
            if key in ("energy_j", "energy_per_gpu_hour_j", "requeue_energy_j", "idle_gpu_energy_j"):
                v = None if v is None else v / J_PER_KWH
            elif key == "co2_g" and v is not None:
                v = v / 1000.0
            cells.append("-" if v is None else format(v, digits) if digits is not None else str(v))
        rows.append(cells)
    header = [c[0] for c in cols]
    return header, rows


def render_markdown(
    title: str, header: Sequence[str], rows: Sequence[Sequence[str]], notes: Sequence[str]
) -> str:
    out = [f"# {title}", ""]
    out.extend(notes)
    if notes:
        out.append("")
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "---|" * len(header))
    out.extend("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows)
    return "\n".join(out) + "\n"


def render_csv(groups: Sequence[GroupTotals], total: GroupTotals) -> str:
    """SI and snake_case, one row per group then the total."""
    buf = io.StringIO()
    keys = list(total.to_dict())
    w = csv.DictWriter(buf, keys, lineterminator="\n")
    w.writeheader()
    for g in [*groups, total]:
        w.writerow({k: ("" if v is None else v) for k, v in g.to_dict().items()})
    return buf.getvalue()


def render_json(
    by: GroupBy,
    period: Mapping[str, Any],
    groups: Sequence[GroupTotals],
    total: GroupTotals,
    intensity: str | None,
    notes: bool = False,
) -> str:
    """The report as one document; with `notes`, each group and the total carry `efficiency_notes`."""

    def doc(g: GroupTotals) -> dict[str, Any]:
        d = g.to_dict()
        if notes:
            d["efficiency_notes"] = notes_document(g)
        return d

    return json.dumps(
        {
            "schema_version": SCHEMA_VERSION,
            "group_by": by.value,
            "period": dict(period),
            "grid_intensity": intensity,
            "groups": [doc(g) for g in groups],
            "total": doc(total),
        },
        indent=1,
    )


def notes_document(g: GroupTotals) -> dict[str, Any]:
    """{rule: {"runs": N, "jobs": [...]}} in NOTE_RULES order."""
    return {rule: {"runs": len(jobs), "jobs": list(jobs)} for rule, jobs in g.notes.items()}


#: at most this many job ids are named per group and rule in the text and Markdown notes
NOTE_JOBS_SHOWN = 5


def notes_rows(groups: Sequence[GroupTotals], total: GroupTotals) -> tuple[list[str], list[list[str]]]:
    """The `--notes` table: one row per group and rule, with its runs, idle-GPU energy (kWh) and jobs."""
    header = ["Group", "Note", "Runs", "IdleGPU_kWh", "Jobs"]
    rows = []
    for g in [*groups, total]:
        for rule, jobs in sorted(g.notes.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            shown = ",".join(jobs[:NOTE_JOBS_SHOWN]) + (" ..." if len(jobs) > NOTE_JOBS_SHOWN else "")
            idle = format(g.idle_gpu_energy_j / J_PER_KWH, ".4g") if rule == "idle_gpus" else "-"
            rows.append([g.key, rule, str(len(jobs)), idle, shown if g is not total else "-"])
    return header, rows


def plot_report(groups: Sequence[GroupTotals], out: Path, title: str) -> Path | None:
    """Stacked bars per group: energy of kept runs, lost to requeues, of idle allocated GPUs (kWh)."""
    from easlurm.plots import plot_stacked_bars  # here: matplotlib, only for --plot

    if not groups:
        return None
    useful = [max(g.energy_j - g.requeue_energy_j - g.idle_gpu_energy_j, 0.0) / J_PER_KWH for g in groups]
    return plot_stacked_bars(
        [g.key for g in groups],
        {
            "kept runs": useful,
            "lost to requeues": [g.requeue_energy_j / J_PER_KWH for g in groups],
            "idle allocated GPUs": [g.idle_gpu_energy_j / J_PER_KWH for g in groups],
        },
        out,
        title,
        "energy (kWh)",
    )
