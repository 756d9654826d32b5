"""The nodes' power-state log (one JSON line per suspend or resume) and what it says per node over a period:
time powered down, power cycles, the shortest gap between two, and the energy drawn off and avoided.

`easlurm power suspend|resume` (Slurm's SuspendProgram/ResumeProgram) append the events; `easlurm power
report` and `easlurm report --by node` read them. A node is powered down from a suspend that succeeded to
its next resume (the call, whether or not the site's command then succeeded: Slurm counts the node as
powering up from that moment), or to the end of the period.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from easlurm.errors import ConfigError
from easlurm.files import read_text
from easlurm.units import format_duration, format_energy, format_power, format_raw

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
#: The log's file name under `<spank.spool>/power/` when power.state_log is not set.
DEFAULT_LOG_NAME = "state.jsonl"


class PowerEvent(StrEnum):
    """What Slurm asked of a node."""

    SUSPEND = "suspend"
    RESUME = "resume"


@dataclass(frozen=True)
class StateEvent:
    """One line of the log: `time` (ISO 8601, UTC), `node`, `event`, `ok`, and `error` when not ok."""

    time_s: float
    node: str
    event: PowerEvent
    ok: bool
    error: str | None = None

    def to_line(self) -> str:
        doc: dict[str, Any] = {
            "time": datetime.fromtimestamp(self.time_s, UTC).isoformat(timespec="microseconds"),
            "node": self.node,
            "event": self.event.value,
            "ok": self.ok,
        }
        if self.error:
            doc["error"] = self.error
        return json.dumps(doc, separators=(",", ":")) + "\n"

    @classmethod
    def from_line(cls, line: str) -> StateEvent:
        """ValueError on anything but a line this module wrote."""
        doc = json.loads(line)
        if not isinstance(doc, dict):
            raise ValueError("not an object")
        t = datetime.fromisoformat(str(doc["time"]).replace("Z", "+00:00"))
        if t.tzinfo is None:
            raise ValueError("time without a zone")
        node, ok = doc["node"], doc["ok"]
        if not isinstance(node, str) or not node or not isinstance(ok, bool):
            raise ValueError("bad node or ok")
        error = doc.get("error")
        return cls(t.timestamp(), node, PowerEvent(doc["event"]), ok, str(error) if error else None)


def state_log_path(cfg: Any) -> Path:
    """power.state_log, else `<spank.spool>/power/state.jsonl`."""
    configured = cfg.get("power.state_log")
    if configured:
        return Path(configured)
    return Path(cfg.get("spank.spool")) / "power" / DEFAULT_LOG_NAME


def append_events(path: Path, events: Sequence[StateEvent]) -> None:
    """Append under an exclusive lock (a suspend and a resume may run at once); the directory is made
    when missing. ConfigError naming the file when it cannot be written."""
    import fcntl

    text = "".join(e.to_line() for e in events)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ConfigError(f"power.state_log {path}: cannot write ({exc.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = text.encode()
        while data:
            data = data[os.write(fd, data) :]
    except OSError as exc:
        raise ConfigError(f"power.state_log {path}: cannot write ({exc.strerror})") from None
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def read_events(path: Path) -> tuple[list[StateEvent], int]:
    """The log's events in time order and the number of unreadable lines (skipped: a line cut by a crash
    must not hide every other). No file: no events (no node was ever powered down)."""
    if not path.exists():
        return [], 0
    events, bad = [], 0
    for lineno, line in enumerate(read_text(path, "power.state_log").splitlines(), 1):
        if not line.strip():
            continue
        try:
            events.append(StateEvent.from_line(line))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("%s:%d: skipped (%s)", path, lineno, exc)
            bad += 1
    events.sort(key=lambda e: e.time_s)
    return events, bad


@dataclass(frozen=True)
class NodeDraw:
    """A node's whole draw idle (GPUs included) and powered down (W)."""

    idle_w: float
    off_w: float


@dataclass
class NodePower:
    """One node over a period. Energies are None where the node's draw is unknown."""

    node: str
    idle_w: float | None
    off_w: float | None
    #: seconds powered down within the period
    off_s: float = 0.0
    #: power-downs (suspends that succeeded) within the period
    cycles: int = 0
    #: the shortest time between two power-downs of this node (the period's, and the one before it); None
    #: when it did not cycle twice
    min_cycle_gap_s: float | None = None
    #: suspends and resumes whose command failed within the period
    failures: int = 0
    #: powered down at the end of the period
    off_at_end: bool = False
    _intervals: list[tuple[float, float]] = field(default_factory=list, repr=False)

    @property
    def off_energy_j(self) -> float | None:
        """Drawn while powered down: off_w x off_s."""
        return None if self.off_w is None else self.off_w * self.off_s

    @property
    def avoided_energy_j(self) -> float | None:
        """Against idling powered on the whole time: (idle_w - off_w) x off_s."""
        if self.idle_w is None or self.off_w is None:
            return None
        return (self.idle_w - self.off_w) * self.off_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "off_s": self.off_s,
            "cycles": self.cycles,
            "min_cycle_gap_s": self.min_cycle_gap_s,
            "failures": self.failures,
            "off_at_end": self.off_at_end,
            "idle_w": self.idle_w,
            "off_w": self.off_w,
            "off_energy_j": self.off_energy_j,
            "avoided_energy_j": self.avoided_energy_j,
        }


