"""Periodic batch packing (thesis 5.3.2.4): score every queued job's best placement, then fill free GPUs in order."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cached_property
from itertools import accumulate, compress
from operator import attrgetter, is_not
from typing import Any, ClassVar, cast

import numpy as np

from easlurm.errors import ConfigError
from easlurm.priority.options import PredictionCache, TypeFacts, expand, fewest_free_nodes
from easlurm.priority.snapshot import ClusterSnapshot, Decision, NodeState, PendingJob, StartJob

INF = float("inf")
#: a cycle or decision with at most this many options takes the plain-Python paths (`Cycle.fits_short`):
#: below it the arrays' fixed cost per call outweighs the per-option work; the choices are the same
SHORT_OPTIONS = 64
#: Energy policies start a job spread over more nodes than packing needs only when its energy-delay
#: product is within this fraction of the job's best packed option; otherwise it waits for packed GPUs.
SPREAD_SLACK_EDP = 0.05
#: the power limits an energy policy weighs for each placement, as fractions of the GPU's TDP (those
#: under the GPU's minimum limit are left out; the default limit is always an option)
LIMIT_STEPS: tuple[float, ...] = tuple(round(0.30 + 0.05 * i, 2) for i in range(14))
#: the share of a job's JCT (its wait so far and its run at the default limit) a chosen limit may add to its
#: run (`sched.max_slowdown`): the JCT budget a site states, 1.05 times what the job would see uncapped
DEFAULT_MAX_SLOWDOWN = 0.05
#: Consolidation (`sched.consolidate`, docs/power-saving.md): an energy policy takes a placement that
#: needs an empty node, or a powered-down node woken, only when its EDP beats the best placement on busy
#: (or powered-on) nodes by more than this fraction (`sched.consolidation_slack`).
DEFAULT_CONSOLIDATION_SLACK = 0.30
#: a node powered down less than this ago is not woken (`sched.min_off_s`) ...
DEFAULT_MIN_OFF_S = 0.0
#: ... unless a job would then wait longer than this since its submission (`sched.max_wake_wait_s`)
DEFAULT_MAX_WAKE_WAIT_S = 600.0
#: how a node ranks when a placement chooses among nodes that hold it, by power state: powered-on first,
#: then one already booting, then one powered down, last one still shutting down (it must finish first)
_WAKE_RANK = {"on": 0, "powering_up": 1, "off": 2, "powering_down": 3}
#: what a node's place in the option layout depends on
_LAYOUT_OF = attrgetter("gpu_type", "tdp_w", "min_power_limit_w", "total_gpus", "idle_power_w")
#: a job's row of a cycle (JobRows): the job, (offset, length) of its options, its remaining samples,
#: submit time and whether it keeps the default limit
JobRow = tuple[PendingJob, int, int, float, float, bool]


@dataclass
class Cycle:
    """One scheduling cycle's view: the queue's options as flat arrays aligned on `job_of`."""

    snapshot: ClusterSnapshot
    cache: PredictionCache
    jobs: tuple[PendingJob, ...]
    job_of: np.ndarray
    n_gpus: np.ndarray
    batch: np.ndarray
    code: np.ndarray
    limit_w: np.ndarray
    power_w: np.ndarray
    time_s: np.ndarray  # remaining run time of the job with this option
    feasible: np.ndarray  # its node count is the fewest nodes whose free GPUs hold it now
    node_free: list[int]  # free GPUs per snapshot node (mutated by allocation)
    node_code: np.ndarray  # type code of each node
    node_idle_w: np.ndarray
    n_nodes: np.ndarray | None = None  # nodes the option's GPUs span (None: one)
    spread: np.ndarray | None = None  # more nodes than the fewest that hold its GPUs on empty nodes
    #: consolidation (None: off): each node's rank by power state (_WAKE_RANK), since when it is idle
    #: (-inf: busy or unknown), whether it may be woken by any job ("resting": powered down less than
    #: min_off_s ago, False), and per option its tier (0: fits on busy powered-on nodes, 1: on powered-on
    #: nodes, 2: needs a node woken) and whether its job may wake a resting node
    node_rank: np.ndarray | None = None
    node_idle_since: np.ndarray | None = None
    node_rested: np.ndarray | None = None
    tier: np.ndarray | None = None
    may_wake_resting: np.ndarray | None = None
    #: each job's submit time (None: read from `jobs`)
    submit_s: np.ndarray | None = None
    #: (the `node_code` it was read from, per type code whether each node is of that type), for `fits_short`
    type_members: tuple[np.ndarray, dict[int, list[bool]]] | None = None

    @cached_property
    def edp(self) -> np.ndarray:
        """Energy-delay product of each option (computed once per cycle: policies read it several times)."""
        return self.power_w * self.time_s * self.time_s

    @property
    def age_s(self) -> np.ndarray:
        now = self.snapshot.time_s
        if self.submit_s is not None:
            return now - self.submit_s
        return np.array([now - j.submit_s for j in self.jobs], dtype=np.float64)

    def user_share(self) -> np.ndarray:
        """C_U of each job's user, in GPU-seconds."""
        hist = self.snapshot.user_gpu_s
        return np.array([hist.get(j.user, 0.0) for j in self.jobs], dtype=np.float64)

    def best(self, metric: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Per job, the flat position of the option minimising `metric` among `mask` (-1 if none)."""
        ok = self.feasible if mask is None else mask
        if len(self.jobs) == 1 and len(metric) <= SHORT_OPTIONS:
            return np.array([first_least(metric.tolist(), ok.tolist())], dtype=np.int64)
        return self.best_array(metric, ok)

    def best_array(self, metric: np.ndarray, ok: np.ndarray) -> np.ndarray:
        """`best` as array operations (any number of jobs)."""
        values = np.where(ok, metric, INF)
        best = np.full(len(self.jobs), -1, dtype=np.int64)
        if len(values) == 0:
            return best
        heads = first_minima(values, self.job_of)
        finite = np.isfinite(values[heads])
        best[self.job_of[heads[finite]]] = heads[finite]
        return best

    def refresh(self) -> None:
        """Recompute which options fit after `node_free` changed (preemption frees GPUs)."""
        self.feasible = self.fits()

    def fits(self, rows: slice = slice(None), nodes: np.ndarray | None = None) -> np.ndarray:
        """Which options (of `rows`) can start now: their node count is the fewest nodes of their type
        whose free GPUs hold them (a packed option where one node holds it, a spread one where none does);
        `nodes` (a mask) counts only those nodes' free GPUs."""
        k, code = self.n_gpus[rows], self.code[rows]
        m = None if self.n_nodes is None else self.n_nodes[rows]
        if len(k) <= SHORT_OPTIONS:
            return self.fits_short(k, code, m, nodes)
        return self.fits_array(k, code, m, nodes)

    def fits_array(
        self, k: np.ndarray, code: np.ndarray, m: np.ndarray | None, nodes: np.ndarray | None
    ) -> np.ndarray:
        """`fits` as array operations: each type's fewest nodes for every GPU count up to the largest."""
        if m is None:
            m = np.ones_like(k)
        free = np.asarray(self.node_free, dtype=np.int64)
        if nodes is not None:
            free = np.where(nodes, free, 0)
        counts = np.arange(int(k.max(initial=0)) + 1)
        n_types = max(int(code.max(initial=-1)), int(self.node_code.max(initial=-1))) + 1
        need = np.zeros((n_types, len(counts)), dtype=np.int64)  # fewest nodes by (type, GPU count)
        for c in range(n_types):
            need[c] = fewest_free_nodes(free[self.node_code == c], counts)
        fewest = need[code, k]
        return (fewest > 0) & (m == fewest)

    def fits_short(
        self, k: np.ndarray, code: np.ndarray, m: np.ndarray | None, nodes: np.ndarray | None
    ) -> np.ndarray:
        """`fits` for a few options in plain Python (a decision handed one job and ~17 options spent most of
        its time in the array path's fixed number of calls): the same fewest nodes per (type, GPU count),
        from each needed type's free GPUs sorted, accumulated and bisected."""
        free = (
            self.node_free
            if nodes is None
            else [f if ok else 0 for f, ok in zip(self.node_free, nodes.tolist())]
        )
        codes = code.tolist()
        members = self.members()
        held = {
            c: list(accumulate(sorted(map(int, compress(free, members.get(c, ()))), reverse=True)))
            for c in set(codes)
        }
        counts = [1] * len(codes) if m is None else m.tolist()
        out = []
        for c, ki, mi in zip(codes, k.tolist(), counts):
            h = held[c]
            need = bisect_left(h, ki) + 1
            out.append(need <= len(h) and mi == need)
        return np.array(out, dtype=bool)

    def members(self) -> dict[int, list[bool]]:
        """Per node type code, whether each node is of that type (kept while `node_code` is the same array)."""
        memo = self.type_members
        if memo is None or memo[0] is not self.node_code:
            codes = self.node_code.tolist()
            memo = self.type_members = (self.node_code, {c: [x == c for x in codes] for c in set(codes)})
        return memo[1]

    def pick_node(self, code: int, k: int, nodes: np.ndarray | None = None) -> int:
        """Best fit: the node of this type (among `nodes`) with the fewest free GPUs that still holds k
        (-1 if none); consolidating, powered-on nodes first (_WAKE_RANK) and among equals the one idle
        the shortest, so that the others stay empty long enough to be powered down."""
        free = np.array(self.node_free, dtype=np.int64)
        ok = (free >= k) & (self.node_code == code)
        if nodes is not None:
            ok &= nodes
        held = np.flatnonzero(ok)
        if len(held) == 0:
            return -1
        if self.node_rank is None or self.node_idle_since is None:
            return int(held[np.argmin(free[held])])  # the first of the fullest, as _fit_key orders them
        order = np.lexsort((held, -self.node_idle_since[held], free[held], self.node_rank[held]))
        return int(held[order[0]])

    def _fit_key(self, i: int) -> tuple[float, ...]:
        if self.node_rank is None or self.node_idle_since is None:
            return (float(self.node_free[i]),)
        return (float(self.node_rank[i]), float(self.node_free[i]), -float(self.node_idle_since[i]))

    def node_mask(self, pos: int) -> np.ndarray | None:
        """The nodes option `pos` may use (None: all): consolidating, only busy powered-on nodes for a
        tier-0 option, powered-on ones for tier 1, and no resting node unless its job may wake one."""
        if self.tier is None or self.node_rank is None or self.node_rested is None:
            return None
        tier = int(self.tier[pos])
        on = self.node_rank == 0
        if tier == 0:
            free = np.asarray(self.node_free)
            total = np.array([n.total_gpus for n in self.snapshot.nodes])
            return on & (free < total)
        if tier == 1:
            return self.node_rank <= 1
        if self.may_wake_resting is not None and self.may_wake_resting[pos]:
            return None
        return ~self.node_rested

    def place(self, pos: int) -> tuple[tuple[int, int], ...] | None:
        """(node index, GPUs) for option `pos` on the free GPUs now, or None when its node count is not the
        fewest that hold it. One node: best fit. Several: an even split on the best-fitting nodes where
        one exists (what Slurm's GPUs-per-node request expresses), else the fullest nodes first."""
        code, k = int(self.code[pos]), int(self.n_gpus[pos])
        m = 1 if self.n_nodes is None else int(self.n_nodes[pos])
        mask = self.node_mask(pos)
        if m == 1:
            node = self.pick_node(code, k, mask)
            return ((node, k),) if node >= 0 else None
        mine = [
            i
            for i, f in enumerate(self.node_free)
            if f > 0 and self.node_code[i] == code and (mask is None or mask[i])
        ]
        rank = self.node_rank
        mine.sort(key=lambda i: (-self.node_free[i], 0 if rank is None else int(rank[i]), i))
        free = [self.node_free[i] for i in mine]
        if len(mine) < m or sum(free[:m]) < k or sum(free[: m - 1]) >= k:
            return None
        if k % m == 0 and free[m - 1] >= k // m:
            even = sorted(
                (i for i in mine if self.node_free[i] >= k // m), key=lambda i: (*self._fit_key(i), i)
            )
            return tuple((i, k // m) for i in sorted(even[:m]))
        alloc = [(i, self.node_free[i]) for i in mine[: m - 1]]
        rest = k - sum(g for _, g in alloc)
        last = min(
            (i for i in mine[m - 1 :] if self.node_free[i] >= rest), key=lambda i: (self.node_free[i], i)
        )
        return (*alloc, (last, rest))

    def start(self, pos: int, node: int | tuple[tuple[int, int], ...]) -> StartJob:
        """The start of option `pos` on one node or on `place(pos)`'s nodes; takes their GPUs."""
        job = self.jobs[int(self.job_of[pos])]
        k = int(self.n_gpus[pos])
        alloc = ((node, k),) if isinstance(node, int) else node
        for i, g in alloc:
            self.node_free[i] -= g
        limit = float(self.limit_w[pos])
        names = tuple(self.snapshot.nodes[i].name for i, _ in alloc)
        return StartJob(
            job_id=job.job_id,
            node=names[0],
            n_gpus=k,
            batch=int(self.batch[pos]),
            gpu_type=self.cache.type_names[int(self.code[pos])],
            power_limit_w=None if np.isnan(limit) else limit,
            predicted_power_w=float(self.power_w[pos]),
            nodes=names if len(alloc) > 1 else (),
            node_gpus=tuple(g for _, g in alloc) if len(alloc) > 1 else (),
        )

    def release(self, start: StartJob) -> None:
        """Give back the GPUs `start` took (a start withdrawn after all)."""
        index = {n.name: i for i, n in enumerate(self.snapshot.nodes)}
        for name, g in start.allocation():
            self.node_free[index[name]] += g


class BatchPacker:
    """Base of every policy: subclasses say how a job's placement is chosen and how jobs are ranked."""

    name: str = "base"
    #: "time" (fastest placement) or "edp" (minimum energy-delay product)
    objective: ClassVar[str] = "time"
    #: True when decisions can change with time alone (preemption for deadlines): the caller then
    #: asks `wake_at_s` when to call again even if nothing else changes.
    time_sensitive: bool = False
    #: True when the score reads each user's GPU-seconds so far (`ClusterSnapshot.user_gpu_s`, from sacct):
    #: the daemon then waits for that history; other policies' cycles go on while it is refreshed
    uses_history: ClassVar[bool] = False
    #: "default": every job runs at its GPUs' default limit (the exclusive baselines, so that comparisons
    #: with them stay honest); "bounded": each placement's limit minimises the policy's objective among
    #: the limits that slow the job by at most `max_slowdown`; "free": limits the subclass offers
    #: (`limit_fractions`, a job's declared limits) are weighed without a slowdown bound.
    limits: str = "free"

    def __init__(
        self,
        *,
        aging_weight: float = 1.0,
        malleable: bool = True,
        power_budget_w: float | None = None,
        max_slowdown: float | None = None,
        power_limits: bool = True,
        spread_slack: float | None = None,
        consolidate: bool = True,
        consolidation_slack: float = DEFAULT_CONSOLIDATION_SLACK,
        min_off_s: float = DEFAULT_MIN_OFF_S,
        max_wake_wait_s: float = DEFAULT_MAX_WAKE_WAIT_S,
        **params: Any,
    ) -> None:
        if params:
            raise ConfigError(f"policy {self.name}: unknown parameter(s) {', '.join(sorted(params))}")
        if aging_weight < 0:
            raise ConfigError(f"policy {self.name}: aging_weight must be >= 0")
        if max_slowdown is not None and not (0.0 <= max_slowdown <= 10.0):
            raise ConfigError(f"policy {self.name}: max_slowdown must lie in [0, 10], got {max_slowdown!r}")
        if spread_slack is not None and spread_slack < 0:
            raise ConfigError(f"policy {self.name}: spread_slack must be >= 0")
        if not isinstance(consolidate, bool):
            raise ConfigError(f"policy {self.name}: consolidate must be true or false, got {consolidate!r}")
        for key, value, top in (
            ("consolidation_slack", consolidation_slack, 10.0),
            ("min_off_s", min_off_s, 1e9),
            ("max_wake_wait_s", max_wake_wait_s, 1e9),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= top:
                raise ConfigError(f"policy {self.name}: {key} must lie in [0, {top:g}], got {value!r}")
        #: energy policies keep nodes empty or powered down where it costs little EDP (time policies and
        #: the baselines never: `consolidate` is accepted by all, as one site setting)
        self.consolidate = bool(consolidate) and self.objective == "edp"
        self.consolidation_slack = float(consolidation_slack)
        self.min_off_s = float(min_off_s)
        self.max_wake_wait_s = float(max_wake_wait_s)
        if self.consolidate:
            self.time_sensitive = True  # a job kept off a resting node is placed when the node's rest ends
        #: a spread option is taken only when its objective is within this fraction of the job's best
        #: packed one (free or not), else the job waits for packed GPUs; time policies never wait.
        default = SPREAD_SLACK_EDP if self.objective == "edp" else INF
        self.spread_slack = default if spread_slack is None else float(spread_slack)
        self.aging_weight = float(aging_weight)
        self.malleable = bool(malleable)
        self.power_budget_w = power_budget_w
        if not power_limits:  # this instance keeps every job at the default limit (comparisons)
            self.limits = "default"
        bounded = self.limits == "bounded"
        #: accepted by every policy (one site setting for all); only "bounded" policies use it. A bound
        #: of 0 still lets a limit that costs no predicted time (a memory- or launch-bound job) save power.
        self.max_slowdown = DEFAULT_MAX_SLOWDOWN if max_slowdown is None else float(max_slowdown)
        self.limit_fractions: tuple[float, ...] = LIMIT_STEPS if bounded else ()
        self._caches: dict[int, PredictionCache] = {}
        #: the last cycle built: (its key, snapshot, cycle, free GPUs and feasibility as built)
        self._last_cycle: (
            tuple[tuple[int, int, tuple[float, ...]], ClusterSnapshot, Cycle, list[int], np.ndarray] | None
        ) = None
        self._rows = JobRows()
        #: the last decision's prediction cache, nodes and their layout (`_layout`): a decision whose nodes
        #: differ only in free GPUs or power state reuses it without building the layout's key
        self._layout_memo: tuple[PredictionCache, tuple[NodeState, ...], Any] | None = None
        self._power_memo: tuple[tuple[NodeState, ...], bool] | None = None  # (nodes, never powered down)
        #: the last cycle's node types by code (Cycle.type_members), reused while the layout's codes are the same
        self._members_memo: tuple[np.ndarray, dict[int, list[bool]]] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, malleable={self.malleable})"

    # -- the one public call ---------------------------------------------------------------------
    def decide(self, snapshot: ClusterSnapshot, oracle: Any) -> Decision:
        """Pure function of the snapshot (and the oracle's predictions): no clock, no I/O, no RNG."""
        if not snapshot.pending:
            return Decision()
        cyc = self.cycle(snapshot, oracle)
        return self.pack(cyc)

    def wake_at_s(self, snapshot: ClusterSnapshot, oracle: Any) -> float | None:
        """When the decision for an otherwise unchanged cluster may change (None: never): consolidating,
        when the first resting node (powered down less than min_off_s ago) may be woken again."""
        return self.rest_end_s(snapshot)

    def rest_end_s(self, snapshot: ClusterSnapshot) -> float | None:
        """The earliest end of a node's rest after now, while jobs wait (None: none, or not consolidating)."""
        if not self.consolidate or not snapshot.pending:
            return None
        ends = [e for n in snapshot.nodes if (e := self._rest_end(n)) is not None and e > snapshot.time_s]
        return min(ends) if ends else None

    def _rest_end(self, node: NodeState) -> float | None:
        """When a powered-down (or powering-down) node may be woken again (None: not resting, or unknown)."""
        if node.power_state not in ("off", "powering_down") or node.powered_down_s is None:
            return None
        return node.powered_down_s + self.min_off_s

    def pack(self, cyc: Cycle) -> Decision:
        best = self.placements(cyc)
        tier, score = self.score(cyc, best)
        return self.allocate(cyc, self.order(best, tier, score), best)

    # -- hooks ---------------------------------------------------------------------------------
    def placements(self, cyc: Cycle) -> np.ndarray:
        metric = cyc.edp if self.objective == "edp" else cyc.time_s
        ok = cyc.feasible & self.spread_ok(cyc, metric)
        return cyc.best(metric, ok & self.consolidated(cyc, metric, ok))

    def consolidated(self, cyc: Cycle, metric: np.ndarray, ok: np.ndarray) -> np.ndarray:
        """Options consolidation accepts: a tier-1 option (on an empty powered-on node) only when its
        `metric` beats the job's best tier-0 one (on busy powered-on nodes) by more than
        `consolidation_slack`, a tier-2 one (waking a node) only when it beats the best of tiers 0 and 1
        so. Jobs with no option of a lower tier take the best they have."""
        if cyc.tier is None:
            return np.ones(len(metric), dtype=bool)
        keep = np.ones(len(metric), dtype=bool)
        scale = 1.0 + self.consolidation_slack
        for tier in (1, 2):
            best_lower = job_minima(metric, ok & (cyc.tier < tier), cyc.job_of, len(cyc.jobs))
            keep &= (cyc.tier != tier) | (metric * scale < best_lower[cyc.job_of])
        return keep

    def spread_ok(self, cyc: Cycle, metric: np.ndarray) -> np.ndarray:
        """Options the policy accepts: packed ones, and spread ones whose `metric` is within `spread_slack`
        of the job's best packed option (free now or not): spreading that costs more is worth a wait."""
        if cyc.spread is None or not cyc.spread.any() or self.spread_slack == INF:
            return np.ones(len(metric), dtype=bool)
        packed = ~cyc.spread
        best_packed = job_minima(metric, packed, cyc.job_of, len(cyc.jobs))
        return packed | (metric <= best_packed[cyc.job_of] * (1.0 + self.spread_slack))

    def score(self, cyc: Cycle, best: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(tier, score) per job, lower first; jobs without a placement are ignored."""
        raise NotImplementedError

    def allocate(self, cyc: Cycle, order: list[int], best: np.ndarray) -> Decision:
        """Algorithm 8 without the power test: dispatch in order when the chosen placement still fits."""
        starts = []
        # (type, GPUs) of one-node options no node held: free GPUs only shrink here, so none will (without
        # consolidation, whose node masks change as nodes fill); 10,000 waiting jobs are passed quickly
        full: set[tuple[int, int]] = set()
        for j in order:
            pos = int(best[j])
            key = None
            if cyc.tier is None and (cyc.n_nodes is None or cyc.n_nodes[pos] == 1):
                key = (int(cyc.code[pos]), int(cyc.n_gpus[pos]))
                if key in full:
                    continue
            place = cyc.place(pos)
            if place is not None:
                starts.append(cyc.start(pos, place))
                if not any(cyc.node_free):
                    break
            elif key is not None:
                full.add(key)
        return Decision(starts=tuple(starts))

    # -- helpers -------------------------------------------------------------------------------
    @staticmethod
    def order(best: np.ndarray, tier: np.ndarray, score: np.ndarray) -> list[int]:
        """Jobs with a placement by (tier, score), ties by queue order (deterministic)."""
        idx = np.arange(len(best))
        ranked = np.lexsort((idx, score, tier))
        return [int(j) for j in ranked if best[j] >= 0]

    def cycle(self, snapshot: ClusterSnapshot, oracle: Any) -> Cycle:
        """The snapshot's options as arrays. The daemon asks twice per snapshot (its decision, then its
        ranking as if GPUs were free): the second call gets a copy of the first's cycle (its free GPUs and
        feasibility are the parts a decision changes), 0.3 s of a cycle at 10,000 pending jobs."""
        key = (id(snapshot), id(oracle), self.limit_fractions)
        last = self._last_cycle
        if last is not None and last[0] == key and last[1] is snapshot:
            return replace(last[2], node_free=list(last[3]), feasible=last[4].copy())
        cyc = self._build_cycle(snapshot, oracle)
        # what a decision changes is kept aside, and the copy made only when asked again (a simulator
        # never asks twice: a copy per decision was 3 % of a replay's decisions)
        self._last_cycle = (key, snapshot, cyc, list(cyc.node_free), cyc.feasible)
        return cyc

    def _build_cycle(self, snapshot: ClusterSnapshot, oracle: Any) -> Cycle:
        cache = self._caches.get(id(oracle))
        if cache is None or cache.oracle is not oracle:
            cache = self._caches[id(oracle)] = PredictionCache(oracle)
        nodes = snapshot.nodes
        memo = self._layout_memo
        if memo is not None and memo[0] is cache and same_layout(memo[1], nodes):
            static = memo[2]
        else:
            static = self._layout(cache, nodes)
        self._layout_memo = (cache, nodes, static)
        node_code, node_idle_w = static[1], static[2]
        jobs = snapshot.pending
        offs, lens, remaining, submit, opted_out = self._rows.columns(self, cache, static, jobs)
        idx, job_of = expand(offs, lens)
        n_all, b_all, code_all, pl_all, sps_all, pw_all, base_all = cache.arrays
        m_all, spread_all = cache.node_arrays
        keep = self.limit_mask(
            jobs,
            job_of,
            pl_all[idx],
            sps_all[idx],
            base_all[idx],
            snapshot.time_s,
            (remaining, submit, opted_out),
        )
        if not keep.all():
            idx, job_of = idx[keep], job_of[keep]
        n, code, sps = n_all[idx], code_all[idx], sps_all[idx]
        node_free = [nd.free_gpus for nd in nodes]
        cyc = Cycle(
            snapshot=snapshot,
            cache=cache,
            jobs=jobs,
            job_of=job_of,
            n_gpus=n,
            batch=b_all[idx],
            code=code,
            limit_w=pl_all[idx],
            power_w=pw_all[idx],
            time_s=remaining[job_of] / sps,
            feasible=np.zeros(len(n), dtype=bool),
            node_free=node_free,
            node_code=node_code,
            node_idle_w=node_idle_w,
            n_nodes=m_all[idx],
            spread=spread_all[idx],
            submit_s=submit,
            type_members=self._members_memo,
        )
        cyc.refresh()
        self._members_memo = cyc.type_members
        if self.consolidate:
            self._consolidation(cyc)
        return cyc

    @staticmethod
    def _layout(cache: PredictionCache, nodes: tuple[NodeState, ...]) -> Any:
        """(facts per GPU type, type code per node, idle power per node) of the nodes' layout, kept in
        `cache` per layout."""
        key = tuple(map(_LAYOUT_OF, nodes))
        static = cache.layouts.get(key)
        if static is None:
            types: dict[str, TypeFacts] = {}
            for node in nodes:
                sizes = sorted((nd.total_gpus for nd in nodes if nd.gpu_type == node.gpu_type), reverse=True)
                types.setdefault(node.gpu_type, TypeFacts(node.tdp_w, node.min_power_limit_w, tuple(sizes)))
            codes = np.array([cache.code(nd.gpu_type) for nd in nodes], dtype=np.int64)
            idle_w = np.array([nd.idle_power_w for nd in nodes], dtype=np.float64)
            idle_w.setflags(write=False)  # shared by every cycle on this layout
            codes.setflags(write=False)  # ... and `Cycle.members` kept by this array's identity
            static = cache.layouts[key] = (types, codes, idle_w)
        return static

    def _never_powered_down(self, nodes: tuple[NodeState, ...]) -> bool:
        """No node powers down (no SuspendTime) and every node is on. After a decision that found so, only
        the nodes that are new objects are read."""
        memo = self._power_memo
        check: Iterable[int] = range(len(nodes))
        if memo is not None and memo[1] and len(memo[0]) == len(nodes):
            check = compress(check, map(is_not, memo[0], nodes))
        never = all(nodes[i].suspend_time_s is None and nodes[i].power_state == "on" for i in check)
        self._power_memo = (nodes, never)
        return never

    def _consolidation(self, cyc: Cycle) -> None:
        """Fill the cycle's power view: node ranks, resting nodes, each option's tier and which jobs may
        wake a resting node (one whose rest ends more than max_wake_wait_s after their submission)."""
        snap = cyc.snapshot
        nodes = snap.nodes
        if self._never_powered_down(nodes):
            return  # no node is ever powered down: keeping one empty saves nothing
        now = snap.time_s
        rank = np.array([_WAKE_RANK[n.power_state] for n in nodes], dtype=np.int64)
        since = np.array(
            [-INF if n.idle_since_s is None else n.idle_since_s for n in nodes], dtype=np.float64
        )
        rest = np.array([self._rest_end(n) or -INF for n in nodes], dtype=np.float64)
        rested = rest > now
        free = np.asarray(cyc.node_free, dtype=np.int64)
        total = np.array([n.total_gpus for n in nodes], dtype=np.int64)
        on = rank == 0
        tier0 = cyc.fits(nodes=on & (free < total))
        tier1 = cyc.fits(nodes=rank <= 1)
        first_rest_end = float(np.min(rest[rested])) if rested.any() else INF
        submit = np.array([j.submit_s for j in cyc.jobs], dtype=np.float64)
        may_wake = (first_rest_end - submit > self.max_wake_wait_s)[cyc.job_of]
        patient = cyc.fits(nodes=~rested) if rested.any() else cyc.feasible
        cyc.feasible = np.where(may_wake, cyc.feasible, patient) | tier0 | tier1
        cyc.node_rank, cyc.node_idle_since, cyc.node_rested = rank, since, rested
        cyc.tier = np.where(tier0, 0, np.where(tier1, 1, 2)).astype(np.int64)
        cyc.may_wake_resting = may_wake

    def limit_mask(
        self,
        jobs: tuple[PendingJob, ...],
        job_of: np.ndarray,
        limit_w: np.ndarray,
        sps: np.ndarray,
        default_sps: np.ndarray,
        now_s: float = 0.0,
        per_job: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> np.ndarray:
        """Which options this policy may choose: the default limit always; another limit not for a job
        that asked for the default (SPEC `nolimit`), never under "default", and under "bounded" only when
        the time the limit adds to the job's run is at most `max_slowdown` of its JCT: its wait so far and
        its run at the default limit. A job that has not waited may run `max_slowdown` slower; one that
        waited in the queue spends a share of that wait, which its user sees as the same JCT budget.
        `per_job`: (remaining samples, submit time, keeps the default limit) of each job, where the caller
        has them (else read from `jobs`)."""
        default = np.isnan(limit_w)
        if self.limits == "default":
            return default
        if per_job is None:
            per_job = (
                np.array([j.remaining_samples for j in jobs], dtype=np.float64),
                np.array([j.submit_s for j in jobs], dtype=np.float64),
                np.array([self.keeps_default_limit(j) for j in jobs], dtype=bool),
            )
        remaining, submit, opted_out = per_job
        allowed = ~opted_out[job_of]
        if self.limits == "bounded":
            # work / sps - t_default <= max_slowdown * (wait + t_default), in place: at 10,000 jobs these
            # arrays hold ~2 million options each, and every temporary costs its allocation
            work = remaining[job_of]
            wait = np.maximum(now_s - submit, 0.0)
            with np.errstate(invalid="ignore", divide="ignore"):
                t_default = work / default_sps
                extra = np.divide(work, sps, out=work)
                np.subtract(extra, t_default, out=extra)
                budget = np.add(t_default, wait[job_of], out=t_default)
                np.multiply(budget, self.max_slowdown, out=budget)
                allowed &= extra <= budget
        return default | allowed

    def keeps_default_limit(self, job: PendingJob) -> bool:
        """A job this policy never caps: one that asked for the default limit (SPEC `nolimit`)."""
        return job.default_power_limit

    def at(self, values: np.ndarray, best: np.ndarray) -> np.ndarray:
        """Value of each job's chosen option (inf where it has none)."""
        out = np.full(len(best), INF)
        has = best >= 0
        out[has] = values[best[has]]
        return out


def same_layout(old: tuple[NodeState, ...], new: tuple[NodeState, ...]) -> bool:
    """The nodes have the same layout (`_LAYOUT_OF`, in order): only the nodes that are not the same
    objects are read (a simulator hands the unchanged ones again)."""
    if len(old) != len(new):
        return False
    return all(
        _LAYOUT_OF(old[i]) == _LAYOUT_OF(new[i]) for i in compress(range(len(new)), map(is_not, old, new))
    )


def first_minima(values: np.ndarray, job_of: np.ndarray) -> np.ndarray:
    """Per job present in `job_of`, the first flat position holding its least value (NaN never chosen
    over a number): one pass of segment minima where each job's options are contiguous (as `expand`
    lays them out), else a sort."""
    if len(job_of) > 1 and not bool(np.all(job_of[1:] >= job_of[:-1])):
        order = np.lexsort((values, job_of))
        first = np.ones(len(order), dtype=bool)
        first[1:] = job_of[order[1:]] != job_of[order[:-1]]
        return order[first]
    if len(job_of) and job_of[0] == job_of[-1]:  # one job (a decision per arrival on a short queue)
        numbers = values[~np.isnan(values)]  # NaN is never the least (np.fmin's rule)
        hit = np.flatnonzero(values == numbers.min()) if len(numbers) else numbers
        return hit[:1] if len(hit) else np.zeros(1, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], job_of[1:] != job_of[:-1])))
    low = np.fmin.reduceat(values, starts)
    segment = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(values))))
    hit = np.flatnonzero(values == low[segment])
    seg_of_hit = segment[hit]
    first = np.ones(len(hit), dtype=bool)
    first[1:] = seg_of_hit[1:] != seg_of_hit[:-1]
    heads = starts.copy()  # a segment of NaN only keeps its first position (never finite)
    heads[seg_of_hit[first]] = hit[first]
    return heads


