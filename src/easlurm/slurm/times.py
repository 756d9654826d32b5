"""Slurm's time notations (timestamps, elapsed times, time limits), read and written under one zone rule.

The rule: Slurm prints a timestamp without a zone (`2026-11-24T03:38:33`) in the local time zone of the
process that prints it (sacct, squeue and scontrol follow their TZ, else /etc/localtime). easlurm reads
such a timestamp in the time zone of its own process (TZ, else local), the zone sacct used when it
printed it on this machine; a dump recorded on a machine in another zone is read with `tz=` set to
that zone. A timestamp with an offset (or `Z`) keeps its offset; epoch seconds stay epochs (every
`--json` time is one). Writes (`scontrol update StartTime=`, `sacct -S`) use the same zone, so reading
back a written time gives it again. Malformed text raises ValueError naming it.
"""

from __future__ import annotations

import time
from datetime import datetime, tzinfo

from easlurm.errors import ConfigError
from easlurm.units import parse_duration_s

#: Values Slurm prints where a time is unknown or does not apply.
MISSING = frozenset({"", "unknown", "none", "n/a", "(null)", "invalid"})
#: Time limit values that mean "no limit of the job's own".
UNLIMITED = frozenset({"unlimited", "partition_limit", "infinite"})
_FORMAT = "%Y-%m-%dT%H:%M:%S"


def parse_timestamp_s(text: str | None, tz: tzinfo | None = None) -> float | None:
    """'2024-01-02T03:04:05' (in `tz`, default the process's zone), ISO with an offset or epoch seconds
    -> epoch seconds; 'Unknown'/'None'/''/0 -> None."""
    if text is None:
        return None
    s = text.strip()
    if s.lower() in MISSING:
        return None
    if s.replace(".", "", 1).isdigit():
        value = float(s)
        return None if value == 0 else value
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00") if s.endswith("Z") else s)
    except ValueError:
        raise ValueError(f"timestamp {text!r} is not YYYY-MM-DDTHH:MM:SS, epoch seconds or Unknown") from None
    if dt.tzinfo is None and tz is not None:
        dt = dt.replace(tzinfo=tz)
    return dt.timestamp()  # a naive datetime is read in the process's zone


def format_timestamp(epoch_s: float, tz: tzinfo | None = None) -> str:
    """Epoch seconds -> Slurm's YYYY-MM-DDTHH:MM:SS in `tz` (default the process's zone), as scontrol's
    StartTime= and sacct's -S read it: the inverse of parse_timestamp_s."""
    if tz is None:
        return time.strftime(_FORMAT, time.localtime(epoch_s))
    return datetime.fromtimestamp(epoch_s, tz).strftime(_FORMAT)


def parse_elapsed_s(text: str | None) -> float | None:
    """'1-02:03:04', '02:03:04', '03:04' -> seconds; unknown -> None."""
    if text is None or text.strip().lower() in MISSING:
        return None
    try:
        return parse_duration_s(text.strip(), field="elapsed")
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


def parse_timelimit_s(text: str | None, minutes: bool = False) -> float | None:
    """A job time limit -> seconds; 'UNLIMITED'/'Partition_Limit'/unknown -> None (no deadline).

    `minutes=True` reads a bare number as minutes (TimelimitRaw, sbatch -t), else as clock text.
    """
    if text is None:
        return None
    s = text.strip()
    if s.lower() in MISSING or s.lower() in UNLIMITED:
        return None
    try:
        return parse_duration_s(s, field="timelimit", default_unit="min" if minutes else "s")
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


def format_elapsed(seconds: float) -> str:
    """Seconds -> Slurm's [D-]HH:MM:SS (whole seconds), the inverse of parse_elapsed_s."""
    total = int(seconds)
    days, rest = divmod(total, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    clock = f"{h:02d}:{m:02d}:{s:02d}"
    return f"{days}-{clock}" if days else clock


__all__ = [
    "MISSING",
    "UNLIMITED",
    "format_elapsed",
    "format_timestamp",
    "parse_elapsed_s",
    "parse_timelimit_s",
    "parse_timestamp_s",
]
