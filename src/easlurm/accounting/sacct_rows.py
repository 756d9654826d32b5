"""The rows `easlurm sacct` prints: sacct's fields beside the energy decoded from easlurm's step records,
as cells, tables and JSON; the job totals seff and report also use."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from easlurm.accounting.record_checks import checked
from easlurm.accounting.spool import spool_records
from easlurm.accounting.step_record import (
    ADMIN_COMMENT_MAX_STEPS,
    CarriedTotal,
    DeviceRecord,
    NodeRecord,
    StepRecord,
    decode_admin_document,
    job_total,
    run_step_key,
)
from easlurm.energy.result import sum_known
from easlurm.errors import EaslurmError
from easlurm.slurm.sacct_values import json_key, json_value
from easlurm.units import format_edp, format_energy, format_power, format_raw

log = logging.getLogger(__name__)

#: 2: sacct's own fields are numbers in the unit their key names (n_nodes, elapsed_s, consumed_energy_j).
JSON_SCHEMA_VERSION = 2

#: easlurm's columns -> (JSON key, what it holds).
ENERGY_COLUMNS: dict[str, tuple[str, str]] = {
    "GPUEnergy": ("gpu_energy_j", "GPU energy of the step (all nodes), J"),
    "CPUEnergy": ("cpu_energy_j", "CPU package energy (RAPL), J"),
    "DRAMEnergy": ("dram_energy_j", "DRAM energy (measured or modelled), J"),
    "TotalEnergy": ("total_energy_j", "sum of the above, J"),
    "AvgPower": (
        "mean_power_w",
        "TotalEnergy / measured window (the longest node's record, from the step's start: not Slurm's Elapsed), W",
    ),
    "EDP": ("edp_j_s", "energy-delay product, J*s"),
    "RequeueEnergy": (
        "requeue_energy_j",
        "job rows: TotalEnergy of the job's earlier runs (requeued or preempted), J",
    ),
    "EnergyFlags": (
        "energy_flags",
        "partial (some node's energy is not in the row), missing-nodes:<ids> (nodes of the step, by index, "
        "without a record), invalid-nodes:<ids> (records no run could have written: negative, non-finite, "
        "ending before they start, or above what the GPUs can draw; never summed), spool-full (the agent "
        "could not keep its files: the record came from node 0's memory), no-record (a step of a profiled "
        "run without any record; on the job row: steps whose energy the total lacks), nosensor:<kinds> (a requested device had no sensor on a node: its energy is unknown, "
        "not zero), modelled:<kinds>, degraded:<devices>, detail:<level>, apportioned:<gpu>:<how> (a GPU "
        "shared with another job: this step's share, split by utilisation or time), late-start:<ids> (nodes "
        "whose record covers under 99% of the step's wall time: the agent started more than 30 s after the "
        "step, or the record predates the lead-in's cover; that part is not in the row), spool (read from the spool files), "
        "damaged, ended:<state> (a step ended by cancel, requeue, preemption, time limit ...), "
        "job-total (a job row's sum of its steps)",
    ),
    "PowerLimit": (
        "power_limit_w",
        "GPU power limit the step ran at, W per GPU (empty: the default limit; a requested limit that "
        "could not be set is flagged limit-unset:<W> in EnergyFlags)",
    ),
    "Node": ("node", "host of a --detail row"),
    "Device": ("device", "device of a --detail=device row"),
}
#: `<column>Raw`: the number in the SI unit its key names (J, W, J*s), as sacct's ConsumedEnergyRaw.
RAW_COLUMNS: dict[str, str] = {
    f"{name}Raw": name
    for name in (
        "GPUEnergy",
        "CPUEnergy",
        "DRAMEnergy",
        "TotalEnergy",
        "AvgPower",
        "EDP",
        "RequeueEnergy",
        "PowerLimit",
    )
}
EASLURM_COLUMNS = (*ENERGY_COLUMNS, *RAW_COLUMNS)
DEFAULT_COLUMNS = (
    "JobID",
    "JobName",
    "State",
    "Elapsed",
    "NNodes",
    "GPUEnergy",
    "CPUEnergy",
    "DRAMEnergy",
    "TotalEnergy",
    "AvgPower",
    "EDP",
)
_KIND_COLUMN = {"gpu": "GPUEnergy", "cpu": "CPUEnergy", "dram": "DRAMEnergy"}


def _flags(step: StepRecord) -> str:
    flags = []
    if step.partial:
        flags.append("partial")
    if step.missing_nodes:
        flags.append("missing-nodes:" + "+".join(map(str, step.missing_nodes)))
    if step.invalid:
        flags.append("invalid-nodes:" + "+".join(map(str, sorted(step.invalid))))
    if step.spool_error:
        flags.append("spool-full")
    if step.no_sensor_kinds:
        flags.append("nosensor:" + "+".join(step.no_sensor_kinds))
    if step.modelled_kinds:
        flags.append("modelled:" + "+".join(step.modelled_kinds))
    degraded = sorted({d.name for n in step.nodes for d in n.devices if d.error})
    if degraded:
        flags.append("degraded:" + "+".join(degraded))
    if step.detail != "device":
        flags.append(f"detail:{step.detail}")
    if step.apportioned_devices:
        flags.append("apportioned:" + "+".join(step.apportioned_devices))
    if step.late_nodes:
        flags.append("late-start:" + "+".join(map(str, step.late_nodes)))
    unset = step.power_limit_unset_w
    if unset is not None:
        flags.append(f"limit-unset:{unset:g}W")
    return ",".join(flags)


def step_values(step: StepRecord) -> dict[str, Any]:
    """Energy columns of a step row, in SI units (None = unknown)."""
    return {
        "GPUEnergy": step.gpu_energy_j,
        "CPUEnergy": step.cpu_energy_j,
        "DRAMEnergy": step.dram_energy_j,
        "TotalEnergy": step.total_energy_j,
        "AvgPower": step.mean_power_w,
        "EDP": step.edp,
        "PowerLimit": step.power_limit_w,
        "EnergyFlags": _flags(step),
    }


def node_values(node: NodeRecord) -> dict[str, Any]:
    total = node.total_energy_j
    return {
        "GPUEnergy": node.kind_energy_j("gpu"),
        "CPUEnergy": node.kind_energy_j("cpu"),
        "DRAMEnergy": node.kind_energy_j("dram"),
        "TotalEnergy": total,
        "AvgPower": node.mean_power_w,
        "EDP": None if total is None or node.duration_s is None else total * node.duration_s,
        "PowerLimit": node.power_limit_w,
        "EnergyFlags": ",".join(
            (["error"] if node.error else [])
            + (["nosensor:" + "+".join(node.no_sensor)] if node.no_sensor else [])
            + (
                [f"limit-unset:{node.power_limit_requested_w:g}W"]
                if node.power_limit_requested_w and node.limit_error
                else []
            )
        ),
        "Node": node.host,
    }


def device_values(node: NodeRecord, dev: DeviceRecord) -> dict[str, Any]:
    dur = dev.duration_s if dev.duration_s is not None else node.duration_s
    out: dict[str, Any] = {
        "TotalEnergy": dev.energy_j if dev.in_total else None,
        "AvgPower": dev.mean_power_w,
        "EDP": None if dev.energy_j is None or dur is None else dev.energy_j * dur,
        "EnergyFlags": ",".join(
            f
            for f in (
                "modelled" if dev.modelled else "",
                "sub-domain" if not dev.in_total else "",
                f"apportioned:{dev.apportioned}" if dev.apportioned else "",
                dev.source,
            )
            if f
        ),
        "Node": node.host,
        "Device": dev.name,
    }
    if dev.kind in _KIND_COLUMN:
        out[_KIND_COLUMN[dev.kind]] = dev.energy_j
    return out


#: sacct states of a step that did not end by itself; its record is flagged `ended:<state>`.
INTERRUPTED_STATES = frozenset(
    {"CANCELLED", "TIMEOUT", "PREEMPTED", "REQUEUED", "NODE_FAIL", "DEADLINE", "OUT_OF_MEMORY", "BOOT_FAIL"}
)


def split_job_id(raw: str) -> tuple[str, str | None]:
    """'123' -> ('123', None); '123.batch' -> ('123', 'batch'); '123.0' -> ('123', '0')."""
    job, dot, step = raw.partition(".")
    return job, (step if dot else None)


def run_numbers(sacct_rows: Sequence[dict[str, str]]) -> list[int]:
    """Each row's run of its job, from sacct --duplicates order (a job's runs come oldest first, each
    job row followed by its steps): the run a record of SLURM_RESTART_COUNT belongs to."""
    seen: dict[str, int] = {}
    out = []
    for row in sacct_rows:
        job, step = split_job_id(row.get("JobIDRaw", ""))
        if step is None:
            seen[job] = seen.get(job, -1) + 1
        out.append(max(seen.get(job, 0), 0))
    return out


def build_rows(
    sacct_rows: Sequence[dict[str, str]],
    detail: str | None = None,
    spool: Path | None = None,
    duplicates: bool = True,
) -> tuple[list[dict[str, Any]], dict[str, list[StepRecord]]]:
    """Attach decoded step records to sacct rows (given in `sacct --duplicates` order, so each row's run
    is known); with `detail`, add node (and device) rows under each step. With `spool`, steps missing
    from AdminComment are read from the spool files when readable. Job rows get the run's total
    (`job_total`) and the earlier runs' energy; without `duplicates` only each job's last run is shown."""
    runs = run_numbers(sacct_rows)
    records, damaged, from_spool = _job_records(sacct_rows, spool)
    unrecorded = unrecorded_steps(sacct_rows, runs, records)
    last_run = {split_job_id(r.get("JobIDRaw", ""))[0]: run for r, run in zip(sacct_rows, runs, strict=True)}
    out: list[dict[str, Any]] = []
    for row, run in zip(sacct_rows, runs, strict=True):
        job, step = split_job_id(row.get("JobIDRaw", ""))
        if not duplicates and run != last_run[job]:
            continue
        values: dict[str, Any] = dict(row)
        job_steps = records.get(job, {})
        rec: StepRecord | None = None
        if step is not None:
            rec = job_steps.get(run_step_key(step, run))
        else:
            rec = job_total([s for s in job_steps.values() if s.run == run])
            earlier = [job_total([s for s in job_steps.values() if s.run == r]) for r in range(run)]
            known = [t.total_energy_j for t in earlier if t is not None]
            values["RequeueEnergy"] = sum_known(known) if known else None
        if rec is not None:
            values.update(step_values(rec))
            flags = [values["EnergyFlags"]]
            if step is None:
                flags.insert(0, "job-total")
                lacking = unrecorded.get((job, run))
                if lacking:  # a step of the run has no record at all: its energy is not in the total
                    flags[1:1] = [] if rec.partial else ["partial"]
                    flags.append("no-record:" + "+".join(lacking))
                if isinstance(rec, CarriedTotal):
                    flags.append(f"detail-omitted:{len(rec.omitted)}")
            elif (job, rec.key) in from_spool:
                flags.insert(0, "spool")
            state = (row.get("State") or "").split(" ")[0]
            if step is not None and state in INTERRUPTED_STATES:
                flags.append(f"ended:{state.lower()}")
            elif step is not None and run < last_run[job] and state != "COMPLETED":
                # a later run exists, so the requeue ended this one: its batch script, killed by the
                # requeue, shows FAILED or CANCELLED depending on how the signal reached it
                flags.append("ended:requeued")
            values["EnergyFlags"] = ",".join(f for f in flags if f)
        elif job in damaged:
            values["EnergyFlags"] = "damaged"
        elif step is not None and step in unrecorded.get((job, run), ()):
            values["EnergyFlags"] = "no-record"
        elif step is not None and run_step_key(step, run) in omitted_keys(job_steps, run):
            values["EnergyFlags"] = "omitted"
        values["_record"] = rec if step is not None else None
        out.append(values)
        if rec is not None and detail is not None and step is not None:
            out.extend(_detail_rows(row, rec, detail))
    return out, {job: list(steps.values()) for job, steps in records.items()}


def unrecorded_steps(
    sacct_rows: Sequence[dict[str, str]], runs: Sequence[int], records: dict[str, dict[str, StepRecord]]
) -> dict[tuple[str, int], list[str]]:
    """{(job, run): its ended steps without a record} for runs that have records (profiled): such a step's
    agents wrote nothing readable here (node 0's died and the spool is not readable, say), so the job's
    total lacks it."""
    out: dict[tuple[str, int], list[str]] = {}
    for row, run in zip(sacct_rows, runs, strict=True):
        job, step = split_job_id(row.get("JobIDRaw", ""))
        if step is None or not (step == "batch" or step.isdigit()):
            continue
        have = records.get(job, {})
        state = (row.get("State") or "").split(" ")[0]
        key = run_step_key(step, run)
        if state in ("RUNNING", "PENDING") or key in have or key in omitted_keys(have, run):
            continue
        if any(s.run == run for s in have.values()):
            out.setdefault((job, run), []).append(step)
    return out


def omitted_keys(job_steps: dict[str, StepRecord], run: int) -> list[str]:
    """The keys of a run's steps whose records its AdminComment left out and no spool file gave back."""
    carried = job_steps.get(run_step_key("job", run))
    return carried.omitted if isinstance(carried, CarriedTotal) else []


def _job_records(
    sacct_rows: Sequence[dict[str, str]], spool: Path | None
) -> tuple[dict[str, dict[str, StepRecord]], set[str], set[tuple[str, str]]]:
    """Every job's step records by step key, from its AdminComment and then, for steps it lacks, from the
    spool; also the jobs whose AdminComment is damaged and the (job, step key) read from the spool, so
    their rows can say so. A run whose AdminComment left steps out that the spool does not give back
    keeps the total carried there (a CarriedTotal under the key `job`), naming the steps still missing."""
    records: dict[str, dict[str, StepRecord]] = {}
    damaged: set[str] = set()
    from_spool: set[tuple[str, str]] = set()
    for row in sacct_rows:
        job, step = split_job_id(row.get("JobIDRaw", ""))
        if step is not None:
            continue
        if row.get("AdminComment"):
            try:
                doc = decode_admin_document(row["AdminComment"])
                published = {s.key: checked(s) for s in [*doc.steps, *doc.totals]}
            except EaslurmError as exc:
                log.warning("job %s: %s", job, exc)
                damaged.add(job)
            else:
                records.setdefault(job, {}).update(published)
                # a requeued job's earlier row may have read these from the spool: AdminComment has them
                from_spool.difference_update((job, key) for key in published)
                if doc.dropped:
                    log.warning(
                        "job %s: its AdminComment (easlurm1) left out its %d oldest steps; their records "
                        "are only in the spool files (--spool DIR)",
                        job,
                        doc.dropped,
                    )
        if spool is not None:
            for name, found in spool_records(spool, job, have=records.get(job, {}).keys()).items():
                if name not in records.setdefault(job, {}):
                    records[job][name] = checked(found)
                    from_spool.add((job, name))
    for job, steps in records.items():
        _settle_carried(job, steps, spool)
    return records, damaged, from_spool


def _settle_carried(job: str, steps: dict[str, StepRecord], spool: Path | None) -> None:
    """Drop a run's carried total once every step it left out has a record (the rows' own total is then
    exact); otherwise keep it, naming the steps still without one, and say where their records are."""
    for key, rec in list(steps.items()):
        if not isinstance(rec, CarriedTotal):
            continue
        lacking = [k for k in rec.omitted if k not in steps]
        if not lacking:
            del steps[key]
            continue
        steps[key] = dataclasses.replace(rec, omitted=lacking)
        where = f"not readable in {spool} here" if spool else "read them with --spool DIR"
        log.warning(
            "job %s: AdminComment carries at most %d steps in detail; %d step record(s) of run %d are only in "
            "the spool files (%s); the job row shows the total it carries (detail-omitted)",
            job,
            ADMIN_COMMENT_MAX_STEPS,
            len(lacking),
            rec.run,
            where,
        )


def _detail_rows(row: dict[str, str], rec: StepRecord, detail: str) -> list[dict[str, Any]]:
    """The rows under a step's row: one per node, each followed by its devices with detail "device"."""
    ids = {"JobID": row.get("JobID", ""), "JobIDRaw": row.get("JobIDRaw", "")}
    out: list[dict[str, Any]] = []
    for node in rec.nodes:
        out.append({**ids, **node_values(node)})
        if detail == "device":
            out.extend({**ids, **device_values(node, d)} for d in node.devices)
    return out


def format_cell(column: str, value: Any, prefix: str | None = None) -> Any:
    """A cell of the table and -p/-P: energy in J with an SI prefix (the largest that keeps the number
    >= 1, or `prefix`: sacct's --units; "" for --noconvert), power in W, EDP in J*s; `*Raw` columns plain
    numbers in J, W and J*s."""
    if column in RAW_COLUMNS:
        return format_raw(value)
    if value is None or column not in ENERGY_COLUMNS:
        return value
    if column in ("AvgPower", "PowerLimit"):
        return format_power(value, prefix)
    if column == "EDP":
        return format_edp(value, prefix)
    if column.endswith("Energy"):
        return format_energy(value, prefix)
    return value


def row_value(row: dict[str, Any], column: str) -> Any:
    """A row's value of a column; a `*Raw` column reads its energy column's number."""
    return row.get(RAW_COLUMNS.get(column, column))


def _json_key(column: str) -> str:
    if column in ENERGY_COLUMNS:
        return ENERGY_COLUMNS[column][0]
    return json_key(column)


def render_json(columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> str:
    """One document: snake_case keys with units, numbers in SI, and each step's full record."""
    doc_rows = []
    for row in rows:
        item: dict[str, Any] = {}
        for c in columns:
            if c in ENERGY_COLUMNS:
                item[_json_key(c)] = row.get(c)
            elif c not in RAW_COLUMNS:  # JSON numbers are raw already
                raw = row.get(c)
                item[_json_key(c)] = None if raw is None else json_value(c, raw)
        rec = row.get("_record")
        if rec is not None:
            item["energy_record"] = rec.to_dict()
        doc_rows.append(item)
    return json.dumps({"schema_version": JSON_SCHEMA_VERSION, "rows": doc_rows}, indent=1)


def selection_argv(options: dict[str, Any]) -> list[str]:
    """sacct selection options as a list argv (values are never seen by a shell)."""
    argv: list[str] = []
    for flag, key in (
        ("--jobs", "jobs"),
        ("--user", "user"),
        ("--account", "account"),
        ("--starttime", "starttime"),
        ("--endtime", "endtime"),
        ("--state", "state"),
        ("--partition", "partition"),
        ("--nodelist", "nodelist"),
        ("--name", "name"),
        ("--qos", "qos"),
        ("--units", "units"),
    ):
        if options.get(key):
            argv.append(f"{flag}={options[key]}")
    for flag, key in (
        ("--allusers", "allusers"),
        ("--allocations", "allocations"),
        ("--duplicates", "duplicates"),
        ("--noconvert", "noconvert"),
    ):
        if options.get(key):
            argv.append(flag)
    return argv
