"""The accounting spool on disk: its layout, safe directories and writes, the job lock, and its readers.

Layout (`Spool` names every path in it; root-owned; a job's directory is root:<job gid> 0750, so the user
reads it, and no other user can write it; nothing in it is named after user input):
    SPOOL/<job>/<step>/node-<id>.json      one node's record (<step> is `<step>+r<N>` in run N > 0 of a
                                           requeued job: SLURM_RESTART_COUNT)
    SPOOL/<job>/<step>/node-<id>/          the profiler's run directory (samples) for that node
    SPOOL/<job>/<step>/node-<id>.log       the agent's warnings and errors (also on its stderr)
    SPOOL/<job>/step-<step>.json           the step record (what AdminComment carries)
    SPOOL/<job>/.publish.lock              serialises the job's AdminComment writers
    SPOOL/<job>/.published.json            what the last publication carried (easlurm.accounting.publish)
    SPOOL/<job>.stale-<unix time>[.<n>]/   a job directory left from an earlier job with the same ID
    .<name>.<pid>.tmp                      a record being written, renamed to <name> once complete
Node records meet in SPOOL: it must be shared between nodes for multi-node steps. The same root also
holds trees this module does not name: the scheduler's hint files (`sched/`: easlurm.energy.power_limits,
the SPANK plugin and the daemon), the power-limit ledger (easlurm.energy.power_limits; both below this
room) and the nodes' power events (`power/state.jsonl`: easlurm.accounting.power_state, which the power
saving programs import without the records).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import stat
import sys
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from easlurm.accounting.step_record import NodeRecord, StepRecord
from easlurm.errors import EaslurmError

log = logging.getLogger(__name__)

PUBLISHED_MANIFEST = ".published.json"
LOCK_NAME = ".publish.lock"
#: A step directory's name: `<step>` or `<step>+r<run>` (easlurm.accounting.step_record.run_step_key).
_STEP_DIR = re.compile(r"(batch|[0-9]+)(?:\+r([0-9]+))?")
_NODE_FILE = re.compile(r"node-([0-9]+)\.json")
#: A write that failed because the spool's file system (or the quota) is full.
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_full(exc: OSError) -> bool:
    """Whether a failed write means the spool is full (no space, or over quota)."""
    return exc.errno in FULL_ERRNOS


@dataclass(frozen=True)
class Spool:
    """The spool under `root`: the one place that spells its layout (the module docstring draws it).

    `job` is a job ID (as int or as the directory's name), `step_key` a step's name within the job's
    runs (easlurm.accounting.step_record.run_step_key), `node` the node's index in the step."""

    root: Path

    @classmethod
    def of_job_dir(cls, job_dir: Path) -> tuple[Spool, str]:
        """The spool and job ID a job directory belongs to (for callers that hold only the directory)."""
        return cls(job_dir.parent), job_dir.name

    def job_dir(self, job: int | str) -> Path:
        return self.root / str(job)

    def step_dir(self, job: int | str, step_key: str) -> Path:
        """The nodes' records, run directories and logs of one step."""
        return self.job_dir(job) / step_key

    def node_file(self, job: int | str, step_key: str, node: int) -> Path:
        return self.step_dir(job, step_key) / f"node-{node}.json"

    def node_run_dir(self, job: int | str, step_key: str, node: int) -> Path:
        """The profiler's run directory (samples) of one node."""
        return self.step_dir(job, step_key) / f"node-{node}"

    def node_log(self, job: int | str, step_key: str, node: int) -> Path:
        return self.step_dir(job, step_key) / f"node-{node}.log"

    def step_file(self, job: int | str, step_key: str) -> Path:
        """The step record: what AdminComment carries."""
        return self.job_dir(job) / f"step-{step_key}.json"

    @staticmethod
    def is_step_file(name: str) -> bool:
        """Whether a name in a job directory is a step record's."""
        return name.startswith("step-") and name.endswith(".json")

    def lock_file(self, job: int | str) -> Path:
        return self.job_dir(job) / LOCK_NAME

    def manifest_file(self, job: int | str) -> Path:
        """What the job's last publication carried (PUBLISHED_MANIFEST)."""
        return self.job_dir(job) / PUBLISHED_MANIFEST

    def stale_dir(self, job: int | str, stamp: int, n: int = 0) -> Path:
        """The n-th free name for a stale job directory moved aside at unix time `stamp`."""
        return self.root / (f"{job}.stale-{stamp}" + (f".{n}" if n else ""))

    @staticmethod
    def tmp_file(path: Path) -> Path:
        """Where this process writes `path` before renaming it into place."""
        return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def check_owned_dir(path: Path) -> None:
    """A spool directory must be a real directory owned by us and not writable by others."""
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(f"{path}: not a directory (or a symlink)")
    if st.st_uid != os.geteuid():
        raise OSError(f"{path}: owned by uid {st.st_uid}, not by the agent (uid {os.geteuid()})")
    if st.st_mode & stat.S_IWOTH:
        raise OSError(f"{path}: writable by others")


def make_private_dir(path: Path, gid: int) -> None:
    """Create (or verify) a spool directory: ours, mode 0750, group = the job's group."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o750)
    check_owned_dir(path)
    if os.geteuid() == 0:
        os.chown(path, 0, gid, follow_symlinks=False)
    os.chmod(path, 0o750)


def write_record(path: Path, doc: dict[str, Any], gid: int, indent: int | None = 1) -> None:
    """Atomic write (temp name, then rename) that never follows a symlink; mode 0640, group = job's.
    `indent=None` writes one line (json's C encoder: for large documents such as the manifest)."""
    tmp = Spool.tmp_file(path)
    data = (json.dumps(doc, indent=indent, allow_nan=False) + "\n").encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if os.geteuid() == 0:
                os.fchown(fh.fileno(), 0, gid)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from a spool file; None when it is absent, unreadable (logged) or not an object."""
    try:
        with open(path, "rb") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("%s: unreadable record (%s)", path, exc)
        return None
    return doc if isinstance(doc, dict) else None


def move_aside(job_dir: Path, now_s: float | None = None) -> Path:
    """Rename a stale job directory to `<job>.stale-<unix time>` (kept for the admin, ignored by
    readers, which take only numeric job directories); returns the new path."""
    stamp = int(time.time() if now_s is None else now_s)
    spool, job = Spool.of_job_dir(job_dir)
    for n in range(100):
        target = spool.stale_dir(job, stamp, n)
        try:
            os.rename(job_dir, target)
        except FileExistsError:
            continue
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):  # the name is taken: try the next one
                continue
            raise
        log.warning("%s: left from an earlier job with the same ID; moved to %s", job_dir, target)
        return target
    raise OSError(f"{job_dir}: cannot move the stale directory aside")


@contextlib.contextmanager
def job_lock(job_dir: Path, timeout_s: float) -> Iterator[bool]:
    """Exclusive lock on the job's publication (one writer at a time owns the AdminComment document).
    Yields False when the lock could not be had in time."""
    spool, job = Spool.of_job_dir(job_dir)
    try:
        fd = os.open(spool.lock_file(job), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        log.warning("publication lock: %s", exc)
        yield False
        return
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    locked = False
                    break
                time.sleep(0.005)
        yield locked
    finally:
        os.close(fd)


def read_step_files(
    job_dir: Path, log_level: int = logging.WARNING, skip: Collection[str] = ()
) -> dict[str, tuple[str, StepRecord]]:
    """{file name: (sha256 of its bytes, record)} for every readable `step-*.json` in a job's spool
    directory but the names in `skip`; unreadable ones are logged at `log_level` and left out."""
    out: dict[str, tuple[str, StepRecord]] = {}
    try:
        names = sorted(os.listdir(job_dir))
    except OSError as exc:
        log.log(log_level, "%s: %s", job_dir, exc)
        return out
    for name in names:
        if not Spool.is_step_file(name) or name in skip:
            continue
        try:
            data = (job_dir / name).read_bytes()
            out[name] = (hashlib.sha256(data).hexdigest(), StepRecord.from_dict(json.loads(data)))
        except FileNotFoundError:
            continue
        except (OSError, ValueError, EaslurmError) as exc:
            log.log(log_level, "%s: unreadable step record (%s)", job_dir / name, exc)
    return out


def spool_records(spool: Path, job: str, have: Collection[str] = ()) -> dict[str, StepRecord]:
    """Step records kept in the spool files: the fallback for jobs whose AdminComment could not be set
    (cancelled or timed-out jobs end COMPLETING, when slurmctld refuses updates). A step whose node 0
    never wrote the step record (its agent died) is rebuilt from whichever node files exist, and a step
    record still missing nodes takes their files when they came later: both stay `partial` naming the
    nodes that are still missing. Steps whose key is in `have` (the caller holds them already) are not
    read: a job of many steps costs only the files of the steps its AdminComment left out."""
    if not job.isdigit():
        return {}
    paths = Spool(spool)
    job_dir = paths.job_dir(job)
    skip = {paths.step_file(job, key).name for key in have}
    out = {rec.key: rec for _, rec in read_step_files(job_dir, logging.DEBUG, skip).values()}
    complete = {key for key, rec in out.items() if not rec.missing_nodes} | set(have)
    for key, nodes in node_files(job_dir, skip=complete).items():
        if key in out:
            out[key] = _fill_missing(out[key], nodes)
        else:
            out[key] = adopt_orphan(int(job), key, nodes)
    return out


def node_files(
    job_dir: Path, skip: set[str] | frozenset[str] = frozenset()
) -> dict[str, dict[int, NodeRecord]]:
    """{step key: {node id: record}} of every readable node file under a job's step directories, but those
    named in `skip` (steps whose record is complete: their node files are not read)."""
    out: dict[str, dict[int, NodeRecord]] = {}
    try:
        names = sorted(n for n in os.listdir(job_dir) if _STEP_DIR.fullmatch(n) and n not in skip)
    except OSError:
        return out
    for key in names:
        try:
            files = sorted(n for n in os.listdir(job_dir / key) if _NODE_FILE.fullmatch(n))
        except OSError:
            continue
        for name in files:
            doc = read_json(job_dir / key / name)
            try:
                rec = None if doc is None else NodeRecord.from_dict(doc)
            except EaslurmError as exc:
                log.debug("%s: %s", job_dir / key / name, exc)
                continue
            if rec is not None:
                out.setdefault(key, {})[rec.node_id] = rec
    return out


def adopt_orphan(job_id: int, key: str, nodes: dict[int, NodeRecord]) -> StepRecord:
    """The step of node files that no step record gathered (node 0's agent died before writing it):
    partial, naming the nodes without a file."""
    m = _STEP_DIR.fullmatch(key)
    assert m is not None and nodes
    nnodes = max([*(n.nnodes or 0 for n in nodes.values()), max(nodes) + 1])
    return StepRecord(
        job_id=job_id,
        step=m.group(1),
        nnodes=nnodes,
        nodes=[nodes[k] for k in sorted(nodes)],
        spec=next((n.spec for n in nodes.values() if n.spec), ""),
        missing_nodes=[k for k in range(nnodes) if k not in nodes],
        run=int(m.group(2) or 0),
    )


def _fill_missing(step: StepRecord, nodes: dict[int, NodeRecord]) -> StepRecord:
    """A step record with the files of nodes it lacked that arrived after it was written."""
    late = [k for k in step.missing_nodes if k in nodes]
    if not late:
        return step
    have = {n.node_id: n for n in step.nodes}
    have.update({k: nodes[k] for k in late})
    return StepRecord(
        job_id=step.job_id,
        step=step.step,
        nnodes=step.nnodes,
        nodes=[have[k] for k in sorted(have)],
        spec=step.spec,
        missing_nodes=[k for k in step.missing_nodes if k not in nodes],
        detail=step.detail,
        run=step.run,
        spool_error=step.spool_error,
    )


class SpoolLogHandler(logging.FileHandler):
    """The agent's log file in the spool. A write that fails (a full spool) costs one line on stderr
    and silences this handler, instead of logging's traceback on every message."""

    broken = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.broken:
            return
        try:
            super().emit(record)
        except OSError:  # opening the delayed file fails outside logging's own guard
            self.handleError(record)

    def handleError(self, record: logging.LogRecord) -> None:
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):
            super().handleError(record)
            return
        self.broken = True
        reason = "spool full" if is_full(exc) else "cannot write"
        sys.stderr.write(f"easlurm agent: {reason}: {self.baseFilename}: {exc.strerror}; log file dropped\n")
        with contextlib.suppress(Exception):
            self.close()
