"""Zeus-share: Zeus's EDP order, and a waiting one-GPU job may join a running one-GPU job's GPU when both gain."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from easlurm.errors import ConfigError, ModelError
from easlurm.model.colocation import GpuFacts, Sharing, corun, predict_solo
from easlurm.model.oracle import Placements
from easlurm.model.zoo import get_workload
from easlurm.priority.packing import Cycle
from easlurm.priority.policies.zeus import Zeus
from easlurm.priority.snapshot import Decision, PendingJob, RunningJob, StartJob


@dataclass(frozen=True)
class Pairing:
    """The predicted outcome of one candidate pair at one GPU power limit (speeds relative to each job
    alone at the default limit)."""

    partner: RunningJob
    speed_partner: float
    speed_job: float
    power_w: float
    power_share_job: float
    pair_energy_ratio: float  # (energy above idle shared) / (the same work alone, each at its own limit)
    limit_w: float | None = None  # the shared GPU's limit (None: the default)
    cost: float = 0.0  # the policy's objective per unit of work, shared (lower is better)

    @property
    def throughput(self) -> float:
        return self.speed_partner + self.speed_job


@dataclass(frozen=True)
class Alone:
    """One job alone on one GPU at its own limit: its power and its slowdown against the default limit."""

    power_w: float
    slowdown: float


#: node sharing modes a job may join (anything else, "none" included, keeps GPUs exclusive)
SHARED_MODES = ("time-slice", "mps")


class ZeusShare(Zeus):
    """Zeus, plus co-location (docs/colocation.md).

    After Zeus has placed what fits on free GPUs (every job at its own bounded limit, as Zeus), each job
    still waiting whose minimum-EDP placement is one GPU and that declared itself shareable may join the
    GPU of a running shareable one-GPU job on a node that shares GPUs. For each candidate pair the oracle
    predicts the co-run at the default limit and at each of the policy's limits (one limit for the GPU);
    a limit qualifies when: a throughput gain (sum of speeds >= 1 + min_gain), no job slowed below
    min_speed, the limit slows neither job by more than `max_slowdown` against the pair at the default
    limit, energy above the GPUs' idle power at most max_energy_ratio times what the same work costs with
    each job alone at its own limit (the GPU that sharing frees idles), memory that fits, and no deadline
    of either put at risk (the shared end, with a margin, before the deadline). The qualifying limit with
    the lowest objective (energy x GPU time per unit of work for EDP) is taken when it is at most
    max_cost_ratio times (1: no worse than) the two jobs alone; the partner with the largest gain is taken;
    otherwise the job waits."""

    name = "zeus-share"

    def __init__(
        self,
        *,
        min_gain: float = 0.2,
        min_speed: float = 0.5,
        deadline_margin: float = 1.2,
        max_energy_ratio: float = 1.0,
        max_cost_ratio: float = 1.0,
        **params: Any,
    ) -> None:
        super().__init__(**params)
        if (
            min_gain < -1
            or not 0 < min_speed <= 1
            or deadline_margin < 1
            or max_energy_ratio <= 0
            or max_cost_ratio <= 0
        ):
            raise ConfigError(
                f"policy {self.name}: need min_gain >= -1, 0 < min_speed <= 1, deadline_margin >= 1, "
                "max_energy_ratio > 0, max_cost_ratio > 0"
            )
        self.max_energy_ratio = float(max_energy_ratio)
        self.max_cost_ratio = float(max_cost_ratio)
        self.min_gain = float(min_gain)
        self.min_speed = float(min_speed)
        self.deadline_margin = float(deadline_margin)
        self._solos: dict[tuple[Any, ...], Any] = {}
        self._alones: dict[tuple[Any, ...], Alone | None] = {}

    def pack(self, cyc: Cycle) -> Decision:
        decision = super().pack(cyc)
        started = {s.job_id for s in decision.starts}
        return Decision(starts=decision.starts + self.colocate(cyc, started))

    # -- co-location -------------------------------------------------------------------------------
    def colocate(self, cyc: Cycle, started: set[str]) -> tuple[StartJob, ...]:
        """Joins for waiting shareable jobs, in Zeus's order over all their options (free GPUs or not)."""
        snap = cyc.snapshot
        sharing = {n.name: n.sharing for n in snap.nodes if n.sharing in SHARED_MODES}
        hosts = [
            r
            for r in snap.running
            if r.node in sharing
            and r.shareable
            and r.n_gpus == 1
            and r.colocated_with is None
            and r.model is not None
        ]
        if not hosts:
            return ()
        every = np.ones(len(cyc.job_of), dtype=bool)
        best_any = cyc.best(cyc.edp, every)
        tier, score = self.score(cyc, best_any)
        starts: list[StartJob] = []
        taken: set[str] = set()
        oracle = cyc.cache.oracle
        side = getattr(oracle, "sibling", None)
        if side is not None:  # a noisy oracle: co-location draws from its own noise stream
            oracle = side("colocation")
        for j in self.order(best_any, tier, score):
            job = cyc.jobs[j]
            if job.job_id in started or not job.shareable or int(cyc.n_gpus[best_any[j]]) != 1:
                continue
            choice: tuple[Pairing, int] | None = None
            for host in hosts:
                if host.job_id in taken:
                    continue
                pos = self._option(cyc, j, host.gpu_type)
                if pos < 0:
                    continue
                pairing = self.evaluate(cyc, oracle, job, pos, host, sharing[host.node])
                if pairing is not None and (choice is None or pairing.throughput > choice[0].throughput):
                    choice = (pairing, pos)
            if choice is None:
                continue
            pairing, pos = choice
            taken.add(pairing.partner.job_id)
            starts.append(
                StartJob(
                    job_id=job.job_id,
                    node=pairing.partner.node,
                    n_gpus=1,
                    batch=int(cyc.batch[pos]),
                    gpu_type=pairing.partner.gpu_type,
                    power_limit_w=pairing.limit_w,
                    predicted_power_w=pairing.power_w * pairing.power_share_job,
                    colocate_with=pairing.partner.job_id,
                )
            )
        return tuple(starts)

    @staticmethod
    def _option(cyc: Cycle, j: int, gpu_type: str) -> int:
        """The job's minimum-EDP one-GPU option on a GPU type, at the limit Zeus would give it alone
        (-1 if none)."""
        names = cyc.cache.type_names
        if gpu_type not in names:
            return -1
        mask = (cyc.job_of == j) & (cyc.n_gpus == 1) & (cyc.code == names.index(gpu_type))
        if not mask.any():
            return -1
        idx = np.flatnonzero(mask)
        return int(idx[np.argmin(cyc.edp[idx])])

    def pair_limits(self, tdp_w: float, min_limit_w: float) -> list[float | None]:
        """The limits a shared GPU may get: the default, and this policy's steps the GPU accepts."""
        steps = sorted({round(f * tdp_w, 3) for f in self.limit_fractions}, reverse=True)
        return [None, *(w for w in steps if min_limit_w <= w < tdp_w)]

    def evaluate(
        self, cyc: Cycle, oracle: Any, job: PendingJob, pos: int, host: RunningJob, sharing: str
    ) -> Pairing | None:
        """The pair's best predicted outcome over the GPU's limits when one passes every test of the rule
        and the objective prefers it to the two jobs alone, else None."""
        batch = int(cyc.batch[pos])
        mine = self._solo(oracle, job.model, job.precision, job.seq_len, job.image_size, batch, host.gpu_type)
        theirs = self._solo(
            oracle, host.model, host.precision, host.seq_len, host.image_size, host.batch, host.gpu_type
        )
        if mine is None or theirs is None:
            return None
        own = float(cyc.limit_w[pos])
        alone_mine = self._alone(oracle, job, batch, host.gpu_type, None if math.isnan(own) else own, mine)
        alone_theirs = self._alone(oracle, host, host.batch, host.gpu_type, host.power_limit_w, theirs)
        if alone_mine is None or alone_theirs is None:
            return None
        facts = GpuFacts.of(oracle.catalogue.get(host.gpu_type), oracle.params)
        mode = Sharing(sharing)
        k = 2 if self.objective == "edp" else 1
        best: Pairing | None = None
        base: Any = None
        for limit in self.pair_limits(facts.tdp_w, facts.min_limit_w):
            try:
                co = corun(theirs, mine, facts, mode, oracle.params, limit)
            except ModelError:
                continue
            if base is None:
                base = co  # the default limit comes first
            pairing = self.judge(cyc, job, pos, host, co, base, (alone_theirs, alone_mine), facts.idle_w, k)
            if pairing is not None and (best is None or pairing.cost < best.cost):
                best = dataclasses.replace(pairing, limit_w=limit)
        return best

    def judge(
        self,
        cyc: Cycle,
        job: PendingJob,
        pos: int,
        host: RunningJob,
        co: Any,
        base: Any,
        alone: tuple[Alone, Alone],
        idle_w: float,
        k: int,
    ) -> Pairing | None:
        """One co-run (at one limit) against the rule's tests and the two jobs alone at their own limits;
        `base` is the pair at the default limit. Costs are per unit of work (one second of a job alone at
        the default limit): energy x GPU time^(k-1)."""
        if not co.feasible or min(co.speed) < self.min_speed or co.throughput < 1.0 + self.min_gain:
            return None
        if any(co.speed[i] * (1.0 + self.max_slowdown) < base.speed[i] * (1.0 - 1e-9) for i in range(2)):
            return None
        stp = co.throughput
        # what the same work costs alone, each job at its own limit: energy above idle (the GPU sharing
        # frees idles either way), and the objective
        alone_j = sum(co.speed[i] * (alone[i].power_w - idle_w) * alone[i].slowdown for i in range(2))
        ratio = (co.power_w - idle_w) / alone_j if alone_j > 0 else math.inf
        if ratio > self.max_energy_ratio:
            return None
        cost = co.power_w / stp**k
        alone_cost = sum(co.speed[i] * alone[i].power_w * alone[i].slowdown ** k for i in range(2)) / stp
        if cost > self.max_cost_ratio * alone_cost:
            return None
        now = cyc.snapshot.time_s
        if host.deadline_s is not None:
            if host.expected_end_s is None:
                return None
            left_alone = (host.expected_end_s - now) / alone[0].slowdown  # at the default limit
            if now + left_alone / co.speed[0] * self.deadline_margin > host.deadline_s:
                return None
        mine_s = float(cyc.time_s[pos]) / alone[1].slowdown
        if job.deadline_s is not None and now + mine_s / co.speed[1] * self.deadline_margin > job.deadline_s:
            return None
        return Pairing(host, co.speed[0], co.speed[1], co.power_w, co.power_share[1], ratio, cost=cost)

    def _alone(
        self,
        oracle: Any,
        job: PendingJob | RunningJob,
        batch: int,
        gpu_type: str,
        limit_w: float | None,
        solo: Any,
    ) -> Alone | None:
        """The job alone on one GPU at `limit_w` (None: the default), as the co-location oracle predicts."""
        if limit_w is None or job.model is None:
            return Alone(solo.power_w, 1.0) if limit_w is None else None
        key = (id(oracle), job.model, job.precision, job.seq_len, job.image_size, batch, gpu_type, limit_w)
        if key in self._alones:
            return self._alones[key]
        out = None
        try:
            wl = get_workload(
                job.model, precision=job.precision, seq_len=job.seq_len, image_size=job.image_size
            )
            pred = oracle.predict(wl, Placements.of([1], [batch], [gpu_type], [float(limit_w)]))
            power, step = float(pred.power_w[0]), float(pred.step_time_s[0])
            if math.isfinite(power) and math.isfinite(step) and step > 0:
                out = Alone(power, step / solo.step_time_s)
        except ModelError:
            out = None
        self._alones[key] = out
        return out

    def _solo(
        self,
        oracle: Any,
        model: str | None,
        precision: str,
        seq_len: int | None,
        image_size: int | None,
        batch: int,
        gpu_type: str,
    ) -> Any:
        """The oracle's view of a job alone on one GPU (memoised per oracle and template)."""
        key = (id(oracle), model, precision, seq_len, image_size, batch, gpu_type)
        if key in self._solos:
            return self._solos[key]
        solo = None
        if model is not None:
            try:
                wl = get_workload(model, precision=precision, seq_len=seq_len, image_size=image_size)
                solo = predict_solo(oracle, wl, batch, gpu_type)
            except ModelError:
                solo = None
        if solo is not None and not math.isfinite(solo.power_w):
            solo = None
        self._solos[key] = solo
        return solo
