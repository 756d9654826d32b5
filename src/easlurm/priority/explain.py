"""Why the daemon did what it did, in words: the cluster's projected power against the budget, each job's
predicted power, energy and time, and the reason of every rank, hold, release and preemption."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from easlurm.priority import holds
from easlurm.priority.apply import IDLE_TTL_RELEASE, TOP_K, Action, Kind, PlanContext, spared
from easlurm.priority.rank_words import JobView, Ranked
from easlurm.priority.report import placement_text
from easlurm.priority.snapshot import ClusterSnapshot, Decision
from easlurm.units import format_duration, format_energy

#: the least headroom above the idle floor a budget must leave when no job waits: one GPU at its TDP
NO_JOB = "one GPU at TDP"


@dataclass(frozen=True)
class PowerView:
    """The cluster's power (W) as the policy saw it: running jobs (measured, else predicted, else TDP) plus
    the idle draw of the free GPUs (the idle floor), what this cycle's starts add, and the budget."""

    running_w: float
    idle_floor_w: float
    free_gpus: int
    starts_w: float = 0.0
    #: the budget the policy worked with: the site's, less what uncontrolled jobs Slurm can start may draw
    budget_w: float | None = None
    site_budget_w: float | None = None
    #: every GPU idle: the least the cluster draws whatever runs
    all_idle_w: float = 0.0

    @property
    def now_w(self) -> float:
        return self.running_w + self.idle_floor_w

    @property
    def projected_w(self) -> float:
        return self.now_w + self.starts_w

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(now_w=self.now_w, projected_w=self.projected_w)
        return out

    def sum_text(self) -> str:
        """`running 1766 W + idle floor 1120 W (28 free GPUs) = 2886 W`."""
        return (
            f"running {self.running_w:.0f} W + idle floor {self.idle_floor_w:.0f} W"
            f" ({self.free_gpus} free GPUs) = {self.now_w:.0f} W"
        )

    def budget_text(self) -> str:
        """The budget, and what of the site's is kept for jobs the daemon does not control."""
        if self.budget_w is None:
            return "no budget"
        text = f"budget {self.budget_w:.0f} W"
        if self.site_budget_w is not None and self.site_budget_w - self.budget_w > 0.5:
            kept = self.site_budget_w - self.budget_w
            text += f" (site {self.site_budget_w:.0f} W less {kept:.0f} W kept for uncontrolled jobs)"
        return text


def power_view(snap: ClusterSnapshot, decision: Decision | None, site_budget_w: float | None) -> PowerView:
    """The cycle's power: `decision`'s starts add their predicted power less the idle draw of their GPUs."""
    idle = {n.name: n.idle_power_w for n in snap.nodes}
    starts_w = 0.0
    for s in decision.starts if decision is not None else ():
        if s.colocate_with is None and s.predicted_power_w is not None:
            starts_w += s.predicted_power_w - sum(g * idle.get(n, 0.0) for n, g in s.allocation())
    return PowerView(
        running_w=sum(r.power_w for r in snap.running),
        idle_floor_w=sum(n.free_gpus * n.idle_power_w for n in snap.nodes),
        free_gpus=sum(n.free_gpus for n in snap.nodes),
        starts_w=starts_w,
        budget_w=snap.power_budget_w,
        site_budget_w=site_budget_w,
        all_idle_w=sum(n.total_gpus * n.idle_power_w for n in snap.nodes),
    )


def budget_warning(view: PowerView, ranked: Ranked, snap: ClusterSnapshot) -> str | None:
    """A budget that leaves less than one job's worth of power above the idle floor (every GPU idle): the
    smallest power a waiting job's placement adds, or one GPU at TDP when none waits. None: it leaves more."""
    if view.budget_w is None:
        return None
    room = view.budget_w - view.all_idle_w
    least = ranked.least_adds_w()
    if least is not None:
        need, what = least, "the smallest waiting job's start"
    elif snap.nodes:
        need, what = min(n.tdp_w - n.idle_power_w for n in snap.nodes), NO_JOB
    else:
        return None
    if room >= need:
        return None
    return (
        f"power budget {view.budget_w:.0f} W leaves {room:.0f} W above the idle floor of"
        f" {view.all_idle_w:.0f} W (every GPU idle), less than one job's worth ({what}: {need:.0f} W):"
        " jobs will mostly wait"
    )


def explain_actions(
    actions: Iterable[Action],
    decision: Decision,
    ctx: PlanContext,
    ranked: Ranked,
    view: PowerView,
    snap: ClusterSnapshot,
    top: int = TOP_K,
) -> dict[str, JobView]:
    """Every job the cycle decided about or acted on, and the first `top` of the ranking, with the reason of
    each action in words (`JobView.why`)."""
    jobs: dict[str, JobView] = {}

    def view_of(job_id: str) -> JobView:
        if job_id not in jobs:
            jobs[job_id] = ranked.view(job_id) or JobView(job_id)
        return jobs[job_id]

    started = {s.job_id for s in decision.starts}
    for job_id in [*started, *decision.hold, *ranked.order[:top]]:
        view_of(job_id)
    for act in actions:
        v = view_of(act.job_id)
        v.why[act.kind.value] = _action_words(act, v, view, ctx, started)
    for job_id in decision.preempt:
        v = view_of(job_id)
        if Kind.REQUEUE.value not in v.why:
            v.why["spared"] = f"not preempted: {spared(job_id, ctx)}"
    victims = _victims_why(decision, snap, view)
    running = {r.job_id: r for r in snap.running}
    for job_id, text in victims.items():
        v = view_of(job_id)
        run = running.get(job_id)
        if run is not None:  # what it draws now: measured, else predicted, else TDP
            v.placement, v.power_w = f"{run.n_gpus}x{run.gpu_type}@{run.node}", run.power_w
        if Kind.REQUEUE.value in v.why:
            v.why[Kind.REQUEUE.value] = text
        elif "spared" in v.why:
            v.why["spared"] = f"{text}; {v.why['spared']}"
    return jobs


