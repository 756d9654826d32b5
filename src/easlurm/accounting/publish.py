"""Publication of a step's records: node 0 gathers the nodes' records and sets the job's AdminComment.

Every publication carries every step of the job (AdminComment holds one document per job: the newest
steps in detail, each run's total over all), rebuilt from the spool's step files under the job lock;
without a spool, from what slurmctld already holds. What else the field holds (a site's own value) is
read first and kept byte for byte beside easlurm's part (admin_codec.AdminValue); a value its reader
base64-decodes to the end of the field (jobstats' summary) is left alone, nothing written.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from easlurm.accounting.admin_codec import AdminValue, compact_step, full_step
from easlurm.accounting.spool import Spool, read_json, write_record
from easlurm.accounting.step_record import (
    ADMIN_COMMENT_MAX_CHARS,
    ADMIN_COMMENT_MAX_STEPS,
    SCHEMA_VERSION,
    NodeRecord,
    StepRecord,
    decode_admin_comment,
    encode_admin_comment,
    run_totals,
)
from easlurm.errors import EaslurmError, SlurmError

log = logging.getLogger(__name__)

#: How often node 0 looks for the other nodes' records while it waits (s).
POLL_S = 0.02
#: A publication reads the files of the newest steps only (device detail, where the size cap allows); the
#: others of the newest ADMIN_COMMENT_MAX_STEPS are carried at node detail from the manifest.
DEVICE_DETAIL_STEPS = 16


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


def admin_value(job_id: int, client: Any) -> AdminValue | None:
    """What the job's AdminComment holds now (slurmctld's copy), split around easlurm's part; None
    (logged) when it cannot be read: then nothing is written, so nothing a site keeps there is lost."""
    try:
        return AdminValue.split(client.show_job(job_id).get("AdminComment", ""))
    except EaslurmError as exc:
        log.error(
            "job %d: cannot read AdminComment (%s); not publishing over what it may hold: the spool keeps "
            "the records (easlurm sacct reads them, easlurm accounting republish writes them later)",
            job_id,
            exc,
        )
        return None


def set_admin_comment(job_id: int, text: str, client: Any, current: AdminValue | None = None) -> bool:
    """`text` (a document) as easlurm's part of the job's AdminComment, beside what else it holds
    (`current`, read when not given): slurmctld's copy while the job runs; the database's once slurmctld
    says it has finished, unless sacctmgr would rewrite the site's part (it lowercases values)."""
    current = current if current is not None else admin_value(job_id, client)
    if current is None:
        return False
    if not current.takes_a_part_after():
        log.error(
            "job %d: not published: AdminComment holds %s: a base64 value its reader decodes to the end of the "
            "field (jobstats); easlurm's record stays in the spool (easlurm sacct reads it from there; "
            "spank.store: spool avoids AdminComment altogether)",
            job_id,
            current.base64_tag(),
        )
        return False
    value = current.merged(text)
    if len(value) > ADMIN_COMMENT_MAX_CHARS:
        log.error(
            "job %d: not published: AdminComment would take %d chars beside the %d it holds (at most %d); "
            "the spool keeps the records",
            job_id,
            len(value),
            len(current.foreign),
            ADMIN_COMMENT_MAX_CHARS,
        )
        return False
    try:
        client.set_admin_comment(job_id, value)
        return True
    except SlurmError as exc:
        if "finished" not in str(exc).lower():
            log.error("job %d: cannot publish AdminComment: %s", job_id, exc)
            return False
        log.warning("job %d already finished; writing AdminComment to the database instead", job_id)
    if not current.survives_sacctmgr():
        log.error(
            "job %d: finished; not written to the database: sacctmgr would lowercase what the site keeps in "
            "AdminComment; the spool keeps the records",
            job_id,
        )
        return False
    try:
        client.set_admin_comment_db(job_id, value)
        return True
    except SlurmError as exc:
        log.error("job %d: cannot publish AdminComment: %s", job_id, exc)
        return False


def publish_from_spool(ctx: StepPlace, client: Any, own: StepRecord | None = None) -> bool:
    """Call with the job lock held. Rebuild the job's AdminComment from the spool's step files and set it,
    unless the last publication already carried this step's file as it is now (a burst of steps ending
    together then costs one publication, not one each). `own` stands in for this step's file when that
    could not be written. A publication's work does not grow with the job's steps (PublishManifest):
    it reads the files that changed and the newest DEVICE_DETAIL_STEPS (carried with device detail),
    carries the rest of the newest ADMIN_COMMENT_MAX_STEPS at node detail from the manifest, and sums a
    step leaving those into its run's total once."""
    current = step_file_stats(ctx.job_dir)
    manifest = PublishManifest.load(ctx.manifest_file)
    mine = ctx.step_file.name
    if own is not None:
        current.pop(mine, None)  # stale or absent: `own` stands in for it
    elif mine in current and manifest.stats.get(mine) == current[mine]:
        return True
    fresh = manifest.refresh(ctx.job_dir, current)
    names = sorted(manifest.stats, key=_name_order)
    if own is not None:
        names = [n for n in names if _name_key(n) != own.key]
    newest = names[max(0, len(names) - ADMIN_COMMENT_MAX_STEPS + (own is not None)) :]
    manifest.fold(set(newest))
    held = [n for n in newest if n in manifest.recent]
    cut = max(0, len(held) - DEVICE_DETAIL_STEPS)
    full = [fresh.get(n) or _read_step(ctx.job_dir / n) or manifest.recent[n] for n in held[cut:]]
    full[:0] = [manifest.recent[n] for n in held[:cut]]  # node detail, from the manifest
    held_now = admin_value(ctx.job_id, client)  # what a site keeps there takes its room first
    if held_now is None:
        return False
    text = encode_admin_comment(
        [*full, *([own] if own is not None else [])],
        max_chars=max(0, ADMIN_COMMENT_MAX_CHARS - held_now.overhead()),
        folded=manifest.folded,
        folded_keys=[_name_key(n) for n in manifest.folded_names],
    )
    if not set_admin_comment(ctx.job_id, text, client, held_now):
        return False
    try:
        manifest.save(ctx.manifest_file, ctx.gid)
    except OSError as exc:  # only costs a redundant publication (and rereading the files) later
        log.warning("%s: %s", ctx.manifest_file, exc)
    return True


