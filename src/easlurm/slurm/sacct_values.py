"""sacct's text fields as JSON values: counts and sizes as numbers, durations in seconds, units in keys.

`easlurm sacct --json` prints any sacct field; this table says which are numbers and in what unit, so
readers get `elapsed_s: 5` rather than `"00:00:05"`. Fields not listed stay strings.
"""

from __future__ import annotations

import re
from typing import Any

from easlurm.errors import ConfigError
from easlurm.units import parse_duration_s

#: Fields printed as integer counts.
COUNT_FIELDS = frozenset(
    {
        "AllocCPUS",
        "AllocNodes",
        "NCPUS",
        "NNodes",
        "NTasks",
        "ReqCPUS",
        "ReqNodes",
        "Priority",
        "Restarts",
        "UID",
        "GID",
        "AssocID",
        "DBIndex",
        "ReservationId",
        "WCKeyID",
        "QOSRAW",
        "SegmentSize",
    }
)
#: Fields printed as clock durations ([D-]HH:MM:SS, MM:SS.mmm) -> `_s` keys.
CLOCK_FIELDS = frozenset(
    {
        "Elapsed",
        "CPUTime",
        "TotalCPU",
        "UserCPU",
        "SystemCPU",
        "Timelimit",
        "Suspended",
        "Planned",
        "PlannedCPU",
    }
)
#: Fields already in whole seconds or minutes -> `_s` / `_min` keys.
SECONDS_FIELDS = frozenset({"ElapsedRaw", "CPUTimeRAW", "PlannedCPURAW"})
MINUTES_FIELDS = frozenset({"TimelimitRaw"})
#: Memory and disk sizes (K/M/G/T/P are powers of 1024) -> `_bytes` keys.
SIZE_FIELDS = frozenset(
    {
        "MaxRSS",
        "AveRSS",
        "MaxVMSize",
        "AveVMSize",
        "MaxDiskRead",
        "AveDiskRead",
        "MaxDiskWrite",
        "AveDiskWrite",
    }
)
#: Energy in joules (K/M/... are powers of 1000) -> `_j` keys.
ENERGY_FIELDS = frozenset({"ConsumedEnergy", "ConsumedEnergyRaw"})
#: Values meaning "no limit" or "not set".
_NONE_WORDS = frozenset({"", "UNLIMITED", "Partition_Limit", "INVALID", "Unknown", "None"})
_SIZED = re.compile(r"^([0-9]*\.?[0-9]+)([KMGTP]?)[Bn]?$")
_POWERS = "KMGTP"


def snake(name: str) -> str:
    """CamelCase field -> snake_case key: JobIDRaw -> job_id_raw, NNodes -> n_nodes, CPUTimeRAW -> cpu_time_raw."""
    out = []
    for i, ch in enumerate(name):
        if (
            ch.isupper()
            and i
            and (not name[i - 1].isupper() or (i + 1 < len(name) and name[i + 1].islower()))
        ):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def json_key(field: str) -> str:
    """The JSON key of a sacct field, with its unit where it is a quantity."""
    base = snake(field)
    if field in CLOCK_FIELDS or field in SECONDS_FIELDS:
        return base.removesuffix("_raw") + "_s"
    if field in MINUTES_FIELDS:
        return base.removesuffix("_raw") + "_min"
    if field in SIZE_FIELDS:
        return base + "_bytes"
    if field in ENERGY_FIELDS:
        return base.removesuffix("_raw") + "_j"
    return base


def _scaled(text: str, base: int) -> float | None:
    m = _SIZED.match(text)
    if not m:
        return None
    scale = base ** (_POWERS.index(m.group(2)) + 1) if m.group(2) else 1
    return float(m.group(1)) * scale


def json_value(field: str, text: str) -> Any:
    """A sacct cell as a JSON value: a number in the key's unit, None where sacct prints nothing or a
    "no limit" word, the text itself for other fields (and for a quantity that does not parse)."""
    value = text.strip()
    if (
        field
        not in COUNT_FIELDS | CLOCK_FIELDS | SECONDS_FIELDS | MINUTES_FIELDS | SIZE_FIELDS | ENERGY_FIELDS
    ):
        return text
    if value in _NONE_WORDS:
        return None
    try:
        if field in COUNT_FIELDS or field in SECONDS_FIELDS or field in MINUTES_FIELDS:
            return int(value)
        if field in CLOCK_FIELDS:
            return parse_duration_s(value, field)
    except (ValueError, ConfigError):
        return text
    number = _scaled(value, 1024 if field in SIZE_FIELDS else 1000)
    if number is None:
        return text
    return int(number) if number.is_integer() else number
