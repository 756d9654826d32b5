"""A policy's Decision -> the few Slurm actions that realise it (planned purely, then executed or logged)."""

from __future__ import annotations

import enum
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from easlurm.errors import SlurmError
from easlurm.priority import holds
from easlurm.priority.sharing import share_placement
from easlurm.priority.snapshot import ClusterSnapshot, Decision, StartJob
from easlurm.slurm.hostlist import expand_hostlist
from easlurm.slurm.job_updates import Hold, Order, Placement, Release
from easlurm.slurm.sched_client import SchedClient, SlurmJob, SlurmNode

log = logging.getLogger(__name__)

#: SiteFactor of the policy's first job; each next one gets one SITE_STEP less. The step exceeds the
#: sum of the multifactor weights so that age and fair share cannot reorder the policy's choices.
SITE_BASE = 10_000_000
SITE_STEP = 100_000
#: Jobs ordered per cycle (SITE_BASE - TOP_K * SITE_STEP stays > 0).
TOP_K = 64
#: No job is preempted before it has run this long (s) since its (re)start (`sched.min_run_s`): a job
#: requeued seconds after it started has spent its start-up (loading, warm-up) for nothing.
DEFAULT_MIN_RUN_S = 300.0
#: Hold updates (new or refreshed) per cycle: a bound on scontrol commands when a budget gates a long queue.
MAX_HOLDS = 256


class Kind(enum.Enum):
    """Closed set of what the daemon ever does to a job, in the order it does it."""

    REQUEUE = "requeue"
    PLACE = "place"
    ENV = "env"
    RELEASE = "release"
    ORDER = "order"
    HOLD = "hold"


@dataclass(frozen=True)
class Action:
    """One change to one job: `fields` is a job change of easlurm.slurm.job_updates (read as the scontrol
    fields it composes: what the decision log shows) or, for ENV, the EASLURM_* variables."""

    kind: Kind
    job_id: str
    fields: Mapping[str, str] = field(default_factory=dict)
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "job_id": self.job_id,
            "fields": dict(self.fields),
            "reason": self.reason,
        }


@dataclass(frozen=True)
class PlanContext:
    """Slurm state the plan is diffed against (so that a repeated plan issues no command)."""

    now_s: float
    jobs: Mapping[str, SlurmJob]
    nodes: Mapping[str, SlurmNode]
    declared: frozenset[str]
    site_factors: Mapping[str, tuple[int, int]]
    hold_ttl_s: float
    gate_all: bool = False  # under a power budget: every declared job not started now is held
    recently_requeued: frozenset[str] = frozenset()
    #: jobs released after a full TTL on an idle cluster: never held again, nor shed once they run
    ttl_spent: frozenset[str] = frozenset()
    #: no job is preempted before it has run this long since its (re)start (`sched.min_run_s`)
    min_run_s: float = 0.0


#: Release reason of a job held a full TTL while nothing ran on the daemon's nodes: nothing will free
#: power or GPUs for it, so holding it longer would hold it for ever.
IDLE_TTL_RELEASE = "held a full TTL on an idle cluster"


def partition_for(job: SlurmJob, node: SlurmNode | None) -> str | None:
    """Keep the job's partition when it contains the node, else the node's first partition."""
    if node is None or not node.partitions:
        return None
    parts = [p for p in job.partition.split(",") if p]
    if any(p in node.partitions for p in parts):
        return None
    return node.partitions[0]


def placement_fields(
    job: SlurmJob, start: StartJob, node: SlurmNode | None, nodes: Mapping[str, SlurmNode] | None = None
) -> Placement:
    """The placement that turns the job's request into the chosen one (empty when it already is).

    A typed request is rewritten in the job's own GRES prefix (`gres:gpu:h100:2`). An untyped one
    (`--gres=gpu:2`) keeps no type, since Slurm refuses a typed rewrite of it ("Invalid GRES specification
    (with and without type identification)"); its type is pinned by requiring the chosen node instead
    (`NodeList=`), unless the job's own node list already holds only nodes of that type. A start spread
    over several nodes asks for them all (`NumNodes=N`, `NodeList=`) and its GPUs per node (an even split:
    `feasible_starts` drops others)."""
    typed = job.gpu_type is not None
    m = start.n_nodes
    per_node = start.n_gpus // m
    regres = (
        job.gpus_per_node != per_node or job.node_count != m or (typed and job.gpu_type != start.gpu_type)
    )
    required: tuple[str, ...] = ()
    if m > 1:
        required = tuple(start.nodes)  # the nodes the policy spread it over, no others
    elif not typed and not _pinned_to_type(job, start.gpu_type, nodes or {}):
        required = (start.node,)
    return Placement(
        num_nodes=m if regres else None,
        gres_name="gpu" if regres else None,
        gres_count=per_node,
        gres_type=start.gpu_type if typed else None,
        like_request=job.gres_request,
        nodes=required,
        partition=partition_for(job, node),
    )


