"""A cycle's decisions as rows an operator reads: job, placement, predicted energy and time, action, reason."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from easlurm.errors import EaslurmError
from easlurm.model.oracle import Placements
from easlurm.model.zoo import get_workload
from easlurm.priority.options import oracle_nodes
from easlurm.priority.snapshot import ClusterSnapshot, Decision, PendingJob, StartJob
from easlurm.table import render_table
from easlurm.units import format_energy

log = logging.getLogger(__name__)

COLUMNS = ("JobID", "Placement", "PredEnergy", "PredTime", "Action", "Reason")


@dataclass(frozen=True)
class StartPrediction:
    """The oracle's prediction of a start for the job's remaining steps (all its GPUs); None: unknown."""

    energy_j: float | None
    time_s: float | None


def predict_starts(decision: Decision, snapshot: ClusterSnapshot, oracle: Any) -> dict[str, StartPrediction]:
    """Predicted energy (J) and run time (s) of each start of the decision, for the job's remaining steps."""
    pending = {p.job_id: p for p in snapshot.pending}
    out: dict[str, StartPrediction] = {}
    for start in decision.starts:
        job = pending.get(start.job_id)
        if job is None:
            continue
        try:
            wl = get_workload(
                job.model, precision=job.precision, seq_len=job.seq_len, image_size=job.image_size
            )
            limit = start.power_limit_w if start.power_limit_w is not None else math.nan
            per_node = oracle.catalogue.get(start.gpu_type).gpus_per_node
            m = oracle_nodes(np.array([start.n_gpus]), np.array([start.n_nodes]), per_node)
            pred = oracle.predict(
                wl, Placements.of([start.n_gpus], [start.batch], [start.gpu_type], [limit], m)
            )
            steps = _steps(job)
            out[start.job_id] = StartPrediction(
                energy_j=_finite(float(pred.energy_j[0]) * steps),
                time_s=_finite(float(pred.step_time_s[0]) * steps),
            )
        except (EaslurmError, ValueError, KeyError) as exc:
            log.debug("job %s: no prediction for the report: %s", start.job_id, exc)
            out[start.job_id] = StartPrediction(None, None)
    return out


def _steps(job: PendingJob) -> float:
    return job.remaining_steps if math.isfinite(job.remaining_steps) else float(job.total_steps)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def format_duration(seconds: float | None) -> str:
    """H:MM:SS as sacct prints elapsed times; '' when unknown."""
    if seconds is None:
        return ""
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def placement_text(start: StartJob) -> str:
    text = f"{start.n_gpus}x{start.gpu_type}@{','.join(start.nodes) if start.nodes else start.node}"
    if start.power_limit_w is not None:
        text += f",{start.power_limit_w:g}W"
    if start.colocate_with is not None:
        text += f",with:{start.colocate_with}"
    return text


def decision_rows(report: Mapping[str, Any]) -> list[dict[str, str]]:
    """One row per job the cycle decided about or acted on, from the report's JSON form (`to_dict`):
    starts first (the decision's order), then preemptions, holds, and the jobs only reordered."""
    decision = report.get("decision") or {}
    preds = report.get("predictions") or {}
    failed = {(f["action"]["kind"], f["action"]["job_id"]): f["error"] for f in report.get("failed") or ()}
    rows: dict[str, dict[str, Any]] = {}

    def row(job_id: str) -> dict[str, Any]:
        return rows.setdefault(job_id, {"JobID": job_id, "actions": [], "reasons": []})

    for start in decision.get("starts") or ():
        r = row(str(start["job_id"]))
        r["Placement"] = placement_text(StartJob(**{k: v for k, v in start.items() if k in _START_FIELDS}))
        pred = preds.get(str(start["job_id"])) or {}
        r["PredEnergy"] = format_energy(pred.get("energy_j"))
        r["PredTime"] = format_duration(pred.get("time_s"))
        r["reasons"].append("start")
    for job_id in decision.get("preempt") or ():
        row(str(job_id))["reasons"].append("preempt")
    for job_id in decision.get("hold") or ():
        row(str(job_id))["reasons"].append("hold")
    for act in report.get("actions") or ():
        r = row(str(act["job_id"]))
        kind = act["kind"]
        error = failed.get((kind, act["job_id"]))
        r["actions"].append(f"{kind}(failed)" if error else kind)
        why = f"{kind}: {error}" if error else (act.get("reason") or "")
        if why and why not in r["reasons"]:
            r["reasons"].append(why)
    out = []
    for r in rows.values():
        out.append(
            {
                "JobID": r["JobID"],
                "Placement": r.get("Placement", ""),
                "PredEnergy": r.get("PredEnergy", ""),
                "PredTime": r.get("PredTime", ""),
                "Action": ",".join(dict.fromkeys(r["actions"])) or "none",
                "Reason": "; ".join(r["reasons"]),
            }
        )
    return out


_START_FIELDS = {f for f in StartJob.__dataclass_fields__}


def render_report(report: Mapping[str, Any]) -> str:
    """The table `schedd --once` prints (sacct-like), with a one-line summary above it."""
    rows = decision_rows(report)
    mode = "dry run: nothing changed" if report.get("dry_run") else "applied"
    head = f"schedd cycle ({mode}): {len(rows)} job(s)"
    if report.get("error"):
        head += f"; error: {report['error']}"
    if not rows:
        return head
    return head + "\n" + render_table(COLUMNS, rows)
