"""The trace's own recorded history (actual starts and ends) as a results row next to the policies'.

Energy of the recorded schedule is the oracle's (calibrated) power of each job's recorded placement
over its recorded run, plus the idle power of every GPU of the target cluster not busy at the time,
from time 0 (first submission) to the last recorded end: the same accounting a simulated run gets,
so the rows compare; job power comes from the policies' own (calibrated, TDP-capped) oracle.
Measured energy, where the trace has it, is reported beside it. A record that used more GPUs at
once than the target cluster has does not fit it: `fit()` says by how much, and the figures that
depend on the cluster are left blank rather than clamped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from easlurm.sim.traces.mapping import Mapped


def jain_index(values: np.ndarray) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2), 1 = equal; None when undefined (fewer than two users)."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) < 2 or not np.any(x):
        return None
    return float(x.sum() ** 2 / (len(x) * np.square(x).sum()))


def _steps(start: np.ndarray, end: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(times, level after all changes at each time) of the sum of `value` over intervals [start, end)."""
    times = np.concatenate([start, end])
    delta = np.concatenate([value, -value])
    order = np.argsort(times, kind="stable")
    t_sorted, level = times[order], np.cumsum(delta[order])
    last = np.r_[t_sorted[1:] != t_sorted[:-1], True]
    return t_sorted[last], level[last]


def _time_above_s(t: np.ndarray, level: np.ndarray, limit: float, horizon: float) -> float:
    """Seconds during which a step function (level[i] from t[i] to t[i+1]) is above `limit`."""
    if len(t) == 0:
        return 0.0
    dt = np.diff(np.append(t, max(horizon, float(t[-1]))))
    return float(dt[level > limit + 1e-6].sum())


@dataclass(frozen=True)
class ClusterFit:
    """Whether the recorded schedule fits the target cluster: peak GPUs busy at once against its GPUs."""

    fits: bool
    peak_gpus: int
    cluster_gpus: int
    time_over_s: float  # time the record used more GPUs (of some type) than the cluster has
    over_by_type: dict[str, tuple[int, int]]  # type -> (recorded peak, cluster GPUs), where it overflows
    suggest_gpus: int  # a cluster size that holds the record (whole nodes of the largest node)
    mean_busy_gpus: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "fits": self.fits,
            "peak_gpus": self.peak_gpus,
            "cluster_gpus": self.cluster_gpus,
            "time_over_s": self.time_over_s,
            "over_by_type": {k: list(v) for k, v in self.over_by_type.items()},
            "suggest_gpus": self.suggest_gpus,
            "mean_busy_gpus": self.mean_busy_gpus,
        }