def _pinned_to_type(job: SlurmJob, gpu_type: str, nodes: Mapping[str, SlurmNode]) -> bool:
    """The job's own required nodes are all known nodes with GPUs of `gpu_type`."""
    if not job.required_nodes:
        return False
    try:
        names = expand_hostlist(job.required_nodes)
    except ValueError:
        return False
    return bool(names) and all(n in nodes and nodes[n].gpu_type == gpu_type for n in names)


def feasible_starts(
    decision: Decision, snapshot: ClusterSnapshot, ctx: PlanContext
) -> tuple[list[StartJob], dict[str, Placement]]:
    """The decision's starts that Slurm can realise, and the placement fields of each pending one.

    A shareable job (SPEC `share`, on gres/shard) is placed on shards of one GPU of its node: alone, or
    on the GPU of `colocate_with`; a start Slurm would put elsewhere is dropped this cycle (logged)."""
    shareable = {p.job_id for p in snapshot.pending if p.shareable}
    starts: list[StartJob] = []
    places: dict[str, Placement] = {}
    for start in decision.starts:
        job = ctx.jobs.get(start.job_id)
        node = ctx.nodes.get(start.node)
        if start.job_id in shareable or start.colocate_with is not None:
            if start.job_id not in shareable:
                log.info("job %s: not shareable, cannot join %s", start.job_id, start.colocate_with)
                continue
            if job is not None and job.pending:
                place = share_placement(job, start, node, ctx.jobs)
                if place is None:
                    continue
                places[start.job_id] = place
        elif start.n_nodes > 1 and len(set(start.node_gpus)) > 1:
            log.info("job %s: %s GPUs per node cannot be asked of Slurm", start.job_id, start.node_gpus)
            continue
        elif job is not None and job.pending:
            places[start.job_id] = placement_fields(job, start, node, ctx.nodes)
        starts.append(start)
    return starts, places


def plan(
    decision: Decision,
    snapshot: ClusterSnapshot,
    ctx: PlanContext,
    ranking: Sequence[str] = (),
    top_k: int = TOP_K,
    max_holds: int = MAX_HOLDS,
) -> list[Action]:
    """Actions in application order: requeue victims, place, publish env, release holds, order, hold.

    A job's env file is written only once Slurm accepted its placement (`execute` skips it when the
    placement update failed: hints must describe what the job runs on), and before anything else that
    lets a job start (release, order): the SPANK plugin reads the file at task start.

    Order: the decision's starts first (in its order), then the policy's `ranking` of the other
    declared jobs, down to `top_k` jobs (a bound on scontrol updates per cycle); others get 0.
    Holds: at most `max_holds` updates per cycle, the policy's holds and best-ranked jobs first."""
    actions = _requeues(decision.preempt, ctx)
    feasible, places = feasible_starts(decision, snapshot, ctx)
    decision = Decision(starts=tuple(feasible), preempt=decision.preempt, hold=decision.hold)
    actions += _placements(decision.starts, places)
    actions += [_env(start) for start in decision.starts]
    started = {s.job_id for s in decision.starts}
    to_hold, spent = _to_hold(decision, snapshot, ctx, started)
    actions += _releases(ctx, to_hold, spent)
    queue = [s.job_id for s in decision.starts]
    queue += [j for j in ranking if j not in started and j not in to_hold][: max(top_k - len(queue), 0)]
    actions += _orders(queue, started, ctx)
    actions += _holds(to_hold, decision.hold, ranking, ctx, max_holds)
    return actions


def spared(job_id: str, ctx: PlanContext) -> str | None:
    """Why the daemon does not preempt this victim of the policy now (None: it may), in words."""
    job = ctx.jobs.get(job_id)
    if job is None or not job.running or job_id not in ctx.declared or not job.requeue:
        return "not a running, declared, requeueable job"
    if job_id in ctx.recently_requeued:
        return "requeued by the daemon within the preemption cooldown"
    if job_id in ctx.ttl_spent:
        return f"it was {IDLE_TTL_RELEASE}"
    ran_s = ctx.now_s - job.start_s if job.start_s is not None else None
    if ran_s is not None and ran_s < ctx.min_run_s:
        return f"ran {ran_s:.0f} s, under the minimum run time of {ctx.min_run_s:g} s (sched.min_run_s)"
    return None