def first_least(values: list[float], ok: list[bool]) -> int:
    """One job's `first_minima` pick among `ok` in plain Python: the first position of its least finite
    value (NaN never chosen, ties to the first), -1 where that least value is not finite (or none is ok)."""
    pos, low = -1, INF
    for i, (x, keep) in enumerate(zip(values, ok)):
        if keep and x < low:
            pos, low = i, x
    return pos if low > -INF else -1


def job_minima(metric: np.ndarray, mask: np.ndarray, job_of: np.ndarray, n_jobs: int) -> np.ndarray:
    """Per job, the least `metric` among its options in `mask` (inf where none; NaN propagates, as
    `np.minimum.at` does): segment minima where each job's options are contiguous, else `minimum.at`."""
    out = np.full(n_jobs, INF)
    if len(job_of) > 1 and not bool(np.all(job_of[1:] >= job_of[:-1])):
        np.minimum.at(out, job_of[mask], metric[mask])
        return out
    if len(job_of) == 0:
        return out
    starts = np.flatnonzero(np.concatenate(([True], job_of[1:] != job_of[:-1])))
    out[job_of[starts]] = np.minimum.reduceat(np.where(mask, metric, INF), starts)
    return out


class JobRows:
    """Each pending job's row of a cycle (JobRow), kept from one decision to the next: a job that waits is
    handed to many decisions (the simulator hands the same PendingJob object each time), and building its
    option key, remaining work and the rest for every job of the queue at every decision was the largest
    part of a decision's cost on a long queue. Rows are found by the job's identity: a row holds its job,
    so no other object can have that identity while the row is kept. Rows of jobs no longer handed out
    are dropped when they outnumber twice the queue (plus ROWS_SLACK), so they never grow past a small
    multiple of the queue; a new option layout, prediction cache or set of limits starts over."""

    #: rows of departed jobs kept beyond twice the queue before they are dropped
    ROWS_SLACK = 1024

    def __init__(self) -> None:
        self._rows: dict[int, JobRow] = {}
        self._valid: tuple[Any, ...] = ()

    def columns(
        self, policy: BatchPacker, cache: PredictionCache, layout: Any, jobs: tuple[PendingJob, ...]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(offset, length, remaining samples, submit time, keeps the default limit) of each job."""
        valid = (cache, layout, policy.limit_fractions, policy.malleable)
        was = self._valid
        if not was or was[0] is not cache or was[1] is not layout or was[2:] != valid[2:]:
            self._rows, self._valid = {}, valid
        old = self._rows
        rows: list[JobRow | None] = [old.get(id(j)) for j in jobs]
        missing = [i for i, r in enumerate(rows) if r is None]
        if missing:
            new_jobs = [jobs[i] for i in missing]
            offs, lens = cache.slots(
                new_jobs, layout[0], rigid=not policy.malleable, limit_fractions=policy.limit_fractions
            )
            for i, job, off, n in zip(missing, new_jobs, offs.tolist(), lens.tolist()):
                row = (job, off, n, job.remaining_samples, job.submit_s, policy.keeps_default_limit(job))
                rows[i] = old[id(job)] = row
        kept = cast(list[JobRow], rows)  # every row is filled above
        if len(old) > 2 * len(kept) + self.ROWS_SLACK:
            self._rows = {id(r[0]): r for r in kept}
        if not kept:
            empty_i, empty_f = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
            return empty_i, empty_i, empty_f, empty_f, np.zeros(0, dtype=bool)
        _, off_c, len_c, rem_c, sub_c, opt_c = zip(*kept)
        return (
            np.array(off_c, dtype=np.int64),
            np.array(len_c, dtype=np.int64),
            np.array(rem_c, dtype=np.float64),
            np.array(sub_c, dtype=np.float64),
            np.array(opt_c, dtype=bool),
        )
