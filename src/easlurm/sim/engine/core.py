"""The SimPy cluster replica: arrivals, periodic batch packing by a policy, job runs, preemption, power."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from typing import Any

import simpy
from simpy.core import SimTime
from simpy.events import NORMAL, EventPriority

from easlurm.errors import ModelError
from easlurm.model.colocation import INFEASIBLE
from easlurm.model.node_power import PowerSaving
from easlurm.priority.policy_call import call_policy
from easlurm.priority.snapshot import ClusterSnapshot, Decision, NodeState, PendingJob, RunningJob, StartJob
from easlurm.sim.cluster import ClusterSpec
from easlurm.sim.engine.ledger import PowerLedger
from easlurm.sim.engine.pending import DEFAULT_QUEUE_DEPTH, PendingQueue
from easlurm.sim.engine.power_state import NodePower, PowerSaver, PowerState
from easlurm.sim.engine.records import JobRecord, Run
from easlurm.sim.engine.truth import Truth
from easlurm.sim.job import JobSpec

log = logging.getLogger(__name__)

#: the simulator's node power states as the snapshot names them (Slurm: idle, idle%, idle~, idle#)
_SNAPSHOT_POWER = {
    PowerState.ON: "on",
    PowerState.SUSPENDING: "powering_down",
    PowerState.OFF: "off",
    PowerState.RESUMING: "powering_up",
}


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it processes (for events/s figures) and passes over
    events abandoned before they fire (a job's old completion time after its rate changed), so that they
    neither count nor end a run on their time. A passive event (a node's power-down timer) happens when the
    run gets there but does not keep a run without horizon going (`run_active`).

    Only SimPy's public interface is used: `schedule` counts what is queued, and a callback on each
    abandoned or passive event says when it has fired."""

    def __init__(self) -> None:
        super().__init__()
        self.n_events = 0
        self.abandoned: set[simpy.Event] = set()
        self.passive: set[simpy.Event] = set()
        self._queued = 0  # events scheduled and not yet processed
        self._passed_over = False  # the event just processed was abandoned

    def schedule(self, event: simpy.Event, priority: EventPriority = NORMAL, delay: SimTime = 0) -> None:
        self._queued += 1
        super().schedule(event, priority, delay)

    def abandon(self, event: simpy.Event) -> None:
        """`event` (scheduled) no longer matters: it fires without counting, and its waiting process
        parks (Simulator._job)."""
        self.abandoned.add(event)
        event.callbacks.append(self._pass_over)

    def _pass_over(self, event: simpy.Event) -> None:
        self.abandoned.discard(event)
        self._passed_over = True

    def mark_passive(self, event: simpy.Event) -> None:
        self.passive.add(event)
        event.callbacks.append(self.passive.discard)

    def mark_active(self, event: simpy.Event) -> None:
        self.passive.discard(event)

    def step(self) -> None:
        """Process the next event that matters, passing over the abandoned ones before it; EmptySchedule
        (counted, as one call of SimPy's own step that finds no event) when only abandoned ones are left."""
        while True:
            if self._queued == len(self.abandoned):
                self.n_events += 1
                raise simpy.core.EmptySchedule
            self._queued -= 1
            self._passed_over = False
            self.n_events += 1
            super().step()
            if not self._passed_over:
                return
            self.n_events -= 1

    def run_active(self) -> None:
        """Run while any event other than a passive one is scheduled."""
        try:
            while self._queued > len(self.passive):
                self.step()
        except simpy.core.EmptySchedule:  # only abandoned events were left
            pass


@dataclass(frozen=True)
class Preempted:
    """The cause a preempted job's process is interrupted with: the policy stopped `job_id` at `at_s`; it
    keeps the work of its first `kept_s` seconds (its last checkpoint) and goes back to the queue."""

    job_id: str
    at_s: float
    kept_s: float


@dataclass
class SimConfig:
    interval_s: float = 1.0
    horizon_s: float | None = None
    power_budget_w: float | None = None
    checkpoint_interval_s: float | None = None
    #: Slurm's power saving (None: nodes stay on); default: the cluster's own
    power_saving: PowerSaving | None = None
    type_facts: dict[str, tuple[float, float, float | None]] = field(
        default_factory=dict
    )  # idle, tdp, min pl
    #: pending jobs each decision sees, in queue order (None: all of them; engine/pending.py)
    queue_depth: int | None = DEFAULT_QUEUE_DEPTH


