"""Slurm's time notations in traces: timestamps (ISO, epoch, 'Unknown'), elapsed and time limits."""

from __future__ import annotations

from datetime import UTC, datetime

from easlurm.errors import ConfigError, TraceError
from easlurm.units import parse_duration_s

#: Values sacct prints where a time is unknown or does not apply.
MISSING = frozenset({"", "unknown", "none", "n/a", "(null)", "invalid"})
#: Time limit values that mean "no limit of the job's own".
UNLIMITED = frozenset({"unlimited", "partition_limit", "infinite"})


def parse_timestamp_s(text: str | None) -> float | None:
    """'2024-01-02T03:04:05' or epoch seconds -> epoch seconds; 'Unknown'/'None'/'' -> None.

    sacct prints local time without a zone; it is read as UTC so that differences (what a replay
    uses) are exact except across a daylight-saving change.
    """
    if text is None:
        return None
    s = text.strip()
    if s.lower() in MISSING:
        return None
    if s.replace(".", "", 1).isdigit():
        value = float(s)
        return None if value == 0 else value
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise TraceError(f"timestamp {text!r} is not YYYY-MM-DDTHH:MM:SS, epoch seconds or Unknown") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def parse_elapsed_s(text: str | None) -> float | None:
    """'1-02:03:04', '02:03:04', '03:04' -> seconds; unknown -> None."""
    if text is None or text.strip().lower() in MISSING:
        return None
    try:
        return parse_duration_s(text.strip(), field="elapsed")
    except ConfigError as exc:
        raise TraceError(str(exc)) from None


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
        raise TraceError(str(exc)) from None


def format_elapsed(seconds: float) -> str:
    """Seconds -> Slurm's [D-]HH:MM:SS (whole seconds), the inverse of parse_elapsed_s."""
    total = int(seconds)
    days, rest = divmod(total, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    clock = f"{h:02d}:{m:02d}:{s:02d}"
    return f"{days}-{clock}" if days else clock