def _requeues(preempt: Sequence[str], ctx: PlanContext) -> list[Action]:
    """Requeue the decision's victims that Slurm may requeue and the daemon may preempt now (logged when not)."""
    actions = []
    for job_id in preempt:
        why_not = spared(job_id, ctx)
        if why_not is not None:
            log.info("not preempting job %s: %s", job_id, why_not)
            continue
        actions.append(Action(Kind.REQUEUE, job_id, reason="preempted"))
    return actions


def _placements(starts: Sequence[StartJob], places: Mapping[str, Placement]) -> list[Action]:
    """The placement updates of the starts whose request differs from the chosen one, with why."""
    actions = []
    for start in starts:
        place = places.get(start.job_id)
        if place:
            why = f"{start.n_gpus}x{start.gpu_type}"
            if start.n_nodes > 1:
                why += f" on {start.n_nodes} nodes"
            if start.colocate_with is not None:
                why += f" beside {start.colocate_with}"
            actions.append(Action(Kind.PLACE, start.job_id, place, why))
    return actions


def _env(start: StartJob) -> Action:
    """The EASLURM_* hints the SPANK plugin hands a started job's tasks."""
    env = {"EASLURM_BATCH_SIZE": str(start.batch), "EASLURM_GPUS": str(start.n_gpus)}
    env["EASLURM_GPU_TYPE"] = start.gpu_type
    if start.power_limit_w is not None:
        env["EASLURM_POWER_LIMIT_W"] = f"{start.power_limit_w:g}"
    return Action(Kind.ENV, start.job_id, env, "placement")


def _to_hold(
    decision: Decision, snapshot: ClusterSnapshot, ctx: PlanContext, started: set[str]
) -> tuple[set[str], set[str]]:
    """(jobs to hold, jobs released instead because they were held a full TTL on an idle cluster)."""
    to_hold = set(decision.hold)
    if ctx.gate_all:
        to_hold |= {p.job_id for p in snapshot.pending if p.job_id not in started}
        # jobs waiting for their own begin time are gated before Slurm can start them (a site's
        # job_submit.lua can give declared jobs a begin time a few seconds ahead for exactly this)
        to_hold |= {
            j
            for j in ctx.declared
            if j in ctx.jobs and holds.waits_for_own_begin(ctx.jobs[j], ctx.now_s, ctx.hold_ttl_s)
        }
    to_hold -= started
    to_hold -= ctx.ttl_spent
    idle = not snapshot.running
    spent = {
        j
        for j in to_hold
        if idle and j in ctx.jobs and holds.held_a_full_ttl(ctx.jobs[j], ctx.now_s, ctx.hold_ttl_s)
    }
    return to_hold - spent, spent


def _releases(ctx: PlanContext, to_hold: set[str], spent: set[str]) -> list[Action]:
    """Release the daemon's holds on its declared pending jobs that are no longer to be held."""
    actions = []
    for job in ctx.jobs.values():
        if not job.pending or holds.mark_of(job) is None or job.job_id not in ctx.declared:
            continue  # out of this daemon's scope: its TTL, or the daemon that owns it, releases it
        if job.job_id not in to_hold:
            why = IDLE_TTL_RELEASE if job.job_id in spent else "headroom"
            actions.append(Action(Kind.RELEASE, job.job_id, holds.release_fields(job, ctx.now_s), why))
    return actions


def _orders(queue: list[str], started: set[str], ctx: PlanContext) -> list[Action]:
    """SiteFactors that put the queue's pending jobs in its order, and 0 for the declared jobs out of it
    that still carry one. Factors Slurm already has are kept wherever they still order the queue with a
    step's gap (`order_factors`), so a cycle whose ranking only lost its started jobs updates the new
    jobs at its end, not every rank behind them."""
    positions = [i for i, job_id in enumerate(queue) if (j := ctx.jobs.get(job_id)) is not None and j.pending]
    current = [ctx.site_factors.get(queue[i], (0, -1))[1] for i in positions]
    actions = []
    for i, have, factor in zip(
        positions, current, order_factors(positions, current, len(queue)), strict=True
    ):
        if have != factor:
            why = "start now" if queue[i] in started else "queue order"
            actions.append(Action(Kind.ORDER, queue[i], Order(factor), f"{why}, rank {i + 1}"))
    for job_id in sorted(ctx.declared - set(queue)):
        job = ctx.jobs.get(job_id)
        current_factor = ctx.site_factors.get(job_id)
        if job is not None and job.pending and current_factor is not None and current_factor[1] != 0:
            actions.append(Action(Kind.ORDER, job_id, Order(0), "not ranked"))
    return actions


