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
from easlurm.units import format_energy, format_power

log = logging.getLogger(__name__)

COLUMNS = ("JobID", "Placement", "PredPower", "PredEnergy", "PredTime", "Action", "Reason")


@dataclass(frozen=True)
class StartPrediction:
    """The oracle's prediction of a start for the job's remaining steps (all its GPUs); None: unknown."""

    energy_j: float | None
    time_s: float | None


def predict_starts(decision: Decision, snapshot: ClusterSnapshot, oracle: Any) -> dict[str, StartPrediction]:
    """Predicted energy (J) and run time (s) of each start of the decision, for the job's remaining work (its
    remaining samples, in steps of the start's batch)."""
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
            if job.sharding != "none" or job.act_ckpt:
                wl = wl.trained_with(job.sharding, job.act_ckpt)
            limit = start.power_limit_w if start.power_limit_w is not None else math.nan
            per_node = oracle.catalogue.get(start.gpu_type).gpus_per_node
            m = oracle_nodes(np.array([start.n_gpus]), np.array([start.n_nodes]), per_node)
            pred = oracle.predict(
                wl, Placements.of([start.n_gpus], [start.batch], [start.gpu_type], [limit], m)
            )
            steps = _steps(job) * job.batch_options[0] / start.batch  # its remaining samples at this batch
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
    """One row per job the cycle decided about, acted on or ranked, from the report's JSON form (`to_dict`):
    starts first (the decision's order), then preemptions, holds, the jobs acted on, and the jobs only
    ranked (in rank order). Predictions and reasons in words come from the report's `jobs` views."""
    decision = report.get("decision") or {}
    views = report.get("jobs") or {}
    failed = {(f["action"]["kind"], f["action"]["job_id"]): f["error"] for f in report.get("failed") or ()}
    rows: dict[str, dict[str, Any]] = {}

    def row(job_id: str) -> dict[str, Any]:
        return rows.setdefault(job_id, {"JobID": job_id, "actions": [], "reasons": []})

    for start in decision.get("starts") or ():
        r = row(str(start["job_id"]))
        r["Placement"] = placement_text(StartJob(**{k: v for k, v in start.items() if k in _START_FIELDS}))
    for job_id in decision.get("preempt") or ():
        row(str(job_id))
    for job_id in decision.get("hold") or ():
        row(str(job_id))
    for act in report.get("actions") or ():
        r = row(str(act["job_id"]))
        kind = act["kind"]
        error = failed.get((kind, act["job_id"]))
        r["actions"].append(f"{kind}(failed)" if error else kind)
        why = (views.get(str(act["job_id"])) or {}).get("why") or {}
        if error:
            _add(r, f"{kind}: {error}")
        elif kind not in ("env", "place") or not why:
            _add(r, why.get(kind) or act.get("reason") or "")
    ranked = sorted((v for v in views.values() if v.get("rank")), key=lambda v: v["rank"])
    for view in ranked:
        row(str(view["job_id"]))
    return [_row_out(r, views.get(r["JobID"]) or {}, report, decision) for r in rows.values()]


def _add(row: dict[str, Any], why: str) -> None:
    if why and why not in row["reasons"]:
        row["reasons"].append(why)


def _row_out(
    r: dict[str, Any], view: Mapping[str, Any], report: Mapping[str, Any], decision: Mapping[str, Any]
) -> dict[str, str]:
    """A row's columns: the view's placement and predictions (the start's where it starts), its reasons."""
    job_id = r["JobID"]
    pred = (report.get("predictions") or {}).get(job_id) or {}
    started = any(str(s["job_id"]) == job_id for s in decision.get("starts") or ())
    if view.get("why", {}).get("spared"):
        _add(r, view["why"]["spared"])
    if not r["reasons"]:
        head = "starts now" if started else ("preempt" if job_id in (decision.get("preempt") or ()) else "")
        _add(r, ", ".join(t for t in (head, view.get("score") or "") if t))
    return {
        "JobID": job_id,
        "Placement": r.get("Placement") or view.get("placement") or "",
        "PredPower": format_power(view.get("power_w"), ""),
        "PredEnergy": format_energy(view.get("energy_j", pred.get("energy_j"))),
        "PredTime": format_duration(view.get("time_s", pred.get("time_s"))),
        "Action": ",".join(dict.fromkeys(r["actions"])) or "none",
        "Reason": "; ".join(r["reasons"]),
    }


_START_FIELDS = {f for f in StartJob.__dataclass_fields__}


def render_report(report: Mapping[str, Any]) -> str:
    """The table `schedd --once` prints (sacct-like), with a one-line summary above it."""
    rows = decision_rows(report)
    mode = "dry run: nothing changed" if report.get("dry_run") else "applied"
    head = f"schedd cycle ({mode}): {len(rows)} job(s)"
    if report.get("error"):
        head += f"; error: {report['error']}"
    lines = [head]
    if report.get("power"):
        lines.append(power_line(report["power"]))
    lines += [f"warning: {w}" for w in report.get("warnings") or ()]
    if rows:
        left = ("Placement", "Action", "Reason")  # words read from the left
        widths = [-max(len(c), *(len(r[c]) for r in rows)) if c in left else None for c in COLUMNS]
        lines.append(render_table(COLUMNS, rows, widths=widths))
    return "\n".join(lines)


def power_line(power: Mapping[str, Any]) -> str:
    """The `power:` line of `schedd --once` from the report's `power` (PowerView.to_dict)."""
    line = (
        f"power: running {power['running_w']:.0f} W + idle floor {power['idle_floor_w']:.0f} W"
        f" ({power['free_gpus']} free GPUs) = {power['now_w']:.0f} W now"
    )
    if power.get("starts_w"):
        line += f", {power['projected_w']:.0f} W after this cycle's starts ({power['starts_w']:+.0f} W)"
    budget = power.get("budget_w")
    if budget is None:
        return line + "; no budget"
    line += f"; budget {budget:.0f} W"
    site = power.get("site_budget_w")
    if site is not None and site - budget > 0.5:
        line += f" (site {site:.0f} W less {site - budget:.0f} W kept for uncontrolled jobs)"
    over = power["projected_w"] - budget
    return line + (f": over by {over:.0f} W" if over > 0 else f": {-over:.0f} W left")