def _victims_why(decision: Decision, snap: ClusterSnapshot, view: PowerView) -> dict[str, str]:
    """Why the policy chose each victim: the budget (measured power over it) or an urgent job's deadline."""
    urgent = {p.job_id for p in snap.pending if p.urgent}
    rescuers = [s for s in decision.starts if s.job_id in urgent]
    out = {}
    for job_id in decision.preempt:
        run = next((r for r in snap.running if r.job_id == job_id), None)
        mine = [s.job_id for s in rescuers if run is not None and run.node in (s.node, *s.nodes)]
        if mine:
            out[job_id] = f"preempted for urgent job {', '.join(mine)}, which would miss its deadline"
        elif view.budget_w is not None and view.now_w > view.budget_w:
            out[job_id] = (
                f"preempted for the power budget: {view.sum_text()} > {view.budget_text()};"
                " the most recent starts are shed first"
            )
        else:
            out[job_id] = "preempted by the policy"
    return out


def _action_words(act: Action, v: JobView, view: PowerView, ctx: PlanContext, started: set[str]) -> str:
    """One action's reason in words."""
    if act.kind is Kind.ORDER:
        if act.fields.get("SiteFactor") == "0":
            return "not ranked this cycle: the policy found no placement for it on these nodes"
        head = "starts now" if act.job_id in started else "queued"
        return f"{head}, {v.score}" if v.score else f"{head}, {act.reason}"
    if act.kind is Kind.PLACE:
        return f"the policy's placement {act.reason} (predicted {_pred(v)})" if v.power_w else act.reason
    if act.kind is Kind.ENV:
        return "hints for the job's tasks (batch, GPUs, power limit)"
    if act.kind is Kind.HOLD:
        return _hold_words(act, v, view, ctx)
    if act.kind is Kind.RELEASE:
        return _release_words(act, view, started)
    return act.reason


def _pred(v: JobView) -> str:
    return f"{v.power_w:.0f} W, {format_energy(v.energy_j)}, {format_duration(v.time_s)}"


def _hold_words(act: Action, v: JobView, view: PowerView, ctx: PlanContext) -> str:
    """Why a job is held: the budget with its numbers, its own begin time, or the gate."""
    job = ctx.jobs.get(act.job_id)
    if act.reason == holds.WHY_BEGIN and job is not None:
        mark = holds.mark_of(job)
        begin = mark.begin_s if mark is not None and mark.begin_s else job.eligible_s
        wait = f" (in {format_duration((begin or ctx.now_s) - ctx.now_s)})" if begin else ""
        return (
            f"waits for its own begin time{wait}; held under the power budget so Slurm cannot start it unseen"
        )
    if act.reason == holds.WHY_POLICY and view.budget_w is not None and v.adds_w is not None:
        starts = f" {view.starts_w:+.0f} W of this cycle's starts" if view.starts_w else ""
        return (
            f"power budget: {view.now_w:.0f} W now (running {view.running_w:.0f} W + idle floor"
            f" {view.idle_floor_w:.0f} W of {view.free_gpus} free GPUs){starts} + this job {v.adds_w:.0f} W"
            f" ({v.placement}) = {view.projected_w + v.adds_w:.0f} W > {view.budget_text()}"
        )
    if act.reason == holds.WHY_POLICY:
        return "held by the policy (an urgent job that would miss its deadline on the free GPUs waits)"
    return (
        "not started this cycle (no free GPUs for its placement, or ranked after the jobs that took them);"
        " under a power budget every such job is held so Slurm cannot start it between cycles"
    )


def _release_words(act: Action, view: PowerView, started: set[str]) -> str:
    if act.reason == IDLE_TTL_RELEASE or act.reason == "daemon start/stop":
        return act.reason
    if act.job_id in started:
        return f"released to start now: projected {view.projected_w:.0f} W within the {view.budget_text()}"
    if view.budget_w is None:
        return "released: no power budget is set"
    return "released: the reason it was held is gone"


def with_starts(jobs: dict[str, JobView], decision: Decision, predictions: Mapping[str, Any]) -> None:
    """The started jobs' views on the placement they start on (not the best one as if GPUs were free)."""
    for s in decision.starts:
        v = jobs.setdefault(s.job_id, JobView(s.job_id))
        v.placement = placement_text(s)
        v.power_w = s.predicted_power_w
        pred = predictions.get(s.job_id)
        if pred is not None:
            v.energy_j, v.time_s = pred.energy_j, pred.time_s


def cycle_line(
    seen: int, pending: int, actions: Sequence[Action], view: PowerView | None, took_s: float
) -> str:
    """The one line loop mode logs per cycle: jobs seen, actions by kind, power against the budget, time."""
    kinds: dict[str, int] = {}
    for act in actions:
        kinds[act.kind.value] = kinds.get(act.kind.value, 0) + 1
    done = ", ".join(f"{n} {k}" for k, n in kinds.items()) or "none"
    line = f"cycle: {seen} jobs seen, {pending} the policy may start; actions: {done}"
    if view is not None:
        line += f"; power: {view.sum_text()}"
        if view.starts_w:
            line += f", {view.projected_w:.0f} W with this cycle's starts ({view.starts_w:+.0f} W)"
        line += f"; {view.budget_text()}"
    return line + f"; took {took_s:.2f} s"
