"""Per-job GPU power caps on a node, owned by the job's steps there: the first step that runs on the
node sets the limit the scheduler chose, the last one to end puts the previous limits back, and no GPU
stays capped after a crash.

One ledger per job and node, `<spool>/power-limits/<job>.<node>.json` (root-only), holds the previous
limits and a reference for each live step (its agent's PID, with the process start time so a reused
PID is not taken for it). Steps start and end concurrently: every read-modify-write of a ledger holds
`flock` on `<spool>/power-limits/.lock`. A step's agent joins the ledger at its start (capping the GPUs
the ledger does not hold yet) and leaves it at its end; the step that leaves it empty restores.

A reference whose agent is gone (killed, node rebooted) is dropped by whoever next reads the ledger,
and a ledger left with none is restored by the next agent on the node, by `easlurm power restore-caps`
(a timer, slurmd's start, an Epilog), all through `restore_stale`. The PIDs are judged only on the host
that wrote them (`host`): the spool may be shared between nodes."""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import logging
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

LEDGER_DIR = "power-limits"
LOCK_FILE = ".lock"
ENV_VAR = "EASLURM_POWER_LIMIT_W"


@dataclass
class LimitChange:
    """One GPU's limit before and after (mW, as NVML speaks)."""

    index: int
    previous_mw: int
    set_mw: int


@dataclass
class StepRef:
    """A live step holding the cap: its agent's PID and that process's start time (clock ticks since
    boot, /proc/PID/stat), None where it could not be read."""

    pid: int
    step: str
    started: str | None = None


@dataclass
class Ledger:
    """The limits a job's steps changed on one node, and the steps that hold them. `host` is the host
    whose processes the references are (None in a ledger from before references: any host judges)."""

    job_id: int
    node: str
    host: str | None = None
    refs: list[StepRef] = field(default_factory=list)
    changes: list[LimitChange] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Ledger:
        if "refs" in d:
            refs = [StepRef(int(r["pid"]), str(r["step"]), r.get("started")) for r in d["refs"]]
        else:  # one step's ledger, as written before references (`pid`, `step`)
            refs = [StepRef(int(d["pid"]), str(d["step"]))]
        return cls(
            int(d["job_id"]),
            str(d["node"]),
            d.get("host"),
            refs,
            [LimitChange(int(c["index"]), int(c["previous_mw"]), int(c["set_mw"])) for c in d["changes"]],
        )


def requested_limit_w(spool: Path, job_id: int) -> float | None:
    """The scheduler's per-GPU limit for the job (`<spool>/sched/job-<id>.env`), None when it chose none."""
    path = spool / "sched" / f"job-{job_id}.env"
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == ENV_VAR:
            try:
                limit = float(value.strip())
            except ValueError:
                log.error("%s: %s=%r is not a number; no power cap", path, ENV_VAR, value)
                return None
            return limit if limit > 0 else None
    return None


def ledger_path(spool: Path, job_id: int, node: str) -> Path:
    return spool / LEDGER_DIR / f"{job_id}.{node}.json"


def this_host() -> str:
    return socket.gethostname()