def order_factors(positions: Sequence[int], current: Sequence[int], n: int) -> list[int]:
    """A SiteFactor per ranked job (its rank in `positions`, of `n`), strictly decreasing by at least
    SITE_STEP, within [SITE_STEP, SITE_BASE], keeping as many `current` factors as can stay.

    A kept pair (rank p, factor a) above (q, b) leaves room for the ranks between when a - b >= (q - p)
    steps, that is when a + p * SITE_STEP >= b + q * SITE_STEP: the kept factors are the longest run of
    non-increasing keys `factor + rank * SITE_STEP` in the bounds that leave room above and below. The
    others are filled a step under the factor above them (SITE_BASE at the top), so with nothing kept
    the factors are SITE_BASE - rank * SITE_STEP."""
    low, high = SITE_STEP + (n - 1) * SITE_STEP, SITE_BASE
    keys = [
        f + p * SITE_STEP if f > 0 and low <= f + p * SITE_STEP <= high else None
        for p, f in zip(positions, current)
    ]
    kept = _longest_non_increasing(keys)
    out: list[int] = []
    above, above_rank = SITE_BASE + SITE_STEP, -1
    for k, (p, f) in enumerate(zip(positions, current)):
        if k in kept:
            out.append(f)
        else:
            out.append(above - (p - above_rank) * SITE_STEP)
        above, above_rank = out[-1], p
    return out


def _longest_non_increasing(keys: Sequence[int | None]) -> set[int]:
    """Indices of a longest non-increasing subsequence of the keys that are not None (64 at most: the
    quadratic pass costs nothing)."""
    best: list[int] = [0] * len(keys)
    prev: list[int] = [-1] * len(keys)
    for i, key in enumerate(keys):
        if key is None:
            continue
        best[i] = 1
        for j in range(i):
            kj = keys[j]
            if kj is not None and kj >= key and best[j] + 1 > best[i]:
                best[i], prev[i] = best[j] + 1, j
    if not keys or max(best) == 0:
        return set()
    i, chain = max(range(len(keys)), key=best.__getitem__), set()
    while i >= 0:
        chain.add(i)
        i = prev[i]
    return chain


def _holds(
    to_hold: set[str], by_policy: Sequence[str], ranking: Sequence[str], ctx: PlanContext, max_holds: int
) -> list[Action]:
    """New or refreshed holds, at most `max_holds`, saying why: the policy's own holds first, then the
    queue in its order, so that with a bounded number of updates the jobs Slurm would start first are
    held first."""
    rank = {j: i for i, j in enumerate([*by_policy, *ranking])}
    policy = set(by_policy)
    actions: list[Action] = []
    for job_id in sorted(to_hold, key=lambda j: (rank.get(j, len(rank)), j)):
        job = ctx.jobs.get(job_id)
        if job is None or not holds.can_hold(job, ctx.now_s, ctx.hold_ttl_s):
            continue
        if holds.mark_of(job) is None or holds.needs_refresh(job, ctx.now_s, ctx.hold_ttl_s):
            if len(actions) >= max_holds:
                log.info("hold updates capped at %d this cycle; the rest follow next cycles", max_holds)
                break
            if job_id in policy:
                why = holds.WHY_POLICY
            elif holds.waits_for_own_begin(job, ctx.now_s, ctx.hold_ttl_s):
                why = holds.WHY_BEGIN
            else:
                why = holds.WHY_GATE
            actions.append(
                Action(Kind.HOLD, job_id, holds.hold_fields(job, ctx.now_s, ctx.hold_ttl_s, why), why)
            )
    return actions


def release_all(jobs: Iterable[SlurmJob], now_s: float) -> list[Action]:
    """Undo every daemon hold (start-up, shutdown, repair after a crash); other holds are not touched."""
    return [
        Action(Kind.RELEASE, j.job_id, holds.release_fields(j, now_s), "daemon start/stop")
        for j in jobs
        if j.pending and holds.mark_of(j) is not None
    ]