class RecordedBaseline:
    """Accumulates mapped jobs (streaming: a few numbers per job) and summarises the recorded schedule."""

    def __init__(
        self,
        idle_w_by_type: Mapping[str, float],
        gpus_by_type: Mapping[str, int],
        node_gpus: int = 8,
    ) -> None:
        self.idle_w_by_type = dict(idle_w_by_type)
        self.gpus_by_type = dict(gpus_by_type)
        self.node_gpus = node_gpus
        self._cols: dict[str, list[float]] = {k: [] for k in ("submit", "start", "end", "power", "idle", "n")}
        self._models: list[str] = []
        self._types: list[str] = []
        self._placement: list[int] = []
        self._placements: dict[tuple[str, int, int, str], int] = {}
        self._deadline: list[float] = []
        self._users: list[str] = []
        self._ids: list[str] = []
        self._measured_j: list[float] = []
        self.unknown_start = 0  # replayed jobs whose recorded start the trace does not say (SWF wait -1)
        self._named_user = False  # any replayed job names its user (those with unknown starts too)

    def add(self, m: Mapped) -> None:
        spec = m.spec
        self._named_user = self._named_user or spec.user != "unknown"
        if spec.recorded_start_s is None or spec.recorded_end_s is None:
            self.unknown_start += 1
            return
        c = self._cols
        c["submit"].append(spec.submit_s)
        c["start"].append(spec.recorded_start_s)
        c["end"].append(spec.recorded_end_s)
        c["power"].append(m.power_w)
        c["idle"].append(self.idle_w_by_type.get(m.gpu_type, 0.0) * m.n_gpus)
        c["n"].append(float(m.n_gpus))
        self._models.append(spec.model)
        self._types.append(m.gpu_type)
        key = (spec.model, m.n_gpus, m.batch, m.gpu_type)
        self._placement.append(self._placements.setdefault(key, len(self._placements)))
        judged = spec.urgent and spec.deadline_s is not None  # as the simulator judges deadlines
        self._deadline.append(spec.deadline_s if judged else np.nan)
        self._users.append(spec.user)
        self._ids.append(spec.job_id)
        measured = m.trace.measured_energy_j
        self._measured_j.append(np.nan if measured is None else measured)

    def job_energy_j(self, power_of: Callable[[tuple[str, int, int, str]], float]) -> dict[str, float]:
        """Each job's busy energy over its recorded run (job id -> J) under `power_of` (as `result` uses it):
        what a simulated run's per-job energy is paired with."""
        by_index = [0.0] * len(self._placements)
        for key, i in self._placements.items():
            by_index[i] = power_of(key)
        start, end = self._cols["start"], self._cols["end"]
        return {
            job_id: by_index[k] * max(e - s, 0.0)
            for job_id, k, s, e in zip(self._ids, self._placement, start, end)
        }

    @property
    def users_known(self) -> bool:
        """False when the trace names no user (every job is the mapping's "unknown")."""
        return self._named_user

    def __len__(self) -> int:
        return len(self._models)

    def fit(self) -> ClusterFit | None:
        """How the recorded schedule's GPUs in use compare with the target cluster's; None without jobs."""
        if not self._models:
            return None
        start = np.asarray(self._cols["start"])
        end = np.asarray(self._cols["end"])
        n = np.asarray(self._cols["n"])
        horizon = float(np.max(end))
        t_all, busy_all = _steps(start, end, n)
        have = sum(self.gpus_by_type.values())
        peak = round(float(busy_all.max())) if len(busy_all) else 0
        over_t = _time_above_s(t_all, busy_all, have, horizon)
        types = np.asarray(self._types, dtype=object)
        over_by_type: dict[str, tuple[int, int]] = {}
        extra = 0
        for gpu_type, count in sorted(self.gpus_by_type.items()):
            mask = types == gpu_type
            if not mask.any():
                continue
            t, busy = _steps(start[mask], end[mask], n[mask])
            p = round(float(busy.max()))
            if p > count:
                over_by_type[gpu_type] = (p, count)
                extra += p - count
                over_t = max(over_t, _time_above_s(t, busy, count, horizon))
        fits = peak <= have and not over_by_type
        need = max(peak, have + extra)
        suggest = -(-need // self.node_gpus) * self.node_gpus
        mean_busy = float(np.sum(n * np.maximum(end - start, 0.0)) / horizon) if horizon > 0 else 0.0
        return ClusterFit(fits, peak, have, over_t, over_by_type, suggest, mean_busy)

    def unexplained_waits(self, min_wait_s: float = 60.0) -> list[tuple[str, float]]:
        """(job id, recorded wait) of the jobs that waited more than `min_wait_s` although, during their
        whole wait, the recorded schedule left at least as many GPUs of their type free on the target
        cluster as they asked for: what held them is not in the trace (CPU jobs, other partitions,
        reservations, a user's dependency or hold), so no replay can reproduce that wait. Node packing
        is not known for the record: a job of several GPUs may still have found no single node free."""
        if not self._models:
            return []
        c = {k: np.asarray(self._cols[k], dtype=np.float64) for k in ("submit", "start", "end", "n")}
        wait = c["start"] - c["submit"]
        types = np.asarray(self._types, dtype=object)
        out: list[tuple[str, float]] = []
        for gpu_type, count in self.gpus_by_type.items():
            mask = types == gpu_type
            waiting = np.flatnonzero(mask & (wait > min_wait_s))
            if len(waiting) == 0:
                continue
            t, busy = _steps(c["start"][mask], c["end"][mask], c["n"][mask])
            for j in waiting:
                # the busy level in force at the submit time (0 before the first start), then at every
                # change before the job's own start
                k = int(np.searchsorted(t, c["submit"][j], side="right")) - 1
                hi = int(np.searchsorted(t, c["start"][j], side="left"))
                level = busy[max(k, 0) : max(hi, k + 1)]
                most = max(float(level.max(initial=0.0)), 0.0)
                if count - most >= c["n"][j]:
                    out.append((self._ids[j], float(wait[j])))
        return sorted(out, key=lambda jw: -jw[1])

    def result(
        self,
        power_scale: Mapping[str, float] | None = None,
        max_points: int = 4000,
        *,
        power_of: Callable[[tuple[str, int, int, str]], float] | None = None,
        power_budget_w: float | None = None,
    ) -> dict[str, Any]:
        """`{"metrics", "power_times_s", "power_w", "user_gpu_share", "fit"}` (JSON-safe).

        `power_of(model, n_gpus, batch, gpu_type)` is the power of a placement under the policies'
        own (calibrated, TDP-capped) oracle; without it the recorded power is scaled by `power_scale`.
        When the record does not fit the target cluster, the figures that depend on the cluster
        (idle and total energy, peak power, time over budget, the power curve) are left blank: a
        schedule the cluster could not have run has no honest value for them.
        """
        if not self._models:
            return _no_record(self.unknown_start)
        cols = {k: np.asarray(v, dtype=np.float64) for k, v in self._cols.items()}
        power = self._job_power(cols["power"], power_scale, power_of)
        start, end, submit = cols["start"], cols["end"], cols["submit"]
        dur = np.maximum(end - start, 0.0)
        horizon = float(np.max(end))
        fit = self.fit()
        assert fit is not None
        idle_total_w = sum(self.idle_w_by_type.get(t, 0.0) * n for t, n in self.gpus_by_type.items())
        busy_j = float(np.sum(power * dur))
        idle_j = float(idle_total_w * horizon - np.sum(cols["idle"] * dur))
        # Cluster power over time: idle of all GPUs + (job power - its GPUs' idle) while it runs.
        t_steps, p_steps = _steps(start, end, power - cols["idle"])
        p_steps = p_steps + idle_total_w
        jct = end - submit
        deadline = np.asarray(self._deadline)
        has_dl = ~np.isnan(deadline)
        shares, per_user_jct = self._per_user(dur * cols["n"], jct)
        measured = np.asarray(self._measured_j)
        known = ~np.isnan(measured)
        over_budget = None
        if power_budget_w is not None:
            over_budget = _time_above_s(
                np.r_[0.0, t_steps], np.r_[idle_total_w, p_steps], power_budget_w, horizon
            )
        fits = fit.fits
        unexplained = self.unexplained_waits()
        metrics: dict[str, float | None] = {
            "completed_jobs": float(len(jct)),
            "throughput_jobs_per_h": len(jct) / (horizon / 3600.0) if horizon > 0 else None,
            "energy_j": busy_j + idle_j if fits else None,
            "busy_energy_j": busy_j,
            "idle_energy_j": idle_j if fits else None,
            "energy_per_job_j": (busy_j + idle_j) / len(jct) if fits else None,
            "mean_jct_s": float(jct.mean()),
            "p95_jct_s": float(np.percentile(jct, 95)),
            "mean_wait_s": float(np.mean(start - submit)),
            "deadline_miss_rate": float(np.mean(end[has_dl] > deadline[has_dl])) if has_dl.any() else None,
            # no user column: fairness is unknown, not perfect (one "unknown" user gives 1.0)
            "jain_index": jain_index(np.asarray(per_user_jct)) if self.users_known else None,
            "max_power_w": float(max(np.max(p_steps), idle_total_w)) if fits else None,
            "power_budget_w": power_budget_w,
            "time_over_budget_s": over_budget if fits else None,
            "makespan_s": horizon,
            "preemptions": None,
            "measured_energy_j": float(measured[known].sum()) if known.any() else None,
            "measured_jobs": float(known.sum()),
            "peak_busy_gpus": float(fit.peak_gpus),
            "unexplained_wait_jobs": float(len(unexplained)),
            "unexplained_wait_s": float(sum(w for _, w in unexplained)),
            "unknown_start_jobs": float(self.unknown_start),
        }
        times_s, power_w = _power_curve(t_steps, p_steps, idle_total_w, max_points) if fits else ([], [])
        return {
            "metrics": metrics,
            "power_times_s": times_s,
            "power_w": power_w,
            "user_gpu_share": shares,
            "fit": fit.to_dict(),
            "unexplained_waits": [{"job_id": j, "wait_s": w} for j, w in unexplained[:20]],
        }

    def _job_power(
        self,
        recorded_w: np.ndarray,
        power_scale: Mapping[str, float] | None,
        power_of: Callable[[tuple[str, int, int, str]], float] | None,
    ) -> np.ndarray:
        """Each job's power: its placement's under the policies' oracle (one call per distinct placement),
        else the recorded power scaled per model class."""
        if power_of is not None:
            table = np.empty(len(self._placements))
            for key, i in self._placements.items():
                table[i] = power_of(key)
            return table[np.asarray(self._placement)]
        scale = np.array([(power_scale or {}).get(m, 1.0) for m in self._models])
        return recorded_w * scale

    def _per_user(self, gpu_s: np.ndarray, jct: np.ndarray) -> tuple[dict[str, float], list[float]]:
        """(each user's share of the GPU-seconds, each user's mean JCT), users in sorted order: the
        fairness figures."""
        users = np.asarray(self._users, dtype=object)
        shares: dict[str, float] = {}
        per_user_jct = []
        total_gpu_s = float(gpu_s.sum())
        for u in sorted(set(self._users)):
            mask = users == u
            shares[u] = float(gpu_s[mask].sum() / total_gpu_s) if total_gpu_s > 0 else 0.0
            per_user_jct.append(float(jct[mask].mean()))
        return shares, per_user_jct


def _no_record(unknown_start: int) -> dict[str, Any]:
    """The row of a trace with no recorded start at all (SWF waits all -1): the recorded schedule is
    unknown, not empty."""
    return {
        "metrics": {"completed_jobs": None if unknown_start else 0.0},
        "power_times_s": [],
        "power_w": [],
        "user_gpu_share": {},
        "fit": None,
    }


def _power_curve(
    t_steps: np.ndarray, p_steps: np.ndarray, idle_total_w: float, max_points: int
) -> tuple[list[float], list[float]]:
    """The cluster's power curve from time 0 (all idle), thinned to about `max_points` changes."""
    if len(t_steps) > max_points:
        pick = np.linspace(0, len(t_steps) - 1, max_points).astype(int)
        t_steps, p_steps = t_steps[pick], p_steps[pick]
    return [0.0, *t_steps.tolist()], [idle_total_w, *p_steps.tolist()]