def _name_key(name: str) -> str:
    """The step key of a step file's name (`step-<key>.json`)."""
    return name[len("step-") : -len(".json")]


def _name_order(name: str) -> tuple[int, bool, int]:
    """A step file's place among the job's steps: by run, the batch step last, then by step number."""
    step, _, run = _name_key(name).partition("+r")
    return (int(run) if run.isdigit() else 0, step == "batch", int(step) if step.isdigit() else -1)


def _read_step(path: Path) -> StepRecord | None:
    doc = read_json(path)
    try:
        return None if doc is None else StepRecord.from_dict(doc)
    except EaslurmError as exc:
        log.warning("%s: unreadable step record (%s)", path, exc)
        return None


def step_file_stats(job_dir: Path) -> dict[str, str]:
    """{name: `inode:size:mtime_ns`} of the step files in a job directory (a rewrite is a rename: a new
    inode), read from the directory alone."""
    out: dict[str, str] = {}
    try:
        with os.scandir(job_dir) as entries:
            for e in entries:
                if Spool.is_step_file(e.name):
                    with contextlib.suppress(FileNotFoundError):
                        st = e.stat(follow_symlinks=False)
                        out[e.name] = f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"
    except OSError as exc:
        log.warning("%s: %s", job_dir, exc)
    return out


@dataclass
class PublishManifest:
    """What the job's last publication carried (SPOOL/<job>/.published.json, version 2): the stat of every
    step file it carried; the node-detail summaries (StepRecord.reduced("node")) of the steps it held
    apart; and each run's total (run_totals) of the older steps already summed, with their file names.
    A step is summed once, when it leaves the newest ADMIN_COMMENT_MAX_STEPS; a summed step's file that
    changes (a late node) has every file read again. Version 1 (file digests) or an unreadable manifest
    is empty: every file is read once again."""

    stats: dict[str, str] = field(default_factory=dict)
    recent: dict[str, StepRecord] = field(default_factory=dict)
    folded: list[StepRecord] = field(default_factory=list)
    folded_names: list[str] = field(default_factory=list)
    #: The compact dicts of `recent` as loaded (saved again as they are).
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> PublishManifest:
        doc = read_json(path) or {}
        if doc.get("v") != 2:
            return cls()
        try:
            out = cls(
                stats={str(k): str(v) for k, v in doc["stats"].items()},
                folded=[StepRecord.from_dict(full_step(t, SCHEMA_VERSION)) for t in doc["folded"]],
                folded_names=[str(n) for n in doc["folded_names"]],
            )
            for name, summary in doc["recent"].items():
                out.recent[name] = StepRecord.from_dict(full_step(summary, SCHEMA_VERSION))
                out.raw[name] = summary
        except (EaslurmError, KeyError, TypeError, AttributeError) as exc:
            log.warning("%s: unreadable manifest (%s); every step file is read again", path, exc)
            return cls()
        if set(out.stats) != set(out.recent) | set(out.folded_names):
            log.warning("%s: inconsistent manifest; every step file is read again", path)
            return cls()
        return out

    def refresh(self, job_dir: Path, current: dict[str, str]) -> dict[str, StepRecord]:
        """Forget files gone, read those new or changed since (returned in full, by name)."""
        touched = {n for n in set(self.stats) | set(current) if self.stats.get(n) != current.get(n)}
        if touched & set(self.folded_names):  # an older step changed: sum them all again
            for name in self.folded_names:
                del self.stats[name]
            self.folded, self.folded_names = [], []
            touched = {n for n in current if self.stats.get(n) != current[n]}
        fresh: dict[str, StepRecord] = {}
        for name in touched:
            self.stats.pop(name, None)
            self.recent.pop(name, None)
            self.raw.pop(name, None)
            rec = _read_step(job_dir / name) if name in current else None
            if rec is not None:
                fresh[name], self.recent[name], self.stats[name] = rec, rec.reduced("node"), current[name]
        return fresh

    def fold(self, keep: set[str]) -> None:
        """Sum the held-apart steps not in `keep` into their runs' totals."""
        leaving = [n for n in self.recent if n not in keep]
        if leaving:
            self.folded = run_totals([*self.folded, *(self.recent.pop(n) for n in leaving)])
            self.folded_names.extend(leaving)
            for name in leaving:
                self.raw.pop(name, None)

    def save(self, path: Path, gid: int) -> None:
        recent = {n: self.raw.get(n) or compact_step(rec.stored_dict()) for n, rec in self.recent.items()}
        doc = {
            "v": 2,
            "stats": self.stats,
            "recent": recent,
            "folded": [compact_step(t.stored_dict()) for t in self.folded],
            "folded_names": self.folded_names,
        }
        write_record(path, doc, gid, indent=None)