def node_power(
    events: Iterable[StateEvent], start_s: float, end_s: float, draw: Mapping[str, NodeDraw | None]
) -> list[NodePower]:
    """Per node (sorted by name) over [start_s, end_s): every node with an event in the period or powered
    down in part of it. A suspend while the node is down already (Slurm repeats a request it saw no answer
    to) is no new cycle. `draw` gives each node's idle and off power (missing or None: unknown)."""
    if not end_s > start_s:
        raise ConfigError(f"the period ends before it starts ({_iso(start_s)} to {_iso(end_s)})")
    by_node: dict[str, list[StateEvent]] = {}
    for e in events:
        if e.time_s < end_s:
            by_node.setdefault(e.node, []).append(e)
    rows = []
    for node in sorted(by_node):
        d = draw.get(node)
        row = NodePower(node, d.idle_w if d else None, d.off_w if d else None)
        off_since: float | None = None
        last_down: float | None = None
        for e in sorted(by_node[node], key=lambda e: e.time_s):
            in_period = e.time_s >= start_s
            if not e.ok and in_period:
                row.failures += 1
            if e.event is PowerEvent.SUSPEND and e.ok:
                if off_since is not None:
                    continue  # Slurm repeats a power-down request: the node is down already
                if last_down is not None and in_period:
                    gap = e.time_s - last_down
                    row.min_cycle_gap_s = (
                        gap if row.min_cycle_gap_s is None else min(row.min_cycle_gap_s, gap)
                    )
                last_down = e.time_s
                if in_period:
                    row.cycles += 1
                if off_since is None:
                    off_since = e.time_s
            elif e.event is PowerEvent.RESUME and off_since is not None:
                row._intervals.append((off_since, e.time_s))
                off_since = None
        if off_since is not None:
            row._intervals.append((off_since, end_s))
            row.off_at_end = True
        row.off_s = sum(max(0.0, min(b, end_s) - max(a, start_s)) for a, b in row._intervals)
        if row.off_s > 0 or row.cycles or row.failures or any(e.time_s >= start_s for e in by_node[node]):
            rows.append(row)
    return rows


def totals(rows: Sequence[NodePower]) -> dict[str, Any]:
    """The period's sums over the nodes (an energy is None when a node's draw is unknown)."""
    gaps = [r.min_cycle_gap_s for r in rows if r.min_cycle_gap_s is not None]
    off = [r.off_energy_j for r in rows]
    avoided = [r.avoided_energy_j for r in rows]
    return {
        "nodes": len(rows),
        "off_s": sum(r.off_s for r in rows),
        "cycles": sum(r.cycles for r in rows),
        "min_cycle_gap_s": min(gaps) if gaps else None,
        "failures": sum(r.failures for r in rows),
        "off_at_end": sum(r.off_at_end for r in rows),
        "off_energy_j": None if None in off else sum(v for v in off if v is not None),
        "avoided_energy_j": None if None in avoided else sum(v for v in avoided if v is not None),
    }


# ---- node draw ---------------------------------------------------------------------------------------


def node_draw(
    nodes: Mapping[str, tuple[int, float | None]], idle_w: float | None, off_w: float | None, where: str
) -> dict[str, NodeDraw]:
    """Each node's draw from {node: (GPUs, one idle GPU's draw in W or None)}: power.node_idle_w /
    power.node_off_w where set, else the simulator's base-power estimates by GPUs per node plus the GPUs'
    idle draw. A node whose off draw exceeds its idle draw is refused (one line naming `where`)."""
    # SuspendProgram/ResumeProgram (easlurm power suspend|resume) import this module: only reports need it
    from easlurm.model.node_power import default_idle_w, default_off_w  # here: numpy (easlurm.model)

    out = {}
    for name, (gpus, gpu_idle_w) in nodes.items():
        idle = idle_w if idle_w is not None else default_idle_w(gpus) + gpus * (gpu_idle_w or 0.0)
        off = off_w if off_w is not None else min(default_off_w(gpus), idle)
        if off > idle:
            raise ConfigError(
                f"{where}: power.node_off_w ({off:g} W) is more than node {name}'s idle draw ({idle:g} W)"
            )
        out[name] = NodeDraw(idle, off)
    return out


