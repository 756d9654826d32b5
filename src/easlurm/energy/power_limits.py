"""Per-job GPU power caps on a node: set the limit the scheduler chose at step start, restore the
previous one at step end, and never leave a GPU capped after a crash.

Before any limit changes, the agent (root) writes a ledger of the previous limits to
`<spool>/power-limits/<job>.<step>.<node>.json` (root-only). Restoring deletes the ledger only once
every GPU is back; a ledger whose agent is gone (killed, node rebooted) is restored by the next agent
on the node or by `restore_stale` (the repair, like `easlurm accounting republish`)."""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

LEDGER_DIR = "power-limits"
ENV_VAR = "EASLURM_POWER_LIMIT_W"


@dataclass
class LimitChange:
    """One GPU's limit before and after (mW, as NVML speaks)."""

    index: int
    previous_mw: int
    set_mw: int


@dataclass
class Ledger:
    """The limits one agent changed, and who changed them (pid: is that agent still alive?)."""

    job_id: int
    step: str
    node: str
    pid: int
    changes: list[LimitChange] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Ledger:
        return cls(
            int(d["job_id"]),
            str(d["step"]),
            str(d["node"]),
            int(d["pid"]),
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


def ledger_path(spool: Path, job_id: int, step: str, node: str) -> Path:
    return spool / LEDGER_DIR / f"{job_id}.{step}.{node}.json"


def _write_ledger(path: Path, ledger: Ledger) -> None:
    path.parent.mkdir(mode=0o700, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(ledger.to_dict(), f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_nvml(module_name: str) -> Any:
    mod = importlib.import_module(module_name)
    mod.nvmlInit()
    return mod


def apply_limit(
    nvml: Any, gpus: list[int], limit_w: float, path: Path, ledger: Ledger, errors: list[str] | None = None
) -> Ledger:
    """Set each GPU to `limit_w` (clamped to its min/max). The ledger, with the previous limits, is on
    disk before the first change. Errors (not root, no power management) are logged, never raised, and
    appended to `errors` as one line per GPU."""
    errors = [] if errors is None else errors
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
    if not plan:
        return ledger
    ledger.changes = [c for _, c in plan]
    try:
        _write_ledger(path, ledger)
    except OSError as exc:
        log.error("power-limit ledger %s not written (%s); GPUs left uncapped", path, exc)
        errors.append(f"ledger not written ({exc})")
        ledger.changes = []
        return ledger
    done = []
    for handle, change in plan:
        try:
            nvml.nvmlDeviceSetPowerManagementLimit(handle, change.set_mw)
            done.append(change)
        except Exception as exc:
            log.error("GPU %d: power limit %d mW not set (%s)", change.index, change.set_mw, exc)
            errors.append(f"GPU {change.index}: {change.set_mw} mW not set ({exc})")
    ledger.changes = done
    if done:
        _write_ledger(path, ledger)
    else:
        path.unlink(missing_ok=True)
    return ledger


def restore(nvml: Any, path: Path) -> bool:
    """Put back every limit the ledger at `path` records; the ledger goes once all are back."""
    try:
        ledger = Ledger.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return True
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.error("power-limit ledger %s unreadable (%s); kept for the repair", path, exc)
        return False
    left = []
    for change in ledger.changes:
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(change.index)
            now = int(nvml.nvmlDeviceGetPowerManagementLimit(handle))
            if now != change.set_mw:  # changed since (an enclosing step restored first): not ours now
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
    if left:
        ledger.changes = left
        _write_ledger(path, ledger)
        return False
    path.unlink(missing_ok=True)
    return True


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def restore_stale(nvml: Any, spool: Path, alive: Callable[[int], bool] = pid_alive) -> list[Path]:
    """Restore the ledgers whose agent is gone (the repair after a crash); returns those restored."""
    restored = []
    for path in sorted((spool / LEDGER_DIR).glob("*.json")):
        try:
            pid = int(json.loads(path.read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            pid = -1
        if pid > 0 and alive(pid):
            continue
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
    """The agent's hook: `start()` at step start, `end()` at step end; both never raise. `outcome` says
    what the step runs at (None when the scheduler asked for no limit)."""

    def __init__(
        self, spool: Path, job_id: int, step: str, node: str, gpus: list[int], nvml_module: str
    ) -> None:
        self.spool, self.job_id, self.step, self.node = spool, job_id, step, node
        self.gpus, self.nvml_module = gpus, nvml_module
        self.nvml: Any = None
        self.path = ledger_path(spool, job_id, step, node)
        self.outcome: CapOutcome | None = None

    def start(self) -> None:
        limit: float | None = None
        try:
            limit = requested_limit_w(self.spool, self.job_id)
            if not self.gpus or (limit is None and not (self.spool / LEDGER_DIR).is_dir()):
                return
            self.nvml = load_nvml(self.nvml_module)
            restore_stale(self.nvml, self.spool)  # what a killed agent left capped
            if limit is not None:
                ledger = Ledger(self.job_id, self.step, self.node, os.getpid())
                errors: list[str] = []
                apply_limit(self.nvml, self.gpus, limit, self.path, ledger, errors)
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
            restore(self.nvml, self.path)
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
