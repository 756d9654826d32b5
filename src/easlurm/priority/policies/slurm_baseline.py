"""What a site runs without easlurm: Slurm's multifactor priority and backfill, rigid requests, no limits
(`slurm`), and the same under a site-wide GPU power limit (`static-cap`); see docs/baselines.md."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from easlurm.errors import ConfigError
from easlurm.priority.backfill import Profile, choose_nodes, earliest_row
from easlurm.priority.packing import BatchPacker, Cycle
from easlurm.priority.snapshot import ClusterSnapshot, Decision, NodeState, PendingJob, StartJob

DAY_S = 86400.0
#: priority/multifactor weights as in Slurm's own configuration example (priority_multifactor.html);
#: PriorityMaxAge is Slurm's default, 7-0
WEIGHT_AGE = 1000.0
WEIGHT_JOB_SIZE = 1000.0
WEIGHT_FAIRSHARE = 10000.0
MAX_AGE_S = 7 * DAY_S
#: sched/backfill defaults: bf_window=1440 (minutes), bf_max_job_test=500
BF_WINDOW_S = DAY_S
BF_MAX_JOB_TEST = 500
#: a job without a time limit (synthetic workloads) is given this multiple of its predicted run time
#: at its request: the limit a user who knows the job's length would add a margin to
LIMIT_FACTOR = 2.0
#: the site-wide limit of `static-cap`, as a fraction of each GPU's TDP
DEFAULT_CAP_FRAC = 0.7
#: a running job past its planned end is planned to end this long after now (its GPUs are busy now)
OVERRUN_S = 1.0


class SlurmBaseline(BatchPacker):
    """Slurm as a site runs it: jobs ordered by multifactor priority (age, job size, fair share), then
    started in that order where they fit now without delaying the planned start of any job before them
    (each job that cannot start is reserved at its earliest start for its time limit, within the
    backfill window), with the GPU count, batch and GPU types each job asked for, at the default limit."""

    name = "slurm"
    objective = "time"
    limits = "default"
    #: the daemon leaves Slurm's own order and placement alone for this policy (it only logs)
    leaves_slurm_alone: ClassVar[bool] = True
    uses_history = True  # fair share

    def __init__(
        self,
        *,
        weight_age: float = WEIGHT_AGE,
        weight_job_size: float = WEIGHT_JOB_SIZE,
        weight_fairshare: float = WEIGHT_FAIRSHARE,
        max_age_s: float = MAX_AGE_S,
        bf_window_s: float = BF_WINDOW_S,
        bf_max_job_test: int = BF_MAX_JOB_TEST,
        limit_factor: float = LIMIT_FACTOR,
        **params: Any,
    ) -> None:
        params.pop("malleable", None)  # rigid whatever a caller's defaults say: requests as submitted
        super().__init__(malleable=False, **params)
        for key, value in (
            ("weight_age", weight_age),
            ("weight_job_size", weight_job_size),
            ("weight_fairshare", weight_fairshare),
        ):
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"policy {self.name}: {key} must be a number >= 0, got {value!r}")
        if not (max_age_s > 0 and bf_window_s > 0 and bf_max_job_test >= 1):
            raise ConfigError(f"policy {self.name}: max_age_s, bf_window_s and bf_max_job_test must be > 0")
        if not (math.isfinite(limit_factor) and limit_factor >= 1.0):
            raise ConfigError(f"policy {self.name}: limit_factor must be >= 1, got {limit_factor!r}")
        self.weights = (float(weight_age), float(weight_job_size), float(weight_fairshare))
        self.max_age_s = float(max_age_s)
        self.bf_window_s = float(bf_window_s)
        self.bf_max_job_test = int(bf_max_job_test)
        self.limit_factor = float(limit_factor)

    # -- priority/multifactor ----------------------------------------------------------------------
    def priority(self, snapshot: ClusterSnapshot) -> np.ndarray:
        """Each pending job's priority: W_age * age + W_size * size + W_fs * fair share, each factor in
        [0, 1]; age saturates at `max_age_s`, size is the requested GPUs over the cluster's (larger jobs
        first, PriorityFavorSmall=NO), fair share is Fair Tree's rank of the user's GPU-seconds."""
        jobs = snapshot.pending
        now = snapshot.time_s
        age = np.clip([(now - j.submit_s) / self.max_age_s for j in jobs], 0.0, 1.0)
        total = max(sum(n.total_gpus for n in snapshot.nodes), 1)
        size = np.clip([j.gpu_options[0] / total for j in jobs], 0.0, 1.0)
        fs = fair_share(snapshot)
        share = np.array([fs[j.user] for j in jobs], dtype=np.float64)
        w_age, w_size, w_fs = self.weights
        return np.asarray(w_age * age + w_size * size + w_fs * share, dtype=np.float64)

    def score(self, cyc: Cycle, best: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The BatchPacker hooks' view (highest priority first), for callers that rank the queue."""
        return np.zeros(len(best)), -self.priority(cyc.snapshot)

    def queue(self, snapshot: ClusterSnapshot) -> list[int]:
        """Pending jobs in the order Slurm evaluates them: priority, then submit time, then queue order."""
        prio = self.priority(snapshot)
        submit = np.array([j.submit_s for j in snapshot.pending], dtype=np.float64)
        return [int(j) for j in np.lexsort((np.arange(len(prio)), submit, -prio))]

    # -- options -----------------------------------------------------------------------------------
    def rows(self, cyc: Cycle) -> np.ndarray:
        """The options Slurm can give: the request on the fewest nodes that hold it, at the default limit."""
        packed = np.ones(len(cyc.job_of), dtype=bool) if cyc.spread is None else ~cyc.spread
        return packed & np.isnan(cyc.limit_w)

    def time_limit_s(self, job: PendingJob, times_s: np.ndarray) -> float:
        """The job's time limit, else `limit_factor` times its longest predicted run over its options."""
        if job.time_limit_s is not None:
            return float(job.time_limit_s)
        return self.limit_factor * float(times_s.max()) if len(times_s) else math.inf

    def planned_end_s(self, snapshot: ClusterSnapshot) -> dict[str, float]:
        """When each running job's GPUs come back in the plan: start + time limit (else `limit_factor`
        times its expected run), and never before OVERRUN_S from now (its GPUs are busy now)."""
        now = snapshot.time_s
        out: dict[str, float] = {}
        for r in snapshot.running:
            if r.time_limit_s is not None:
                end = r.start_s + r.time_limit_s
            elif r.expected_end_s is not None:
                end = r.start_s + self.limit_factor * max(r.expected_end_s - r.start_s, 0.0)
            else:
                end = math.inf
            out[r.job_id] = max(end, now + OVERRUN_S)
        return out

    # -- sched/backfill ----------------------------------------------------------------------------
    def decide(self, snapshot: ClusterSnapshot, oracle: Any) -> Decision:
        if not snapshot.pending:
            return Decision()
        cyc = self.cycle(snapshot, oracle)
        keep = np.flatnonzero(self.rows(cyc))  # grouped by job, jobs in queue order
        bounds = np.searchsorted(cyc.job_of[keep], np.arange(len(cyc.jobs) + 1))
        m_all = np.ones(len(cyc.job_of), dtype=np.int64) if cyc.n_nodes is None else cyc.n_nodes
        share = -(-cyc.n_gpus // m_all)  # GPUs each node must hold for the option
        queue = self.queue(snapshot)[: self.bf_max_job_test]
        # the smallest share any job from here on needs: once no node has that many free now, nothing
        # more can start now and the rest of the plan cannot change this decision
        need = [min(share[keep[bounds[j] : bounds[j + 1]]], default=1 << 30) for j in queue]
        later_need = np.minimum.accumulate(np.asarray(need[::-1] or [0]))[::-1]
        ends = self.planned_end_s(snapshot)
        profile = Profile.build(snapshot.time_s, cyc.node_free, releases(snapshot, ends))
        horizon_s = snapshot.time_s + self.bf_window_s
        starts: list[StartJob] = []
        for i, j in enumerate(queue):
            if max(cyc.node_free, default=0) < later_need[i]:
                break
            options = keep[bounds[j] : bounds[j + 1]]
            if not len(options):
                continue
            limit_s = self.time_limit_s(cyc.jobs[j], cyc.time_s[options])
            window = profile.window_min(limit_s)
            rows = int(np.searchsorted(profile.times_s, horizon_s, side="right"))
            best: tuple[int, int, np.ndarray] | None = None  # (row, option, its nodes)
            for pos in options.tolist():
                nodes = np.flatnonzero(cyc.node_code == cyc.code[pos])
                row = earliest_row(window, nodes, int(cyc.n_gpus[pos]), int(m_all[pos]), rows)
                if row >= 0 and (best is None or row < best[0]):
                    best = (row, pos, nodes)
            if best is None:
                continue  # not within the backfill window: no reservation, as Slurm
            row, pos, nodes = best
            alloc = choose_nodes(window[row], nodes, int(cyc.n_gpus[pos]), int(m_all[pos]))
            assert alloc is not None
            begin_s = float(profile.times_s[row])
            profile.take(begin_s, begin_s + limit_s, alloc)
            if row == 0:
                starts.append(cyc.start(pos, alloc))
        return Decision(starts=tuple(starts))


class StaticCap(SlurmBaseline):
    """`slurm` with every GPU limited to `cap_frac` of its TDP (never under its minimum limit), as
    `nvidia-smi -pl` on every GPU of the site: a job's own SPEC `nolimit` cannot lift it."""

    name = "static-cap"
    limits = "free"

    def __init__(
        self, *, cap_frac: float = DEFAULT_CAP_FRAC, power_limits: bool = True, **params: Any
    ) -> None:
        super().__init__(**params)
        if not (isinstance(cap_frac, int | float) and 0.0 < cap_frac <= 1.0):
            raise ConfigError(f"policy {self.name}: cap_frac must lie in (0, 1], got {cap_frac!r}")
        #: None: no cap (power_limits=False asks for every job at the default limit)
        self.cap_frac: float | None = float(cap_frac) if power_limits else None

    def cycle(self, snapshot: ClusterSnapshot, oracle: Any) -> Cycle:
        """Predict each type's capped limit: the fraction, and the minimum limit where it is higher."""
        fracs: set[float] = set()
        if self.cap_frac is not None:
            fracs.add(self.cap_frac)
            for node in snapshot.nodes:
                cap = cap_w(node, self.cap_frac)
                if cap is not None and node.tdp_w > 0:
                    fracs.add(cap / node.tdp_w)
        self.limit_fractions = tuple(sorted(fracs))
        return super().cycle(snapshot, oracle)

    def keeps_default_limit(self, job: PendingJob) -> bool:
        return False  # a site-wide limit is set on the GPU, whatever the job asks

    def rows(self, cyc: Cycle) -> np.ndarray:
        packed = np.ones(len(cyc.job_of), dtype=bool) if cyc.spread is None else ~cyc.spread
        if self.cap_frac is None:
            return packed & np.isnan(cyc.limit_w)
        caps = {n.gpu_type: cap_w(n, self.cap_frac) for n in cyc.snapshot.nodes}
        by_code = np.array(
            [math.nan if caps.get(t) is None else caps[t] for t in cyc.cache.type_names], dtype=np.float64
        )
        want = by_code[cyc.code] if len(by_code) else np.full(len(cyc.code), math.nan)
        uncapped = np.isnan(want) & np.isnan(cyc.limit_w)
        return packed & (uncapped | np.isclose(cyc.limit_w, want, rtol=0.0, atol=0.05))


def cap_w(node: NodeState, frac: float) -> float | None:
    """The limit (W per GPU, to 0.1 W as the options are predicted) `frac` of TDP sets on a node's GPUs:
    never under the GPU's minimum limit; None where it is the TDP (no cap)."""
    cap = round(frac * node.tdp_w, 1)
    if node.min_power_limit_w is not None:
        cap = max(cap, math.ceil(node.min_power_limit_w * 10.0 - 1e-9) / 10.0)
    return None if cap >= node.tdp_w else cap


def fair_share(snapshot: ClusterSnapshot) -> dict[str, float]:
    """Fair Tree's factor of each user under equal shares: users ranked by GPU-seconds used (fewest
    first), factor = rank / users, the least-using user 1.0; users with equal use share a rank."""
    users = sorted(
        set(snapshot.user_gpu_s) | {j.user for j in snapshot.pending} | {r.user for r in snapshot.running}
    )
    used = np.array([snapshot.user_gpu_s.get(u, 0.0) for u in users], dtype=np.float64)
    ranked = np.sort(used)
    at_least = len(users) - np.searchsorted(ranked, used, side="left")  # users using as much or more
    return {u: float(at_least[i]) / len(users) for i, u in enumerate(users)}


def releases(snapshot: ClusterSnapshot, end_s: dict[str, float]) -> list[tuple[float, int, int]]:
    """(time, node index, GPUs) at which running jobs give their GPUs back. Each node's busy GPUs go to
    its one-node jobs, latest end first (a shared GPU comes back when its last job ends); what is left
    (GPUs of jobs spread over nodes) comes back when the last spread job ends."""
    index = {n.name: i for i, n in enumerate(snapshot.nodes)}
    spread_end = max((end_s[r.job_id] for r in snapshot.running if r.n_nodes > 1), default=math.inf)
    by_node: dict[int, list[tuple[float, int]]] = {}
    for r in snapshot.running:
        i = index.get(r.node)
        if i is not None and r.n_nodes == 1:
            by_node.setdefault(i, []).append((end_s[r.job_id], r.n_gpus))
    out: list[tuple[float, int, int]] = []
    for i, node in enumerate(snapshot.nodes):
        busy = node.total_gpus - node.free_gpus
        for end, g in sorted(by_node.get(i, []), reverse=True):
            back = min(g, busy)
            if back > 0:
                out.append((end, i, back))
            busy -= back
        if busy > 0:
            out.append((spread_end, i, busy))
    return out
