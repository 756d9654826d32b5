"""The trace's own recorded history (actual starts and ends) as a results row next to the policies'.

Energy of the recorded schedule is the oracle's (calibrated) power of each job's recorded placement
over its recorded run, plus the idle power of every GPU of the target cluster not busy at the time,
from time 0 (first submission) to the last recorded end: the same accounting a simulated run gets,
so the rows compare. Measured energy, where the trace has it, is reported beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from easlurm.sim.traces.mapping import Mapped


def jain_index(values: np.ndarray) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2), 1 = equal; None when undefined."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) == 0 or not np.any(x):
        return None
    return float(x.sum() ** 2 / (len(x) * np.square(x).sum()))


class RecordedBaseline:
    """Accumulates mapped jobs (streaming: a few numbers per job) and summarises the recorded schedule."""

    def __init__(self, idle_w_by_type: Mapping[str, float], gpus_by_type: Mapping[str, int]) -> None:
        self.idle_w_by_type = dict(idle_w_by_type)
        self.gpus_by_type = dict(gpus_by_type)
        self._cols: dict[str, list[float]] = {k: [] for k in ("submit", "start", "end", "power", "idle", "n")}
        self._models: list[str] = []
        self._deadline: list[float] = []
        self._users: list[str] = []
        self._measured_j: list[float] = []

    def add(self, m: Mapped) -> None:
        spec = m.spec
        if spec.recorded_start_s is None or spec.recorded_end_s is None:
            return
        c = self._cols
        c["submit"].append(spec.submit_s)
        c["start"].append(spec.recorded_start_s)
        c["end"].append(spec.recorded_end_s)
        c["power"].append(m.power_w)
        c["idle"].append(self.idle_w_by_type.get(m.gpu_type, 0.0) * m.n_gpus)
        c["n"].append(float(m.n_gpus))
        self._models.append(spec.model)
        judged = spec.urgent and spec.deadline_s is not None  # as the simulator judges deadlines
        self._deadline.append(spec.deadline_s if judged else np.nan)
        self._users.append(spec.user)
        measured = m.trace.measured_energy_j
        self._measured_j.append(np.nan if measured is None else measured)

    def __len__(self) -> int:
        return len(self._models)

    def result(
        self, power_scale: Mapping[str, float] | None = None, max_points: int = 4000
    ) -> dict[str, Any]:
        """`{"metrics": ..., "power_times_s": ..., "power_w": ..., "user_gpu_share": ...}` (JSON-safe)."""
        if not self._models:
            return {
                "metrics": {"completed_jobs": 0.0},
                "power_times_s": [],
                "power_w": [],
                "user_gpu_share": {},
            }
        cols = {k: np.asarray(v, dtype=np.float64) for k, v in self._cols.items()}
        scale = np.array([(power_scale or {}).get(m, 1.0) for m in self._models])
        power = cols["power"] * scale
        start, end, submit = cols["start"], cols["end"], cols["submit"]
        dur = np.maximum(end - start, 0.0)
        horizon = float(end.max())
        idle_total_w = sum(self.idle_w_by_type.get(t, 0.0) * n for t, n in self.gpus_by_type.items())
        busy_j = float(np.sum(power * dur))
        idle_j = float(idle_total_w * horizon - np.sum(cols["idle"] * dur))
        # Cluster power over time: idle of all GPUs + (job power - its GPUs' idle) while it runs.
        times = np.concatenate([start, end])
        delta = np.concatenate([power - cols["idle"], -(power - cols["idle"])])
        order = np.argsort(times, kind="stable")
        t_sorted, level = times[order], idle_total_w + np.cumsum(delta[order])
        last = np.r_[t_sorted[1:] != t_sorted[:-1], True]  # level after all changes at one instant
        t_steps, p_steps = t_sorted[last], level[last]
        jct = end - submit
        deadline = np.asarray(self._deadline)
        has_dl = ~np.isnan(deadline)
        users = np.asarray(self._users, dtype=object)
        gpu_s = dur * cols["n"]
        shares: dict[str, float] = {}
        per_user_jct = []
        total_gpu_s = float(gpu_s.sum())
        for u in sorted(set(self._users)):
            mask = users == u
            shares[u] = float(gpu_s[mask].sum() / total_gpu_s) if total_gpu_s > 0 else 0.0
            per_user_jct.append(float(jct[mask].mean()))
        measured = np.asarray(self._measured_j)
        known = ~np.isnan(measured)
        metrics: dict[str, float | None] = {
            "completed_jobs": float(len(jct)),
            "throughput_jobs_per_h": len(jct) / (horizon / 3600.0) if horizon > 0 else None,
            "energy_kwh": (busy_j + idle_j) / 3.6e6,
            "busy_energy_kwh": busy_j / 3.6e6,
            "idle_energy_kwh": idle_j / 3.6e6,
            "mean_jct_s": float(jct.mean()),
            "p95_jct_s": float(np.percentile(jct, 95)),
            "mean_wait_s": float(np.mean(start - submit)),
            "deadline_miss_rate": float(np.mean(end[has_dl] > deadline[has_dl])) if has_dl.any() else None,
            "jain_index": jain_index(np.asarray(per_user_jct)),
            "max_power_w": float(max(p_steps.max(), idle_total_w)),
            "makespan_s": horizon,
            "preemptions": None,
            "measured_energy_kwh": float(measured[known].sum() / 3.6e6) if known.any() else None,
            "measured_jobs": float(known.sum()),
        }
        if len(t_steps) > max_points:
            pick = np.linspace(0, len(t_steps) - 1, max_points).astype(int)
            t_steps, p_steps = t_steps[pick], p_steps[pick]
        return {
            "metrics": metrics,
            "power_times_s": [0.0, *t_steps.tolist()],
            "power_w": [idle_total_w, *p_steps.tolist()],
            "user_gpu_share": shares,
        }