def _write_ledger(path: Path, ledger: Ledger) -> None:
    path.parent.mkdir(mode=0o700, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(ledger.to_dict(), f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_ledger(path: Path) -> Ledger | None:
    """The ledger at `path`, None when there is none; OSError/ValueError/KeyError/TypeError when unreadable."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return Ledger.from_dict(json.loads(text))


@contextlib.contextmanager
def ledger_lock(spool: Path) -> Iterator[None]:
    """Exclusive `flock` on the spool's ledgers (steps of a job start and end at the same time)."""
    folder = spool / LEDGER_DIR
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def load_nvml(module_name: str) -> Any:
    mod = importlib.import_module(module_name)
    mod.nvmlInit()
    return mod


def proc_start(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat), None when it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def pid_alive(pid: int) -> bool:
    """The process runs: it exists and is not a zombie. A SIGKILLed agent stays a zombie until its parent
    (or init, once slurmstepd is gone) reaps it, which a loaded node may take seconds to do: its cap must
    count as orphaned from the kill on, or the next job's agent records the orphan cap as "previous"."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def ref_alive(ref: StepRef, alive: Callable[[int], bool] = pid_alive) -> bool:
    """The step's agent still runs: its PID lives and, where both are known, started when it did."""
    if ref.pid <= 0 or not alive(ref.pid):
        return False
    now = proc_start(ref.pid) if ref.started is not None else None
    return now is None or now == ref.started


def _plan(nvml: Any, gpus: list[int], limit_w: float, errors: list[str]) -> list[tuple[Any, LimitChange]]:
    """(handle, change) of each GPU not yet at `limit_w` (clamped to its min/max); unreadable ones logged."""
    plan: list[tuple[Any, LimitChange]] = []
    for index in gpus:
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            lo, hi = nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
            previous = int(nvml.nvmlDeviceGetPowerManagementLimit(handle))
        except Exception as exc:
            log.error("GPU %d: power limit not readable (%s); left as it is", index, exc)
            errors.append(f"GPU {index}: limit not readable ({exc})")
            continue
        target = min(max(round(limit_w * 1000), int(lo)), int(hi))
        if target != previous:
            plan.append((handle, LimitChange(index, previous, target)))
    return plan


def apply_limit(
    nvml: Any, gpus: list[int], limit_w: float, path: Path, ledger: Ledger, errors: list[str] | None = None
) -> Ledger:
    """Set each GPU of `gpus` the ledger does not hold yet to `limit_w` (clamped to its min/max); GPUs it
    holds keep the limit the job's first step set. The ledger, with the previous limits, is on disk
    before the first change, and is written even when nothing changes (it carries the step's reference).
    Errors (not root, no power management) are logged, never raised, and appended to `errors` as one
    line per GPU."""
    errors = [] if errors is None else errors
    held = {c.index for c in ledger.changes}
    plan = _plan(nvml, [g for g in gpus if g not in held], limit_w, errors)
    kept = list(ledger.changes)
    ledger.changes = kept + [c for _, c in plan]
    try:
        _write_ledger(path, ledger)
    except OSError as exc:
        log.error("power-limit ledger %s not written (%s); GPUs left uncapped", path, exc)
        errors.append(f"ledger not written ({exc})")
        ledger.changes = kept
        return ledger
    done = []
    for handle, change in plan:
        try:
            nvml.nvmlDeviceSetPowerManagementLimit(handle, change.set_mw)
            done.append(change)
        except Exception as exc:
            log.error("GPU %d: power limit %d mW not set (%s)", change.index, change.set_mw, exc)
            errors.append(f"GPU {change.index}: {change.set_mw} mW not set ({exc})")
    ledger.changes = kept + done
    if len(done) < len(plan):
        _write_ledger(path, ledger)
    return ledger


def _restore_changes(nvml: Any, changes: list[LimitChange]) -> list[LimitChange]:
    """Put back each previous limit; returns the changes that could not be undone."""
    left = []
    for change in changes:
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(change.index)
            now = int(nvml.nvmlDeviceGetPowerManagementLimit(handle))
            if now != change.set_mw:  # changed since (by an admin, or never set): not ours now
                log.warning(
                    "GPU %d: limit is %d mW, not the %d mW set; left as it is",
                    change.index,
                    now,
                    change.set_mw,
                )
                continue
            nvml.nvmlDeviceSetPowerManagementLimit(handle, change.previous_mw)
        except Exception as exc:
            log.error(
                "GPU %d: previous power limit %d mW not restored (%s)", change.index, change.previous_mw, exc
            )
            left.append(change)
    return left


def _ledger_or_log(path: Path) -> tuple[bool, Ledger | None]:
    """(readable, the ledger or None when there is none): an unreadable ledger is logged and kept for the
    repair, so its caller reports "not restored"."""
    try:
        return True, read_ledger(path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.error("power-limit ledger %s unreadable (%s); kept for the repair", path, exc)
        return False, None


def restore(nvml: Any, path: Path) -> bool:
    """Put back every limit the ledger at `path` records, whoever holds it (the caller holds the lock);
    the ledger goes once all are back, else it keeps what is left (and no references) for the repair."""
    readable, ledger = _ledger_or_log(path)
    if ledger is None:
        return readable
    left = _restore_changes(nvml, ledger.changes)
    if left:
        ledger.changes, ledger.refs = left, []
        _write_ledger(path, ledger)
        return False
    path.unlink(missing_ok=True)
    return True


def join(
    nvml: Any,
    spool: Path,
    ledger: Ledger,
    ref: StepRef,
    gpus: list[int],
    limit_w: float | None,
    errors: list[str],
) -> Ledger:
    """Add the step's reference to its job's ledger on the node (made if there is none, references of
    gone agents dropped) and cap the GPUs of `gpus` the ledger does not hold yet."""
    path = ledger_path(spool, ledger.job_id, ledger.node)
    with ledger_lock(spool):
        try:
            found = read_ledger(path)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("power-limit ledger %s unreadable (%s); GPUs left uncapped", path, exc)
            errors.append(f"ledger unreadable ({exc})")
            return ledger
        if found is not None:
            ledger = found
        ledger.host = this_host()
        ledger.refs = [r for r in ledger.refs if r.pid != ref.pid and ref_alive(r)] + [ref]
        if limit_w is None:
            _write_ledger(path, ledger)
            return ledger
        return apply_limit(nvml, gpus, limit_w, path, ledger, errors)


def leave(nvml: Any, spool: Path, job_id: int, node: str, pid: int) -> bool:
    """Drop the step's reference (and those of gone agents); the last one out restores the limits.
    True when nothing is left to restore."""
    path = ledger_path(spool, job_id, node)
    with ledger_lock(spool):
        readable, ledger = _ledger_or_log(path)
        if ledger is None:
            return readable
        live = [r for r in ledger.refs if r.pid != pid and ref_alive(r)]
        if live:
            ledger.refs = live
            _write_ledger(path, ledger)
            return True
        return restore(nvml, path)


def stale_ledgers(
    spool: Path, host: str | None = None, alive: Callable[[int], bool] = pid_alive
) -> list[Path]:
    """The ledgers of this host (`host`, default this one) that no live step holds: what `restore_stale`
    would restore. Reads only, takes no lock: a cheap look before loading NVML."""
    host = this_host() if host is None else host
    found = []
    for path in sorted((spool / LEDGER_DIR).glob("*.json")):
        try:
            ledger = read_ledger(path)
        except (OSError, ValueError, KeyError, TypeError):
            found.append(path)  # unreadable: the repair says so
            continue
        if ledger is None or ledger.host not in (None, host):
            continue  # gone since, or another node's: its own agents and check judge it
        if not any(ref_alive(r, alive) for r in ledger.refs):
            found.append(path)
    return found


def restore_stale(
    nvml: Any, spool: Path, alive: Callable[[int], bool] = pid_alive, host: str | None = None
) -> list[Path]:
    """Restore this host's ledgers that no live step holds any more (the repair after a crash); returns
    the ledgers restored. A ledger a live step still holds is left to that step."""
    restored: list[Path] = []
    if not (spool / LEDGER_DIR).is_dir():
        return restored
    with ledger_lock(spool):
        for path in stale_ledgers(spool, host, alive):
            if restore(nvml, path):
                restored.append(path)
    return restored


@dataclass(frozen=True)
class CapOutcome:
    """What the step's GPUs ran at on this node: the limit asked for (W per GPU), the limit in force on
    every one of them (None when not all could be set: the step runs at the default where it failed),
    and why, one line."""

    requested_w: float
    applied_w: float | None
    error: str | None = None


def limit_in_force(nvml: Any, gpus: list[int]) -> float | None:
    """The power limit (W) every GPU in `gpus` now has, None when they differ or one cannot be read."""
    seen = set()
    for index in gpus:
        try:
            seen.add(int(nvml.nvmlDeviceGetPowerManagementLimit(nvml.nvmlDeviceGetHandleByIndex(index))))
        except Exception:
            return None
    return seen.pop() / 1000.0 if len(seen) == 1 else None


class StepCap:
    """The agent's hook: `start()` at step start joins the job's cap on the node, `end()` at step end
    leaves it (the last step out restores); both never raise. `outcome` says what the step runs at
    (None when the scheduler asked for no limit)."""

    def __init__(
        self, spool: Path, job_id: int, step: str, node: str, gpus: list[int], nvml_module: str
    ) -> None:
        self.spool, self.job_id, self.step, self.node = spool, job_id, step, node
        self.gpus, self.nvml_module = gpus, nvml_module
        self.nvml: Any = None
        self.path = ledger_path(spool, job_id, node)
        self.joined = False
        self.outcome: CapOutcome | None = None

    def start(self) -> None:
        limit: float | None = None
        try:
            limit = requested_limit_w(self.spool, self.job_id)
            if not self.gpus or (limit is None and not (self.spool / LEDGER_DIR).is_dir()):
                return
            self.nvml = load_nvml(self.nvml_module)
            restore_stale(self.nvml, self.spool)  # what killed agents left capped on this node
            if limit is None and not self.path.exists():
                return
            pid = os.getpid()
            errors: list[str] = []
            ledger = Ledger(self.job_id, self.node)
            join(
                self.nvml,
                self.spool,
                ledger,
                StepRef(pid, self.step, proc_start(pid)),
                self.gpus,
                limit,
                errors,
            )
            self.joined = True
            if limit is not None:
                applied = None if errors else limit_in_force(self.nvml, self.gpus)
                if applied is None and not errors:
                    errors.append("GPUs do not all report the limit")
                self.outcome = CapOutcome(limit, applied, "; ".join(errors) or None)
        except Exception as exc:  # a cap must never hurt the job
            log.error("job %d step %s: power cap not applied: %s", self.job_id, self.step, exc)
            if limit is not None:
                self.outcome = CapOutcome(limit, None, f"not applied: {exc}")

    def end(self) -> None:
        if self.nvml is None:
            return
        try:
            if self.joined:
                leave(self.nvml, self.spool, self.job_id, self.node, os.getpid())
        except Exception as exc:
            log.error(
                "job %d step %s: power limits not restored: %s (kept in %s)",
                self.job_id,
                self.step,
                exc,
                self.path,
            )
        finally:
            with contextlib.suppress(Exception):
                self.nvml.nvmlShutdown()
