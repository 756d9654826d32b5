"""AuraChronos (thesis 5.4.3): Chronos with proactive preemption for urgent jobs and EDP backfill."""

from __future__ import annotations

from typing import Any

import numpy as np

from easlurm.errors import ConfigError
from easlurm.priority.packing import BatchPacker, Cycle
from easlurm.priority.policies.chronos import urgency
from easlurm.priority.snapshot import ClusterSnapshot, Decision, RunningJob, StartJob


class AuraChronos(BatchPacker):
    """Each cycle: an urgent job that cannot meet its deadline on the free GPUs preempts the best-effort
    jobs that lose the least work (GPU-seconds since start or last checkpoint) on one node and starts
    there at once; then urgent jobs by slack (fastest placement) and best-effort jobs by Zeus's score.
    Jobs that ran less than `preempt_cooldown_s` since their (re)start are spared, against thrashing.
    Predicted runtimes are padded by `deadline_margin` (the oracle errs by ~10%) when judging whether a
    placement meets a deadline; an urgent job that could still make it later is held rather than
    started on a placement that would surely miss (the thesis starts it anyway)."""

    name = "aurachronos"
    objective = "edp"
    limits = "bounded"
    time_sensitive = True

    def __init__(
        self, *, preempt_cooldown_s: float = 300.0, deadline_margin: float = 0.2, **params: Any
    ) -> None:
        super().__init__(**params)
        if preempt_cooldown_s < 0 or deadline_margin < 0:
            raise ConfigError("aurachronos: preempt_cooldown_s and deadline_margin must be >= 0")
        self.preempt_cooldown_s = float(preempt_cooldown_s)
        self.deadline_margin = float(deadline_margin)

    def pack(self, cyc: Cycle) -> Decision:
        urgent, deadline = urgency(cyc)
        fastest = cyc.best(cyc.time_s)
        now = cyc.snapshot.time_s
        padded = cyc.time_s * (1.0 + self.deadline_margin)
        preempt: list[str] = []
        starts: list[StartJob] = []
        hold: list[str] = []
        done: set[int] = set()
        if urgent.any():
            unspread = np.ones_like(cyc.feasible) if cyc.spread is None else ~cyc.spread
            anywhere = self.at(padded, cyc.best(cyc.time_s, unspread))
            slack = np.where(urgent, deadline - (now + anywhere), np.inf)
            for j in np.argsort(slack, kind="stable"):
                if not urgent[j]:
                    break
                pos = int(fastest[j])
                if pos >= 0 and now + padded[pos] <= deadline[j]:
                    continue  # can meet its deadline on free GPUs: the packing below starts it
                plan = self._rescue(cyc, int(j), deadline[j], set(preempt), padded)
                if plan is not None:
                    opt, node, victims = plan
                    preempt.extend(v.job_id for v in victims)
                    cyc.node_free[node] += sum(v.n_gpus for v in victims)
                    starts.append(cyc.start(opt, node))
                    done.add(int(j))
                elif slack[j] >= 0:
                    # a slow start now would miss for sure; wait for GPUs or a victim out of cooldown
                    hold.append(cyc.jobs[j].job_id)
                    done.add(int(j))
            if starts:
                cyc.refresh()
                fastest = cyc.best(cyc.time_s)
        # packing: urgent by slack on the fastest placement, best effort by EDP with aging
        edp_best = cyc.best(cyc.edp, cyc.feasible & self.spread_ok(cyc, cyc.edp))
        best = np.where(urgent, fastest, edp_best)
        for j in done:
            best[j] = -1
        t = self.at(cyc.time_s, best)
        slack = np.where(urgent, deadline, 0.0) - (now + np.where(urgent, t, 0.0))
        perf = self.at(cyc.edp, best) / (1.0 + self.aging_weight * cyc.age_s)
        order = self.order(best, np.where(urgent, 0.0, 1.0), np.where(urgent, slack, perf))
        packed = self.allocate(cyc, order, best)
        return Decision(starts=(*starts, *packed.starts), preempt=tuple(preempt), hold=tuple(hold))

    def _rescue(
        self, cyc: Cycle, j: int, deadline_s: float, taken: set[str], padded: np.ndarray
    ) -> tuple[int, int, list[RunningJob]] | None:
        """The (option, node, victims) that meets the deadline while losing the least work."""
        snap = cyc.snapshot
        now = snap.time_s
        one_node = np.ones_like(cyc.feasible) if cyc.n_nodes is None else cyc.n_nodes == 1
        mine = np.flatnonzero((cyc.job_of == j) & (now + padded <= deadline_s) & one_node)
        if len(mine) == 0:
            return None
        by_node: dict[str, list[tuple[float, RunningJob]]] = {}
        for r in snap.running:
            if r.urgent or r.job_id in taken or now - r.start_s < self.preempt_cooldown_s or r.n_nodes > 1:
                continue  # a spread job frees only part of its GPUs on any one node: not a victim here
            by_node.setdefault(r.node, []).append((r.work_lost_gpu_s(now), r))
        for victims in by_node.values():
            victims.sort(key=lambda lv: (lv[0], lv[1].job_id))
        best_plan: tuple[float, float, int, int, list[RunningJob]] | None = None
        seen: set[tuple[int, int]] = set()
        for pos in mine[np.argsort(cyc.time_s[mine], kind="stable")]:
            k, code = int(cyc.n_gpus[pos]), int(cyc.code[pos])
            if (k, code) in seen:
                continue  # a slower option with the same GPUs frees the same victims
            seen.add((k, code))
            for i, node in enumerate(snap.nodes):
                if cyc.node_code[i] != code or node.total_gpus < k:
                    continue
                free, lost, chosen = cyc.node_free[i], 0.0, []
                for loss, r in by_node.get(node.name, ()):
                    if free >= k:
                        break
                    free += r.n_gpus
                    lost += loss
                    chosen.append(r)
                if free < k:
                    continue
                key = (lost, float(cyc.time_s[pos]))
                if best_plan is None or key < best_plan[:2]:
                    best_plan = (lost, float(cyc.time_s[pos]), int(pos), i, chosen)
        if best_plan is None:
            return None
        return best_plan[2], best_plan[3], best_plan[4]

    def wake_at_s(self, snapshot: ClusterSnapshot, oracle: Any) -> float | None:
        """When this policy's decision can change with time alone (nothing else happening): an urgent
        job's last instant to start on the free GPUs and still meet its deadline, or a best-effort
        job leaving its preemption cooldown. None when no urgent job waits."""
        if not any(p.urgent and p.deadline_s is not None for p in snapshot.pending):
            return None
        now = snapshot.time_s
        cyc = self.cycle(snapshot, oracle)
        urgent, deadline = urgency(cyc)
        fastest = self.at(cyc.time_s * (1.0 + self.deadline_margin), cyc.best(cyc.time_s))
        ok = urgent & np.isfinite(fastest)
        times = [float(t) for t in deadline[ok] - fastest[ok]]
        times += [r.start_s + self.preempt_cooldown_s for r in snapshot.running if not r.urgent]
        future = [t for t in times if t > now]
        return min(future) if future else None