class Simulator:
    """Drives one policy over one job stream on one cluster; read the outcome from `records` and `ledger`.

    The scheduler packs on a fixed tick (`interval_s`, 1 s as in the thesis) but only on ticks where
    something changed (arrival, completion, or its own previous starts): with an unchanged cluster an
    empty decision stays empty, so skipping those ticks changes no outcome and saves most calls. An
    arrival past the head of the queue a decision sees (`queue_depth`) is no change either, unless its
    user is new (fair share counts users). A time-sensitive policy (AuraChronos) names the instant its
    decision may change by itself (`wake_at_s`)."""

    def __init__(
        self,
        cluster: ClusterSpec,
        jobs: Iterable[JobSpec],
        policy: Any,
        *,
        oracle: Any,
        truth: Truth,
        config: SimConfig,
    ) -> None:
        self.env = CountingEnvironment()
        self.cluster = cluster
        self.policy = policy
        self.oracle = oracle
        self.truth = truth
        self.cfg = config
        self._jobs = iter(jobs)
        self.nodes: list[NodeState] = []
        for n in cluster.nodes:
            idle_w, tdp_w, min_pl = config.type_facts[n.gpu_type]
            self.nodes.append(
                NodeState(n.name, n.gpu_type, n.n_gpus, n.n_gpus, idle_w, tdp_w, min_pl, sharing=n.sharing)
            )
        self.node_index = {n.name: i for i, n in enumerate(self.nodes)}
        self.max_node_gpus: dict[str, int] = {}
        for n in cluster.nodes:
            self.max_node_gpus[n.gpu_type] = max(self.max_node_gpus.get(n.gpu_type, 0), n.n_gpus)
        self.pending = PendingQueue()
        self.running: dict[str, Run] = {}
        self.records: dict[str, JobRecord] = {}
        gpu_idle_w = sum(n.free_gpus * n.idle_power_w for n in self.nodes)
        self.ledger = PowerLedger(idle_w=gpu_idle_w + cluster.base_w, gpu_w=gpu_idle_w)
        saving = config.power_saving if config.power_saving is not None else cluster.power_saving
        off_override = saving.off_w if saving is not None else None
        self.power = PowerSaver(
            self.env,
            self.ledger,
            [
                NodePower(
                    spec.name,
                    spec.base_w + st.total_gpus * st.idle_power_w,
                    st.total_gpus * st.idle_power_w,
                    spec.powered_off_w if off_override is None else off_override,
                )
                for spec, st in zip(cluster.nodes, self.nodes, strict=True)
            ],
            saving,
            self.env.mark_passive,
            self.env.mark_active,
        )
        self.resume_waits = 0
        #: since when each node holds no job (None: it holds one); every node starts empty
        self._idle_since: list[float | None] = [0.0] * len(self.nodes)
        self.busy_gpu_s_by_type: dict[str, float] = dict.fromkeys(self.max_node_gpus, 0.0)
        self._user_base: dict[str, float] = {}  # GPU-s = base + rate * now
        self._user_rate: dict[str, float] = {}
        self.decisions = 0
        self.rejected = 0
        self.preemptions = 0
        self.holds = 0
        self._dirty = True
        self._wake: simpy.Event | None = None
        self._last_tick = -1
        self.wall_s = 0.0
        self._running_tuple: tuple[RunningJob, ...] | None = None
        self._running_states_by_id: dict[str, RunningJob] = {}  # in `running`'s order
        #: each node's last snapshot state and what it was made from (node, power state, idle since,
        #: power-downs): a decision rebuilds only the nodes that changed since
        self._node_snaps: list[tuple[NodeState, Any, Any, float | None, int]] = []
        self._node_list: list[NodeState] = []  # each node's last snapshot state (`_node_snaps`' first item)
        self._node_tuple: tuple[NodeState, ...] = ()
        self._changed_nodes: set[int] = set()  # nodes whose GPUs were taken or freed since

    # -- public ----------------------------------------------------------------------------------
    def run(self) -> None:
        """Run to the horizon (or until nothing is left to happen)."""
        t0 = time.perf_counter()
        self.env.process(self._arrivals())
        self.env.process(self._scheduler())
        self.power.start()
        if self.cfg.horizon_s is None:
            self.env.run_active()
        else:
            self.env.run(until=self.cfg.horizon_s)
        end = self.env.now if self.cfg.horizon_s is None else self.cfg.horizon_s
        self._close(end)
        self.wall_s = time.perf_counter() - t0

    @property
    def now(self) -> float:
        return float(self.env.now)

    def snapshot(self) -> ClusterSnapshot:
        now = self.now
        rate = self._user_rate
        users = {u: base + rate.get(u, 0) * now for u, base in self._user_base.items()}
        return ClusterSnapshot(
            time_s=now,
            nodes=self._node_states(),
            running=self._running_states(),
            pending=self.pending.head(self.cfg.queue_depth),
            user_gpu_s=users,
            power_budget_w=self.cfg.power_budget_w,
        )

    def _node_states(self) -> tuple[NodeState, ...]:
        """The nodes with their power state, when each was last powered down and since when it, on, has
        held no job: what Slurm's node states (idle~, idle%, LastBusyTime) tell the daemon. Only nodes
        that may have changed since the last call are looked at: those whose GPUs were taken or freed
        (`_set_free`), or every node where power saving moves nodes between power states."""
        if not self._node_snaps or self.power.enabled:
            check: Iterable[int] = range(len(self.nodes))
        else:
            check = self._changed_nodes
        changed = False
        for i in check:
            changed = self._node_state(i) or changed
        self._changed_nodes = set()
        if changed:
            self._node_tuple = tuple(self._node_list)
        return self._node_tuple

    def _node_state(self, i: int) -> bool:
        """Bring node `i`'s snapshot state up to date; whether it changed."""
        cache, node, power = self._node_snaps, self.nodes[i], self.power.nodes[i]
        since, downs = self._idle_since[i], len(power.suspends)
        if i < len(cache):
            old = cache[i]
            if old[1] is node and old[2] is power.state and old[3] == since and old[4] == downs:
                return False
        saving = self.power.saving
        state = _with(
            node,
            power_state=_SNAPSHOT_POWER[power.state],
            idle_since_s=since if power.state is PowerState.ON else None,
            powered_down_s=power.suspends[-1] if power.suspends else None,
            suspend_time_s=saving.suspend_time_s if saving is not None else None,
        )
        entry = (state, node, power.state, since, downs)
        if i < len(cache):
            cache[i] = entry
            self._node_list[i] = state
        else:
            cache.append(entry)
            self._node_list.append(state)
        return True

    def decide(self, snap: ClusterSnapshot) -> Decision:
        """The scheduler's policy call on `snap`: the same function the daemon calls (call_policy), so a
        snapshot captured on the live cluster decides the same here."""
        self.decisions += 1
        return call_policy(self.policy, snap, self.oracle)

    def _running_states(self) -> tuple[RunningJob, ...]:
        if self._running_tuple is None:
            self._running_tuple = tuple(self._running_states_by_id.values())
        return self._running_tuple

    # -- processes -------------------------------------------------------------------------------
    def _arrivals(self) -> Generator[simpy.Event, Any, None]:
        horizon = self.cfg.horizon_s
        for spec in self._jobs:
            if horizon is not None and spec.submit_s >= horizon:
                break
            if spec.submit_s > self.env.now:
                yield self.env.timeout(spec.submit_s - self.env.now)
            if spec.job_id in self.records:
                log.warning("duplicate job id %s ignored", spec.job_id)
                continue
            self.records[spec.job_id] = JobRecord(spec)
            # a job that lands past the queue's head (queue_depth) from a known user changes nothing a
            # decision sees but the time, and time alone changes no decision here (see the class): a
            # queue that grows without bound then costs a decision per start or end, not per arrival too
            unseen = spec.user in self._user_base and self._past_head()
            self._user_base.setdefault(spec.user, 0.0)
            self.pending.add(spec.job_id, PendingJob.queued(spec))
            if not unseen:
                self._mark_dirty()

    def _past_head(self) -> bool:
        """A job added now would lie past the head each decision sees."""
        depth = self.cfg.queue_depth
        return depth is not None and len(self.pending) >= depth

    def _scheduler(self) -> Generator[simpy.Event, Any, None]:
        interval = self.cfg.interval_s
        while True:
            if not self._dirty:
                self._wake = self.env.event()
                yield self._wake
                self._wake = None
            tick = max(math.ceil(self.env.now / interval - 1e-9), self._last_tick + 1)
            if tick * interval > self.env.now:
                yield self.env.timeout(tick * interval - self.env.now)
            self._last_tick = tick
            self._dirty = False
            if not self.pending and not self._over_budget():
                continue
            snap = self.snapshot()
            decision = self.decide(snap)
            changed = self._apply(decision)
            if changed:
                self._dirty = True
            elif getattr(self.policy, "time_sensitive", False):
                self._schedule_recheck(snap)

    def _over_budget(self) -> bool:
        """Measured power above the budget: the policy is called even with an empty queue, to respond."""
        budget = self.cfg.power_budget_w
        return budget is not None and self.ledger.gpu_w > budget + 1e-6

    def _schedule_recheck(self, snap: ClusterSnapshot) -> None:
        """A time-sensitive policy says when its decision may change with time alone."""
        wake_at = getattr(self.policy, "wake_at_s", None)
        t = wake_at(snap, self.oracle) if wake_at is not None else snap.time_s + self.cfg.interval_s
        if t is None or not math.isfinite(t):
            return
        if self.cfg.horizon_s is not None and t >= self.cfg.horizon_s:
            return
        timer = self.env.timeout(max(t - self.now, 0.0))
        timer.callbacks.append(lambda _ev: self._mark_dirty())

    def _job(self, run: Run, duration_s: float) -> Generator[simpy.Event, Any, None]:
        """The run's completion after `duration_s` at its current rate. A new rate starts a new process
        and abandons this one's event (`_rerate`): this one then parks on an event nothing triggers, so
        that it ends unseen and schedules nothing."""
        if self.env.active_process is run.process:
            try:
                yield self.env.timeout(duration_s)
            except simpy.Interrupt:
                return  # preemption (cause: Preempted) already accounted by _preempt
            if self.env.active_process is run.process:
                self._finish(run)
                return
        yield self.env.event()  # superseded by a new rate's process

    # -- state changes ---------------------------------------------------------------------------
    def _mark_dirty(self) -> None:
        self._dirty = True
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _apply(self, decision: Decision) -> bool:
        changed = False
        self.holds += len(decision.hold)
        for job_id in decision.preempt:
            if job_id in self.running:
                self._preempt(job_id)
                changed = True
            else:
                self.rejected += 1
                log.warning("policy asked to preempt %s, which is not running", job_id)
        for start in decision.starts:
            if self._start(start):
                changed = True
            else:
                self.rejected += 1
        return changed

    def _start(self, st: StartJob) -> bool:
        pend = self.pending.get(st.job_id)
        node_i = self.node_index.get(st.node, -1)
        if pend is None or node_i < 0:
            log.warning("rejected start of %s on %s: unknown job or node", st.job_id, st.node)
            return False
        if st.colocate_with is not None:
            return self._join(st, pend, node_i)
        alloc = self._allocation(st)
        if alloc is None:
            return False
        for i, g in alloc:
            self._set_free(i, self.nodes[i].free_gpus - g)
        waits = [ev for i, _ in alloc if (ev := self.power.wake(i)) is not None]
        if waits:
            # Slurm resumes the powered-down nodes; the job holds its GPUs and starts once all are up
            self.pending.pop(st.job_id)
            self.resume_waits += 1
            self.env.process(self._resume_then_start(st, pend, node_i, alloc, waits))
        else:
            self._launch(st, pend, node_i, alloc)
        return True

    def _resume_then_start(
        self,
        st: StartJob,
        pend: PendingJob,
        node_i: int,
        alloc: tuple[tuple[int, int], ...],
        waits: list[simpy.Event],
    ) -> Generator[simpy.Event, Any, None]:
        t0 = self.now
        yield self.env.all_of(waits)
        self.records[st.job_id].resume_wait_s += self.now - t0
        self._launch(st, pend, node_i, alloc)
        self._mark_dirty()

    def _launch(
        self, st: StartJob, pend: PendingJob, node_i: int, alloc: tuple[tuple[int, int], ...]
    ) -> None:
        """Run a placed job whose GPUs are taken and whose nodes are on."""
        rec = self.records[st.job_id]
        sps, power_w = self.truth.rate(
            rec.spec, st.n_gpus, st.batch, st.gpu_type, st.power_limit_w, n_nodes=len(alloc)
        )
        idle_w = sum(g * self.nodes[i].idle_power_w for i, g in alloc)
        run = self._begin(st, pend, node_i, sps, power_w, sps, power_w, 1.0, None)
        run.alloc = alloc
        self.ledger.change(self.now, power_w, -idle_w)

    def _allocation(self, st: StartJob) -> tuple[tuple[int, int], ...] | None:
        """(node index, GPUs) of each node of a start, when every node exists, has the job's GPU type and
        holds its share; None (logged) otherwise."""
        alloc: list[tuple[int, int]] = []
        why = None
        for name, g in st.allocation():
            i = self.node_index.get(name, -1)
            node = self.nodes[i] if i >= 0 else None
            if node is None or node.gpu_type != st.gpu_type or node.free_gpus < g or g <= 0:
                why = f"{g} x {st.gpu_type} does not fit {name}"
            elif any(i == j for j, _ in alloc):
                why = f"node {name} named twice"
            alloc.append((i, g))
        if why is None and sum(g for _, g in alloc) != st.n_gpus:
            why = f"the nodes' GPUs do not sum to {st.n_gpus}"
        if why is not None:
            log.warning("rejected start of %s: %s", st.job_id, why)
            return None
        return tuple(alloc)

    def _join(self, st: StartJob, pend: PendingJob, node_i: int) -> bool:
        """Start a one-GPU job on the GPU of a running one-GPU job: both change rate (co-location rule),
        the node's free GPU count does not change, and the GPU's power is split between the two."""
        node = self.nodes[node_i]
        host = self.running.get(st.colocate_with or "")
        rec = self.records[st.job_id]
        why = None
        if node.sharing == "none":
            why = "node does not share GPUs"
        elif host is None or host.node != node_i:
            why = "partner is not running on this node"
        elif host.partner is not None or host.start.n_gpus != 1 or st.n_gpus != 1:
            why = "only two one-GPU jobs may share a GPU"
        elif not (rec.spec.shareable and host.record.spec.shareable):
            why = "both jobs must be shareable"
        elif node.gpu_type != st.gpu_type:
            why = f"node has {node.gpu_type}, not {st.gpu_type}"
        if why is not None or host is None:
            log.warning("rejected co-location of %s with %s: %s", st.job_id, st.colocate_with, why)
            return False

        try:
            co = self.truth.corun(
                host.record.spec,
                host.start.batch,
                rec.spec,
                st.batch,
                st.gpu_type,
                node.sharing,
                st.power_limit_w,
            )
        except ModelError as exc:
            co = dataclasses.replace(INFEASIBLE, reason=str(exc))
        if not co.feasible:
            log.warning("rejected co-location of %s with %s: %s", st.job_id, host.start.job_id, co.reason)
            return False
        # the GPU has one limit: the joiner's (as the daemon sets it when the joiner starts). Speeds are
        # against each job alone at the default limit; the joiner keeps the limit once alone again, the host
        # goes back to its own rate (the joiner's step restores the host's limit when it ends).
        host_sps = self.truth.rate(host.record.spec, 1, host.start.batch, st.gpu_type, None)[0]
        base_sps = self.truth.rate(rec.spec, 1, st.batch, st.gpu_type, None)[0]
        sps, power_w = self.truth.rate(rec.spec, 1, st.batch, st.gpu_type, st.power_limit_w)
        self._rerate(
            host,
            host_sps * co.speed[0],
            co.job_power_w(0),
            co.power_share[0],
            st.job_id,
        )
        run = self._begin(
            st,
            pend,
            node_i,
            base_sps * co.speed[1],
            co.job_power_w(1),
            sps,
            power_w,
            co.power_share[1],
            host.start.job_id,
        )
        # the ledger moves by the shared GPU's power minus the host's alone power: counted once
        self.ledger.change(self.now, run.power_w, 0.0)
        return True

    def _begin(
        self,
        st: StartJob,
        pend: PendingJob,
        node_i: int,
        sps: float,
        power_w: float,
        alone_sps: float,
        alone_power_w: float,
        share: float,
        partner: str | None,
    ) -> Run:
        """Create the run of a started job (GPUs already taken) and its completion process."""
        now = self.now
        rec = self.records[st.job_id]
        self.pending.pop(st.job_id)
        remaining = pend.remaining_samples
        duration = remaining / sps
        spec = rec.spec
        state = RunningJob(
            job_id=st.job_id,
            user=pend.user,
            node=st.node,
            gpu_type=st.gpu_type,
            n_gpus=st.n_gpus,
            batch=st.batch,
            power_w=power_w,
            start_s=now,
            urgent=pend.urgent,
            n_nodes=st.n_nodes,
            deadline_s=pend.deadline_s,
            power_limit_w=st.power_limit_w,
            expected_end_s=now + duration,
            checkpoint_interval_s=self.cfg.checkpoint_interval_s,
            predicted_power_w=st.predicted_power_w,
            shareable=spec.shareable,
            colocated_with=partner,
            model=spec.model,
            precision=spec.precision,
            seq_len=spec.seq_len,
            image_size=spec.image_size,
            time_limit_s=pend.time_limit_s,
        )
        run = Run(rec, node_i, st, sps, power_w, now, remaining, state)
        run.alone_samples_per_s, run.alone_power_w = alone_sps, alone_power_w
        run.gpu_share, run.partner, run.piece_start_s = share, partner, now
        run.pieces.append((0.0, 0.0, sps, power_w))
        self.running[st.job_id] = run
        self._running_states_by_id[st.job_id] = state
        self._running_tuple = None
        if rec.start_s is None:
            rec.start_s = now
        rec.node, rec.gpu_type, rec.n_gpus, rec.n_nodes = st.node, st.gpu_type, st.n_gpus, st.n_nodes
        rec.batch, rec.power_limit_w = st.batch, st.power_limit_w
        user = pend.user
        charged = st.n_gpus * share
        self._user_base[user] = self._user_base.get(user, 0.0) - charged * now
        self._user_rate[user] = self._user_rate.get(user, 0) + charged
        run.process = self.env.process(self._job(run, duration))
        return run

    def _settle(self, run: Run, now: float) -> None:
        """Account the run's energy and GPU time since its last rate change."""
        dt = now - run.piece_start_s
        run.record.energy_j += run.power_w * dt
        gpu_s = run.start.n_gpus * run.gpu_share * dt
        run.record.gpu_s += gpu_s
        self.busy_gpu_s_by_type[self.nodes[run.node].gpu_type] += gpu_s
        if run.partner is not None:
            run.record.shared_s += dt
        run.piece_start_s = now

    def _rerate(self, run: Run, sps: float, power_w: float, share: float, partner: str | None) -> None:
        """A partner joined or left: settle the old rate, reschedule the completion (work done is kept)."""
        now = self.now
        self._settle(run, now)
        rel = now - run.start_s
        done = run.done_at(rel)
        self.ledger.change(now, power_w - run.power_w, 0.0)
        user = run.state.user
        delta = run.start.n_gpus * (share - run.gpu_share)
        self._user_base[user] -= delta * now
        self._user_rate[user] += delta
        run.samples_per_s, run.power_w, run.gpu_share, run.partner = sps, power_w, share, partner
        run.pieces.append((rel, done, sps, power_w))
        left = max(run.remaining_samples - done, 0.0)
        run.state = dataclasses.replace(
            run.state, power_w=power_w, expected_end_s=now + left / sps, colocated_with=partner
        )
        self._running_states_by_id[run.start.job_id] = run.state
        self._running_tuple = None
        if run.process is not None and run.process.is_alive:
            self.env.abandon(run.process.target)  # the old completion is passed over; its process parks
        run.process = self.env.process(self._job(run, left / sps))

    def _release(self, run: Run) -> float:
        """Free the run's GPUs (or hand its shared GPU back to the partner) and account its segment;
        returns the segment's length (s)."""
        now = self.now
        k = run.start.n_gpus
        self._settle(run, now)
        if run.partner is None:
            idle_w = 0.0
            for i, g in run.alloc or ((run.node, k),):
                self._set_free(i, self.nodes[i].free_gpus + g)
                idle_w += g * self.nodes[i].idle_power_w
            self.ledger.change(now, -run.power_w, idle_w)
        else:
            self.ledger.change(now, -run.power_w, 0.0)
        user = run.state.user
        self._user_base[user] += k * run.gpu_share * now
        self._user_rate[user] -= k * run.gpu_share
        del self.running[run.start.job_id]
        del self._running_states_by_id[run.start.job_id]
        self._running_tuple = None
        partner = self.running.get(run.partner) if run.partner is not None else None
        if partner is not None:
            self._rerate(partner, partner.alone_samples_per_s, partner.alone_power_w, 1.0, None)
        return now - run.start_s

    def _finish(self, run: Run) -> None:
        self._release(run)
        run.record.end_s = self.now
        self._mark_dirty()

    def _preempt(self, job_id: str) -> None:
        """Stop a job; it keeps the work up to its last checkpoint (none: all work since its start is lost)."""
        run = self.running[job_id]
        elapsed = self._release(run)
        interval = self.cfg.checkpoint_interval_s
        kept_s = math.floor(elapsed / interval) * interval if interval else 0.0
        remaining = max(run.remaining_samples - run.done_at(kept_s), 0.0)
        run.record.wasted_energy_j += run.energy_between(kept_s, elapsed)
        run.record.preemptions += 1
        self.preemptions += 1
        if run.process is not None and run.process.is_alive:
            run.process.interrupt(Preempted(job_id, self.now, kept_s))
        requeued = PendingJob.queued(
            run.record.spec,
            remaining_steps=remaining / run.record.spec.batch_options[0],
            preemptions=run.record.preemptions,
            observed_power_ratio=_power_ratio(run),
        )
        # back at the front of the queue (thesis 5.3.2.4)
        self.pending.requeue(job_id, requeued)

    def _set_free(self, node_i: int, free: int) -> None:
        node = self.nodes[node_i]
        if free < 0 or free > node.total_gpus:
            raise AssertionError(f"node {node.name}: free GPUs would become {free}")
        self.nodes[node_i] = _with(node, free_gpus=free)
        self._changed_nodes.add(node_i)
        if free == node.total_gpus and node.free_gpus < free:
            self._idle_since[node_i] = self.now
            self.power.emptied(node_i)
        elif node.free_gpus == node.total_gpus and free < node.total_gpus:
            self._idle_since[node_i] = None
            self.power.taken(node_i)

    def _close(self, end_s: float) -> None:
        """Account running jobs up to the end (they stay unfinished)."""
        for run in self.running.values():
            self._settle(run, end_s)
        self.ledger.close(end_s)
        self.power.close(end_s)


def _with(node: NodeState, **changes: Any) -> NodeState:
    """`dataclasses.replace` of a node for fields that need no check (a free GPU count, or a power state
    from _SNAPSHOT_POWER): a copy with those fields set, without the generic replace's field walk and
    __post_init__ (1.7 s of a 31 s profile of a 10,000-job replay)."""
    new = object.__new__(NodeState)
    new.__dict__.update(node.__dict__)
    new.__dict__.update(changes)
    return new


def _power_ratio(run: Run) -> float | None:
    """Measured / predicted power of a run at its start (None when the policy gave no prediction); a job
    that joined a shared GPU compares its share of the GPU's power with the share predicted for it."""
    predicted = run.start.predicted_power_w
    return run.pieces[0][3] / predicted if predicted and run.pieces else None
