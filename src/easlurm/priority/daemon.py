"""The scheduler daemon: each cycle read Slurm, call the same policy as the simulator, apply the decision."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from easlurm.errors import SlurmError
from easlurm.model.build import build_oracle
from easlurm.priority import holds
from easlurm.priority.apply import (
    DEFAULT_MIN_RUN_S,
    IDLE_TTL_RELEASE,
    Action,
    Kind,
    Outcome,
    PlanContext,
    execute,
    plan,
    prune_env_files,
    release_all,
)
from easlurm.priority.explain import (
    PowerView,
    budget_warning,
    cycle_line,
    explain_actions,
    power_view,
    with_starts,
)
from easlurm.priority.metrics import Metrics
from easlurm.priority.packing import DEFAULT_MAX_SLOWDOWN
from easlurm.priority.policies import get_policy, policy_params
from easlurm.priority.policy_call import call_policy
from easlurm.priority.rank_words import JobView, Ranked, rank_view
from easlurm.priority.report import StartPrediction, predict_starts
from easlurm.priority.slurm_snapshot import (
    PendingMemo,
    SnapshotInputs,
    SpecReader,
    build_snapshot,
    gpu_facts_from_catalogue,
    measured_power,
    oracle_power,
    schedulable,
)
from easlurm.priority.snapshot import ClusterSnapshot, Decision
from easlurm.slurm.sched_client import SchedClient, SlurmJob

log = logging.getLogger(__name__)
#: the one INFO line per cycle of loop mode (`schedd` shows it by default)
cycle_log = logging.getLogger(__name__ + ".cycle")

LOG_SCHEMA_VERSION = 1
#: While Slurm fails the daemon waits longer between cycles, up to this: a failed try costs one squeue, and
#: after a long slurmctld outage (an upgrade) the daemon is back within a minute of Slurm.
MAX_BACKOFF_S = 60.0


@dataclass
class DaemonConfig:
    """Settings of one daemon (from the `sched` configuration section and the command's flags)."""

    policy: str = "zeus"
    interval_s: float = 10.0
    power_budget_w: float | None = None
    dry_run: bool = False
    hold_ttl_s: float = 600.0
    preempt_cooldown_s: float = 300.0
    #: no job is preempted before it has run this long since its (re)start (`sched.min_run_s`)
    min_run_s: float = DEFAULT_MIN_RUN_S
    aging_weight: float = 1.0
    #: the slowdown an energy policy's power limit may cost a job (`sched.max_slowdown`)
    max_slowdown: float = DEFAULT_MAX_SLOWDOWN
    #: how much more EDP a spread placement may cost than the best packed one (`sched.spread_slack`; None:
    #: the policy's own)
    spread_slack: float | None = None
    #: consolidation for Slurm's power saving (`sched.consolidate`, `sched.consolidation_slack`,
    #: `sched.min_off_s`, `sched.max_wake_wait_s`; None: the policy's own)
    consolidate: bool | None = None
    consolidation_slack: float | None = None
    min_off_s: float | None = None
    max_wake_wait_s: float | None = None
    decision_log: Path | None = None
    env_dir: Path | None = None
    state_save_dir: str | None = None
    log_snapshots: bool = False
    history_s: float = 7 * 86400.0
    history_refresh_s: float = 300.0
    #: Scope (one daemon per pool, staged roll-outs, tests on a shared cluster): only jobs whose name
    #: starts with `name_prefix` are managed, only `nodes` are scheduled (None: all).
    name_prefix: str | None = None
    nodes: tuple[str, ...] | None = None


@dataclass
class CycleReport:
    """One cycle: what was seen, decided and done, and how long each phase took (s)."""

    time_s: float
    snapshot: ClusterSnapshot | None = None
    decision: Decision | None = None
    actions: list[Action] = field(default_factory=list)
    outcome: Outcome | None = None
    timings_s: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    #: the oracle's prediction of each start (remaining steps): what `schedd --once` shows
    predictions: dict[str, StartPrediction] = field(default_factory=dict)
    #: the cluster's power against the budget, warnings, and each job's view with the reasons in words
    power: PowerView | None = None
    warnings: list[str] = field(default_factory=list)
    jobs: dict[str, JobView] = field(default_factory=dict)
    #: pending and running jobs read from Slurm (all of them, declared or not)
    jobs_seen: int = 0

    def to_dict(self, with_snapshot: bool, with_jobs: bool = True) -> dict[str, Any]:
        """The JSON form; `with_jobs` adds each job's view with the reasons in words (what --once shows; the
        decision log carries it with the snapshot only, it is the longest part)."""
        out: dict[str, Any] = {
            "schema_version": LOG_SCHEMA_VERSION,
            "time_s": self.time_s,
            "timings_s": self.timings_s,
            "error": self.error,
        }
        if self.decision is not None:
            out["decision"] = self.decision.to_dict()
        if self.predictions:
            out["predictions"] = {j: asdict(p) for j, p in self.predictions.items()}
        out["actions"] = [a.to_dict() for a in self.actions]
        if self.power is not None:
            out["power"] = self.power.to_dict()
        out["warnings"] = list(self.warnings)
        if self.jobs and with_jobs:
            out["jobs"] = {j: v.to_dict() for j, v in self.jobs.items()}
        if self.outcome is not None:
            out["failed"] = [{"action": a.to_dict(), "error": e} for a, e in self.outcome.failed]
        if with_snapshot and self.snapshot is not None:
            out["snapshot"] = self.snapshot.to_dict()
        return out


def queue_order(policy: Any, snapshot: ClusterSnapshot, oracle: Any) -> list[str]:
    """The policy's ranking of every declared pending job as if GPUs were free (its placement and score
    hooks), so that Slurm starts the jobs that cannot start now in the policy's order later. [] for
    policies without a per-job score (AuraChronos ranks inside its own packing)."""
    return rank_view(policy, snapshot, oracle).order


class Daemon:
    """Reads Slurm, decides, applies. Every action is derived from Slurm's current state, so a restart
    re-plans from scratch; holds are released at start-up and shutdown and expire on their own."""

    def __init__(
        self,
        client: SchedClient,
        cfg: DaemonConfig,
        oracle: Any = None,
        policy: Any = None,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.cfg = cfg
        if oracle is None:
            oracle = build_oracle()
        self.oracle = oracle
        params = policy_params(cfg.policy, asdict(cfg))
        self.policy = policy if policy is not None else get_policy(cfg.policy, **params)
        self.metrics = metrics or Metrics(enabled=False)
        self.clock = clock
        self.specs = SpecReader(cfg.state_save_dir)
        self._facts = gpu_facts_from_catalogue(self.oracle.catalogue)
        self._predict = oracle_power(self.oracle)
        self._pending = PendingMemo()
        self._history: dict[str, float] = {}
        self._history_at_s: float | None = None
        #: a policy whose score reads the per-user history waits for sacct; the others' cycles go on with
        #: the last one while it is refreshed here (sacct took 0.6-5 s of a cycle at 10,000 pending jobs)
        self._waits_for_history = bool(getattr(self.policy, "uses_history", True))
        self._background = ThreadPoolExecutor(1, thread_name_prefix="easlurm-history")
        self._history_refresh: Future[dict[str, float]] | None = None
        self._requeued_at: dict[str, float] = {}
        self._failures = 0
        self._known_ids: frozenset[str] = frozenset()
        self._ttl_spent: set[str] = set()
        self._warned: str | None = None

    # -- phases ------------------------------------------------------------------------------
    def _user_history(self, now_s: float) -> dict[str, float]:
        """Per-user GPU-seconds, refreshed every few minutes (sacct is the slowest query)."""
        if self._history_at_s is None or now_s - self._history_at_s >= self.cfg.history_refresh_s:
            try:
                self._history = self.client.user_gpu_s(now_s - self.cfg.history_s)
                self._history_at_s = now_s
            except SlurmError as exc:
                log.warning("per-user GPU history unavailable, keeping the last one: %s", exc)
        return self._history

    def read(self, now_s: float) -> tuple[SnapshotInputs, dict[str, tuple[int, int]]]:
        """Everything one cycle needs from Slurm; raises SlurmError (then nothing is changed). The queue,
        nodes, priorities and history are read at once (the history's sacct, every few minutes, took
        0.6 s beside the queue's 1.3 s in the first cycle at 10,000 pending jobs)."""
        with ThreadPoolExecutor(4, thread_name_prefix="easlurm-read") as pool:
            read_jobs, read_nodes = pool.submit(self.client.jobs), pool.submit(self.client.nodes)
            read_factors = pool.submit(self.client.site_factors)
            history = pool.submit(self._user_history, now_s) if self._waits_for_history else None
            # the first failure in this order is raised
            jobs, nodes, factors = read_jobs.result(), read_nodes.result(), read_factors.result()
            user_gpu_s = history.result() if history is not None else self._history
        live = [j for j in jobs if j.pending or j.running]
        self._known_ids = frozenset(j.job_id for j in jobs)
        if self.cfg.nodes is not None:
            nodes = [n for n in nodes if n.name in self.cfg.nodes]
        self.specs.forget(j.job_id for j in live)
        specs = {}
        for j in live:
            if not self.in_scope(j):
                continue
            spec = self.specs.spec(j)
            if spec is not None:
                specs[j.job_id] = spec
        inputs = SnapshotInputs(
            now_s=now_s,
            jobs=live,
            nodes=nodes,
            specs=specs,
            user_gpu_s=user_gpu_s,
            measured_power_w=measured_power(live),
            retype_pending=self.client.retypes_pending_jobs(),
        )
        return inputs, factors

    def _refresh_history(self, now_s: float) -> None:
        """For a policy that does not wait for the per-user history: refresh it (when due) in the background,
        after the cycle's own work, so that sacct's output is parsed between cycles, not during one."""
        if self._waits_for_history:
            return
        last = self._history_refresh
        if last is not None and last.done() and last.exception() is not None:
            log.warning("per-user GPU history refresh failed: %s", last.exception())
        if last is None or last.done():
            self._history_refresh = self._background.submit(self._user_history, now_s)

    def in_scope(self, job: SlurmJob) -> bool:
        return self.cfg.name_prefix is None or job.name.startswith(self.cfg.name_prefix)

    def snapshot(self, inputs: SnapshotInputs) -> ClusterSnapshot:
        return build_snapshot(inputs, self._facts, self._predict, self.cfg.power_budget_w, self._pending)

    def cycle(self) -> CycleReport:
        """One cycle. Slurm unreachable or failing: log, count, change nothing."""
        now = self.clock()
        report = CycleReport(time_s=now)
        t0 = time.perf_counter()
        try:
            inputs, factors = self.read(now)
        except SlurmError as exc:
            self._failures += 1
            report.error = str(exc)
            report.timings_s["slurm"] = time.perf_counter() - t0
            self.metrics.count_error("slurm")
            log.warning("cycle skipped, nothing changed: %s", exc)
            self._log(report)
            return report
        self._failures = 0
        t1 = time.perf_counter()
        snap = self.snapshot(inputs)
        decision = call_policy(self.policy, snap, self.oracle)
        # Slurm's own scheduling (`slurm`, `static-cap`): its decision is logged, Slurm is left alone
        alone = bool(getattr(self.policy, "leaves_slurm_alone", False))
        ranked = rank_view(self.policy, snap, self.oracle) if not alone else Ranked()
        ranking = ranked.order
        t2 = time.perf_counter()
        ctx = PlanContext(
            now_s=now,
            jobs={j.job_id: j for j in inputs.jobs},
            nodes={n.name: n for n in inputs.nodes},
            declared=frozenset(j for j, s in inputs.specs.items() if schedulable(s)),
            site_factors=factors,
            hold_ttl_s=self.cfg.hold_ttl_s,
            gate_all=snap.power_budget_w is not None and not alone,
            recently_requeued=frozenset(
                j for j, t in self._requeued_at.items() if now - t < self.cfg.preempt_cooldown_s
            ),
            ttl_spent=frozenset(self._ttl_spent),
            min_run_s=self.cfg.min_run_s,
        )
        actions = plan(Decision() if alone else decision, snap, ctx, ranking)
        outcome = execute(actions, self.client, self.cfg.env_dir, self.cfg.dry_run)
        if self.cfg.env_dir is not None and not self.cfg.dry_run:
            # files of jobs Slurm no longer knows (in any state): ids are reused after a reset
            prune_env_files(self.cfg.env_dir, self._known_ids | {a.job_id for a in actions})
        t3 = time.perf_counter()
        self._ttl_spent &= {j.job_id for j in inputs.jobs}  # pending or running
        for act in outcome.done:
            if act.kind is Kind.REQUEUE and not self.cfg.dry_run:
                self._requeued_at[act.job_id] = now
            if act.kind is Kind.RELEASE and act.reason == IDLE_TTL_RELEASE and not self.cfg.dry_run:
                log.warning("job %s: %s, released for good", act.job_id, IDLE_TTL_RELEASE)
                self._ttl_spent.add(act.job_id)
        report.snapshot, report.decision, report.actions, report.outcome = snap, decision, actions, outcome
        report.predictions = predict_starts(decision, snap, self.oracle)
        self._explain(report, ctx, ranked)
        report.timings_s = {"slurm": t1 - t0, "policy": t2 - t1, "apply": t3 - t2}
        self._observe(report, inputs)
        self._refresh_history(now)
        self._log(report)
        return report

    def release_holds(self, why: str) -> Outcome:
        """Undo every hold the daemon made (start-up repair and shutdown); a no-op in dry-run."""
        try:
            jobs = self.client.jobs()
        except SlurmError as exc:
            log.warning("%s: cannot list jobs to release holds (they expire by themselves): %s", why, exc)
            return Outcome()
        actions = release_all([j for j in jobs if self.in_scope(j)], self.clock())
        if actions:
            log.info("%s: releasing %d daemon hold(s)", why, len(actions))
        outcome = execute(actions, self.client, None, self.cfg.dry_run)
        self._log(CycleReport(time_s=self.clock(), actions=actions, outcome=outcome, error=None), event=why)
        return outcome

    def run(self, stop: threading.Event, max_cycles: int | None = None) -> int:
        """Release stale holds, cycle every interval (backing off while Slurm fails), release on exit."""
        self.release_holds("start-up")
        cycles = 0
        try:
            while not stop.is_set() and (max_cycles is None or cycles < max_cycles):
                report = self.cycle()
                self._log_line(report)
                cycles += 1
                wait = self.cfg.interval_s
                if report.error is not None:
                    wait = min(self.cfg.interval_s * 2 ** min(self._failures, 10), MAX_BACKOFF_S)
                if max_cycles is not None and cycles >= max_cycles:
                    break
                stop.wait(wait)
        finally:
            self.release_holds("shutdown")
        return cycles

    # -- output ------------------------------------------------------------------------------
    def _explain(self, report: CycleReport, ctx: PlanContext, ranked: Ranked) -> None:
        """The cycle in words (the --once table, --json, the decision log); a budget that leaves less than
        one job's worth above the idle floor is warned about (logged once, again when it changes)."""
        snap, decision = report.snapshot, report.decision
        if snap is None or decision is None:
            return
        report.power = power_view(snap, decision, self.cfg.power_budget_w)
        report.jobs = explain_actions(report.actions, decision, ctx, ranked, report.power, snap)
        with_starts(report.jobs, decision, report.predictions)
        warning = budget_warning(report.power, ranked, snap)
        report.warnings = [warning] if warning else []
        if warning is not None and warning != self._warned:
            log.warning("%s", warning)
        self._warned = warning

    def _log_line(self, report: CycleReport) -> None:
        """Loop mode's one INFO line per cycle."""
        if report.error is not None:
            return  # the failure was logged as a warning
        pending = len(report.snapshot.pending) if report.snapshot is not None else 0
        took = sum(report.timings_s.values())
        cycle_log.info("%s", cycle_line(report.jobs_seen, pending, report.actions, report.power, took))

    def _observe(self, report: CycleReport, inputs: SnapshotInputs) -> None:
        snap = report.snapshot
        if snap is None:
            return
        report.jobs_seen = len(inputs.jobs)
        idle = sum(n.free_gpus * n.idle_power_w for n in snap.nodes)
        measured = sum(inputs.measured_power_w.values()) + idle if inputs.measured_power_w else None
        held = sum(1 for j in inputs.jobs if holds.held_by_us(j, report.time_s))
        self.metrics.observe_cycle(report.timings_s, at_s=report.time_s)
        self.metrics.observe_state(len(snap.pending), snap.power_w, measured, snap.power_budget_w, held)
        done = report.outcome.done if report.outcome else []
        self.metrics.count_actions(self.policy.name, [a.kind.value for a in done])
        for _ in report.outcome.failed if report.outcome else []:
            self.metrics.count_error("apply")

    def _log(self, report: CycleReport, event: str = "cycle") -> None:
        """One JSON line per cycle (always, dry-run included): the decision log."""
        if self.cfg.decision_log is None:
            return
        doc = {"event": event, "policy": self.policy.name, "dry_run": self.cfg.dry_run}
        doc.update(report.to_dict(self.cfg.log_snapshots, with_jobs=self.cfg.log_snapshots))
        self.cfg.decision_log.parent.mkdir(parents=True, exist_ok=True)
        with self.cfg.decision_log.open("a") as fh:
            fh.write(json.dumps(doc, separators=(",", ":")) + "\n")
