"""Outcome metrics of one simulation: throughput, energy, JCT, deadlines, fairness, power, preemption."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from easlurm.sim.engine.ledger import PowerLedger
from easlurm.sim.engine.records import JobRecord

NAN = math.nan


def jain_index(values: Sequence[float]) -> float:
    """(sum x)^2 / (n sum x^2): 1 when all equal, 1/n when one takes all; NaN with fewer than two
    values (fairness between users needs two users: one alone is not "perfectly fair")."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) < 2 or not np.any(x):
        return NAN
    return float(x.sum() ** 2 / (len(x) * (x * x).sum()))


def _gpu_energy_j(ledger: PowerLedger, end_s: float) -> float:
    """The GPUs' own energy (what a power budget bounds): the integral of the ledger's GPU power."""
    t, p = ledger.gpu_series()
    return float(np.sum(p * np.diff(np.append(t, end_s))))


def job_rows(records: Sequence[JobRecord]) -> list[dict[str, Any]]:
    rows = []
    for r in records:
        s = r.spec
        met = None
        if s.deadline_s is not None and r.end_s is not None:
            met = r.end_s <= s.deadline_s
        rows.append(
            {
                "job_id": s.job_id,
                "user": s.user,
                "model": s.model,
                "submit_s": s.submit_s,
                "start_s": r.start_s,
                "end_s": r.end_s,
                "energy_j": r.energy_j,
                "wasted_energy_j": r.wasted_energy_j,
                "node": r.node,
                "gpu_type": r.gpu_type,
                "n_gpus": r.n_gpus,
                "n_nodes": r.n_nodes,
                "batch": r.batch,
                "power_limit_w": r.power_limit_w,
                "urgent": s.urgent,
                "deadline_s": s.deadline_s,
                "met_deadline": met,
                "preemptions": r.preemptions,
                "shared_s": r.shared_s,
                "resume_wait_s": r.resume_wait_s,
            }
        )
    return rows


def compute(
    records: Sequence[JobRecord],
    ledger: PowerLedger,
    end_s: float,
    busy_gpu_s_by_type: dict[str, float],
    gpus_by_type: dict[str, int],
    power_budget_w: float | None,
) -> tuple[dict[str, float], dict[str, float]]:
    """(flat metrics, per-user GPU-second shares). Missing values are NaN (JSON null)."""
    done = [r for r in records if r.end_s is not None]
    jct = np.array([r.end_s - r.spec.submit_s for r in done if r.end_s is not None], dtype=np.float64)
    hours = end_s / 3600.0 if end_s > 0 else NAN
    # deadlines: urgent jobs that finished, or whose deadline passed before the end
    judged = [
        r
        for r in records
        if r.spec.urgent
        and r.spec.deadline_s is not None
        and (r.end_s is not None or r.spec.deadline_s <= end_s)
    ]
    missed = sum(1 for r in judged if r.end_s is None or r.end_s > (r.spec.deadline_s or math.inf))
    by_user: dict[str, list[float]] = {}
    for r in done:
        if r.end_s is not None:
            by_user.setdefault(r.spec.user, []).append(r.end_s - r.spec.submit_s)
    gpu_s_by_user: dict[str, float] = {}
    for r in records:
        if r.gpu_s > 0:
            gpu_s_by_user[r.spec.user] = gpu_s_by_user.get(r.spec.user, 0.0) + r.gpu_s
    total_gpu_s = sum(gpu_s_by_user.values())
    shares = {u: v / total_gpu_s for u, v in sorted(gpu_s_by_user.items())} if total_gpu_s > 0 else {}
    energy_j = ledger.total_j
    metrics: dict[str, float] = {
        "submitted_jobs": float(len(records)),
        "completed_jobs": float(len(done)),
        "throughput_jobs_per_h": len(done) / hours if hours == hours else NAN,
        "energy_j": energy_j,
        "busy_energy_j": ledger.busy_j,
        "idle_energy_j": ledger.idle_j,
        "off_energy_j": ledger.off_j,
        "cycle_energy_j": ledger.cycle_j,
        "energy_per_job_j": energy_j / len(done) if done else NAN,
        "mean_jct_s": float(jct.mean()) if len(jct) else NAN,
        "p95_jct_s": float(np.percentile(jct, 95)) if len(jct) else NAN,
        "urgent_jobs": float(len(judged)),
        "deadline_miss_rate": missed / len(judged) if judged else NAN,
        "jain_index": jain_index([float(np.mean(v)) for v in by_user.values()]),
        "mean_power_w": energy_j / end_s if end_s > 0 else NAN,
        "mean_gpu_power_w": _gpu_energy_j(ledger, end_s) / end_s if end_s > 0 else NAN,
        "max_power_w": ledger.max_gpu_w(),
        "max_cluster_power_w": ledger.max_w(),
        "power_budget_w": NAN if power_budget_w is None else float(power_budget_w),
        "time_over_budget_s": ledger.time_above_s(power_budget_w) if power_budget_w is not None else NAN,
        "preemptions": float(sum(r.preemptions for r in records)),
        "preempted_energy_j": sum(r.wasted_energy_j for r in records),
        "colocated_jobs": float(sum(1 for r in records if r.shared_s > 0)),
        "shared_job_h": sum(r.shared_s for r in records) / 3600.0,
    }
    for gpu_type, n in sorted(gpus_by_type.items()):
        key = "util_" + gpu_type.replace("-", "_")
        metrics[key] = busy_gpu_s_by_type.get(gpu_type, 0.0) / (n * end_s) if end_s > 0 else NAN
    return metrics, shares
