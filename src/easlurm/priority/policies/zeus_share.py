"""Zeus-share: Zeus's EDP order, and a waiting one-GPU job may join a running one-GPU job's GPU when both gain."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from easlurm.errors import ConfigError
from easlurm.priority.packing import Cycle
from easlurm.priority.policies.zeus import Zeus
from easlurm.priority.snapshot import Decision, PendingJob, RunningJob, StartJob


@dataclass(frozen=True)
class Pairing:
    """The predicted outcome of one candidate pair (speeds relative to each job alone)."""

    partner: RunningJob
    speed_partner: float
    speed_job: float
    power_w: float
    power_share_job: float
    pair_energy_ratio: float  # (energy per unit of work shared) / (the same, one after the other)

    @property
    def throughput(self) -> float:
        return self.speed_partner + self.speed_job


#: node sharing modes a job may join (anything else, "none" included, keeps GPUs exclusive)
SHARED_MODES = ("time-slice", "mps")


class ZeusShare(Zeus):
    """Zeus, plus co-location (docs/colocation.md).

    After Zeus has placed what fits on free GPUs, each job still waiting whose minimum-EDP placement is one
    GPU and that declared itself shareable may join the GPU of a running shareable one-GPU job on a node
    that shares GPUs, when the oracle predicts for the pair, against running the two one after the other
    on that GPU: a throughput gain (sum of speeds >= 1 + min_gain), no job slowed below min_speed, energy
    per unit of work at most max_energy_ratio times as much, memory that fits, and no deadline of either put at risk (the shared end, with a
    margin, before the deadline). The partner with the largest gain is taken; otherwise the job waits."""

    name = "zeus-share"

    def __init__(
        self,
        *,
        min_gain: float = 0.2,
        min_speed: float = 0.5,
        deadline_margin: float = 1.2,
        max_energy_ratio: float = 1.0,
        **params: Any,
    ) -> None:
        super().__init__(**params)
        if min_gain < -1 or not 0 < min_speed <= 1 or deadline_margin < 1 or max_energy_ratio <= 0:
            raise ConfigError(
                f"policy {self.name}: need min_gain >= -1, 0 < min_speed <= 1, deadline_margin >= 1, "
                "max_energy_ratio > 0"
            )
        self.max_energy_ratio = float(max_energy_ratio)
        self.min_gain = float(min_gain)
        self.min_speed = float(min_speed)
        self.deadline_margin = float(deadline_margin)
        self._solos: dict[tuple[Any, ...], Any] = {}

    def keeps_default_limit(self, job: PendingJob) -> bool:
        """A shareable job also runs at the default limit: the co-run model predicts pairs at the default
        limit, so only an uncapped job can host another (docs/colocation.md)."""
        return job.default_power_limit or job.shareable

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
            and r.power_limit_w is None
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
                    predicted_power_w=pairing.power_w * pairing.power_share_job,
                    colocate_with=pairing.partner.job_id,
                )
            )
        return tuple(starts)

    @staticmethod
    def _option(cyc: Cycle, j: int, gpu_type: str) -> int:
        """The job's minimum-EDP one-GPU option on a GPU type, without a power limit (-1 if none)."""
        names = cyc.cache.type_names
        if gpu_type not in names:
            return -1
        mask = (
            (cyc.job_of == j)
            & (cyc.n_gpus == 1)
            & np.isnan(cyc.limit_w)
            & (cyc.code == names.index(gpu_type))
        )
        if not mask.any():
            return -1
        idx = np.flatnonzero(mask)
        return int(idx[np.argmin(cyc.edp[idx])])

    def evaluate(
        self, cyc: Cycle, oracle: Any, job: PendingJob, pos: int, host: RunningJob, sharing: str
    ) -> Pairing | None:
        """The pair's predicted outcome when it passes every test of the rule, else None."""
        from easlurm.model.colocation import GpuFacts, Sharing, corun

        mine = self._solo(
            oracle, job.model, job.precision, job.seq_len, job.image_size, int(cyc.batch[pos]), host.gpu_type
        )
        theirs = self._solo(
            oracle, host.model, host.precision, host.seq_len, host.image_size, host.batch, host.gpu_type
        )
        if mine is None or theirs is None:
            return None
        facts = GpuFacts.of(oracle.catalogue.get(host.gpu_type), oracle.params)
        co = corun(theirs, mine, facts, Sharing(sharing), oracle.params)
        if not co.feasible or min(co.speed) < self.min_speed or co.throughput < 1.0 + self.min_gain:
            return None
        ratio = (co.power_w / co.throughput) / ((theirs.power_w + mine.power_w) / 2.0)
        if ratio > self.max_energy_ratio:
            return None
        now = cyc.snapshot.time_s
        if host.deadline_s is not None:
            if host.expected_end_s is None:
                return None
            if now + (host.expected_end_s - now) / co.speed[0] * self.deadline_margin > host.deadline_s:
                return None
        late = (
            job.deadline_s is not None
            and now + float(cyc.time_s[pos]) / co.speed[1] * self.deadline_margin > job.deadline_s
        )
        if late:
            return None
        return Pairing(host, co.speed[0], co.speed[1], co.power_w, co.power_share[1], ratio)

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
        from easlurm.errors import ModelError
        from easlurm.model.colocation import predict_solo
        from easlurm.model.zoo import get_workload

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