def write_env_file(directory: Path, job_id: str, env: Mapping[str, str]) -> Path:
    """`job-<id>.env` (KEY=VALUE lines) atomically: the SPANK plugin reads it at task start, and only
    from a root-owned directory and file that group and others cannot write (mode 0755 / 0644). Only the
    directory itself is created, never its parents (the spool is the plugin's, made at its install)."""
    directory.mkdir(mode=0o755, exist_ok=True)
    path = directory / f"job-{int(job_id)}.env"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


_ENV_FILE = re.compile(r"job-([0-9]{1,10})\.env")


def prune_env_files(directory: Path, known_job_ids: Iterable[str]) -> list[str]:
    """Remove the env files of jobs Slurm no longer knows (in any state). Job ids are reused (a
    controller reset, wrap-around): a stale file would hand an old decision to a new job. Returns the
    job ids whose files were removed; errors are logged, never raised."""
    known = set(known_job_ids)
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return removed
    except OSError as exc:
        log.warning("cannot list %s: %s", directory, exc)
        return removed
    for name in names:
        m = _ENV_FILE.fullmatch(name)
        if m is None or m.group(1) in known:
            continue
        try:
            os.unlink(directory / name)
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("cannot remove stale %s: %s", directory / name, exc)
            continue
        removed.append(m.group(1))
    return sorted(removed, key=int)


@dataclass
class Outcome:
    """What applying a plan did: actions done and failed (with the error); nothing is retried blindly."""

    done: list[Action] = field(default_factory=list)
    failed: list[tuple[Action, str]] = field(default_factory=list)


def execute(actions: Iterable[Action], client: SchedClient, env_dir: Path | None, dry_run: bool) -> Outcome:
    """Apply actions one by one; a failing command is logged and skipped (each action is independent and
    the next cycle re-plans from Slurm's state), except that a job whose placement Slurm refused gets
    no env file: its hints would describe a placement it does not have. In dry-run, only log."""
    out = Outcome()
    refused: dict[str, str] = {}
    orders: list[Action] = []  # consecutive site factors: independent, applied together
    for act in actions:
        if act.kind is Kind.ORDER and not dry_run:
            orders.append(act)
            continue
        _apply_orders(orders, client, out)
        orders = []
        if act.kind is Kind.ENV and act.job_id in refused:
            why = f"not published: Slurm refused the placement ({refused[act.job_id]})"
            log.warning("hints of job %s %s", act.job_id, why)
            out.failed.append((act, why))
            continue
        if dry_run:
            log.info("dry-run: %s job %s %s (%s)", act.kind.value, act.job_id, dict(act.fields), act.reason)
            out.done.append(act)
            continue
        try:
            if act.kind is Kind.REQUEUE:
                client.requeue(act.job_id)
            elif act.kind is Kind.ENV:
                if env_dir is not None:
                    write_env_file(env_dir, act.job_id, act.fields)
            else:
                _apply_change(client, act.job_id, act.fields)
        except (SlurmError, OSError) as exc:
            log.warning("%s of job %s failed: %s", act.kind.value, act.job_id, exc)
            out.failed.append((act, str(exc)))
            if act.kind is Kind.PLACE:
                refused[act.job_id] = str(exc)
            continue
        out.done.append(act)
    _apply_orders(orders, client, out)
    return out


def _apply_orders(orders: Sequence[Action], client: SchedClient, out: Outcome) -> None:
    """Site factor updates, `client.update_workers` at a time, recorded in their order."""

    def one(act: Action) -> str | None:
        try:
            _apply_change(client, act.job_id, act.fields)
        except (SlurmError, OSError) as exc:
            return str(exc)
        return None

    workers = max(1, min(int(client.update_workers), len(orders)))
    if workers == 1:
        errors = [one(act) for act in orders]
    else:
        with ThreadPoolExecutor(workers, thread_name_prefix="easlurm-order") as pool:
            errors = list(pool.map(one, orders))
    for act, error in zip(orders, errors, strict=True):
        if error is None:
            out.done.append(act)
        else:
            log.warning("%s of job %s failed: %s", act.kind.value, act.job_id, error)
            out.failed.append((act, error))


def _apply_change(client: SchedClient, job_id: str, change: Mapping[str, str]) -> None:
    """The client's verb for one job change."""
    if isinstance(change, Placement):
        client.place(job_id, change)
    elif isinstance(change, Order):
        client.order(job_id, change.site_factor)
    elif isinstance(change, Hold):
        client.hold(job_id, change.until_s, change.mark)
    elif isinstance(change, Release):
        client.release(job_id, change.begin_s)
    else:
        raise SlurmError(f"job {job_id}: {type(change).__name__} is not a job change")