# ---- periods -----------------------------------------------------------------------------------------

_UNITS_S = {
    "": 1.0,
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "min": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
    "week": 604800.0,
    "weeks": 604800.0,
}


def parse_period_time(text: str, now_s: float, option: str) -> float:
    """A sacct -S/-E time as unix seconds: `now`, `now-7days` (seconds, minutes, hours, days, weeks),
    `today`/`midnight`, `YYYY-MM-DD[THH:MM[:SS]]` (local time, as sacct) or an ISO time with a zone."""
    import re

    s = text.strip()
    low = s.lower()
    m = re.fullmatch(r"now(?:\s*([-+])\s*(\d+(?:\.\d+)?)\s*([a-z]*))?", low)
    if m:
        if not m.group(1):
            return now_s
        unit = m.group(3)
        if unit not in _UNITS_S:
            raise ConfigError(
                f"{option}: unknown unit {unit!r} in {text!r} (seconds, minutes, hours, days, weeks)"
            )
        delta = float(m.group(2)) * _UNITS_S[unit]
        return now_s + delta if m.group(1) == "+" else now_s - delta
    if low in ("today", "midnight"):
        d = datetime.fromtimestamp(now_s).replace(hour=0, minute=0, second=0, microsecond=0)
        return d.timestamp()
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    except ValueError:
        pass
    raise ConfigError(
        f"{option}: cannot read time {text!r} (use now, now-7days, today, 2026-11-24 or 2026-11-24T03:55:44)"
    )


def _iso(t_s: float) -> str:
    if not math.isfinite(t_s):
        return str(t_s)
    return datetime.fromtimestamp(t_s).isoformat(timespec="seconds")


# ---- output ------------------------------------------------------------------------------------------

#: Table columns (CamelCase, as sacct) and the key each shows.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("Node", "node"),
    ("Cycles", "cycles"),
    ("OffTime", "off_s"),
    ("MinCycleGap", "min_cycle_gap_s"),
    ("IdlePower", "idle_w"),
    ("OffPower", "off_w"),
    ("OffEnergy", "off_energy_j"),
    ("AvoidedEnergy", "avoided_energy_j"),
    ("Failures", "failures"),
    ("OffNow", "off_at_end"),
)


def cell(key: str, value: Any, parsable: bool) -> str:
    """A value at the edge: SI with prefixes for a person (`1.25MJ`, `30.0W`, `4.5 h`), plain SI numbers
    (J, W, s) in parsable output; '' where unknown."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key.endswith("_j"):
        return format_raw(value) if parsable else format_energy(value)
    if key.endswith("_w"):
        return format_raw(value) if parsable else format_power(value)
    if key.endswith("_s"):
        return format_raw(value) if parsable else format_duration(value)
    return str(value)


def table_rows(
    rows: Sequence[NodePower], parsable: bool, with_total: bool
) -> tuple[list[str], list[dict[str, str]]]:
    header = [name for name, _ in COLUMNS]
    out = [{name: cell(key, r.to_dict()[key], parsable) for name, key in COLUMNS} for r in rows]
    if with_total and rows:
        t = {**totals(rows), "node": "total", "idle_w": None, "off_w": None, "off_at_end": None}
        out.append({name: cell(key, t.get(key), parsable) for name, key in COLUMNS})
    return header, out


def render_json(rows: Sequence[NodePower], start_s: float, end_s: float, log_path: Path, skipped: int) -> str:
    return json.dumps(
        {
            "schema_version": SCHEMA_VERSION,
            "period": {"start": _iso(start_s), "end": _iso(end_s), "start_s": start_s, "end_s": end_s},
            "state_log": str(log_path),
            "unreadable_lines": skipped,
            "nodes": [r.to_dict() for r in rows],
            "total": totals(rows),
        },
        indent=1,
    )


def render_csv(rows: Sequence[NodePower]) -> str:
    """SI and snake_case, one row per node."""
    import csv
    import io

    buf = io.StringIO()
    keys = list(NodePower("", None, None).to_dict())
    w = csv.DictWriter(buf, keys, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if v is None else v) for k, v in r.to_dict().items()})
    return buf.getvalue()


__all__ = [
    "COLUMNS",
    "NodeDraw",
    "NodePower",
    "PowerEvent",
    "StateEvent",
    "append_events",
    "node_draw",
    "node_power",
    "parse_period_time",
    "read_events",
    "render_csv",
    "render_json",
    "state_log_path",
    "table_rows",
    "totals",
]
