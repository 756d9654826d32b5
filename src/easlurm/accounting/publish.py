"""Publication of a step's records: node 0 gathers the nodes' records and sets the job's AdminComment.

Every publication carries every step of the job (AdminComment holds one document per job), rebuilt from
the spool's step files under the job lock; without a spool, from what slurmctld already holds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from easlurm.accounting.spool import read_json, read_step_files, write_record
from easlurm.accounting.step_record import NodeRecord, StepRecord, decode_admin_comment, encode_admin_comment
from easlurm.errors import EaslurmError, SlurmError

log = logging.getLogger(__name__)

#: How often node 0 looks for the other nodes' records while it waits (s).
POLL_S = 0.02


class StepPlace(Protocol):
    """The step being published and its place in the spool (the agent's StepContext, whose paths come
    from easlurm.accounting.spool.Spool)."""

    @property
    def job_id(self) -> int: ...
    @property
    def step(self) -> str: ...
    @property
    def nnodes(self) -> int: ...
    @property
    def spec(self) -> str: ...
    @property
    def restart(self) -> int: ...
    @property
    def gid(self) -> int: ...
    @property
    def job_dir(self) -> Path: ...
    @property
    def step_file(self) -> Path: ...
    @property
    def manifest_file(self) -> Path: ...
    def node_file(self, node_id: int) -> Path: ...


def gather_step(
    ctx: StepPlace,
    own: NodeRecord,
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
    known: dict[int, NodeRecord] | None = None,
) -> StepRecord:
    """Node 0: collect every node's record until `deadline` (monotonic s; a past deadline scans once);
    missing ones make it partial. `known` are records already collected (kept, not read again)."""
    nodes: dict[int, NodeRecord] = {**(known or {}), own.node_id: own}
    waiting = set(range(ctx.nnodes)) - set(nodes)
    while True:
        for node_id in sorted(waiting):
            doc = read_json(ctx.node_file(node_id))
            if doc is None:
                continue
            try:
                rec = NodeRecord.from_dict(doc)
            except EaslurmError as exc:
                log.warning("node %d record: %s", node_id, exc)
                continue
            nodes[node_id] = rec
            waiting.discard(node_id)
        if not waiting or clock() >= deadline:
            break
        time.sleep(POLL_S)
    return StepRecord(
        job_id=ctx.job_id,
        step=ctx.step,
        nnodes=ctx.nnodes,
        nodes=[nodes[k] for k in sorted(nodes)],
        spec=ctx.spec,
        missing_nodes=sorted(waiting),
        run=ctx.restart,
    )


def warn_partial(ctx: StepPlace, step: StepRecord) -> None:
    """Log the nodes a step record still lacks (none: nothing logged)."""
    if step.missing_nodes:
        log.warning(
            "step %d.%s: no record from node(s) %s yet; step record is partial until they arrive",
            ctx.job_id,
            ctx.step,
            ",".join(map(str, step.missing_nodes)),
        )


def published_steps(ctx: StepPlace, record: StepRecord, client: Any) -> list[StepRecord]:
    """Without a spool: the steps slurmctld already holds for the job, with `record` replacing its own
    (read-modify-write; only safe because steps of one job rarely end at the same instant)."""
    try:
        current = decode_admin_comment(client.show_job(ctx.job_id).get("AdminComment", ""))
    except EaslurmError as exc:
        log.warning(
            "job %d: cannot read the published records (%s); publishing this step alone", ctx.job_id, exc
        )
        current = []
    return [record, *(s for s in current if s.key != record.key)]


def set_admin_comment(job_id: int, text: str, client: Any) -> bool:
    """slurmctld's copy while the job runs; the database's once slurmctld says it has finished."""
    try:
        client.set_admin_comment(job_id, text)
        return True
    except SlurmError as exc:
        if "finished" not in str(exc).lower():
            log.error("job %d: cannot publish AdminComment: %s", job_id, exc)
            return False
        log.warning("job %d already finished; writing AdminComment to the database instead", job_id)
    try:
        client.set_admin_comment_db(job_id, text)
        return True
    except SlurmError as exc:
        log.error("job %d: cannot publish AdminComment: %s", job_id, exc)
        return False


def publish_from_spool(ctx: StepPlace, client: Any, own: StepRecord | None = None) -> bool:
    """Call with the job lock held. Rebuild the job's AdminComment from every step file and set it,
    unless the last publication already carried this step's file as it is now (a burst of steps ending
    together then costs one publication, not one each). `own` stands in for this step's file when that
    could not be written. Records which file contents the publication carried."""
    files = read_step_files(ctx.job_dir)
    if own is not None:
        files.pop(ctx.step_file.name, None)  # stale or absent: `own` stands in for it
    else:
        mine = files.get(ctx.step_file.name)
        manifest = read_json(ctx.manifest_file) or {}
        if mine is not None and manifest.get(ctx.step_file.name) == mine[0]:
            return True
    steps = [rec for _, rec in files.values()]
    if own is not None:
        steps.append(own)
    if not set_admin_comment(ctx.job_id, encode_admin_comment(steps), client):
        return False
    carried = {name: digest for name, (digest, _) in files.items()}
    try:
        write_record(ctx.manifest_file, carried, ctx.gid)
    except OSError as exc:  # only costs a redundant publication later
        log.warning("%s: %s", ctx.manifest_file, exc)
    return True
