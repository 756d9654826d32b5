"""Parse and format the quantities users type (durations, power, energy): SI inside, units only at the edges."""

from __future__ import annotations

import math
import re

from easlurm.errors import ConfigError

#: The largest count, size or seed a user may give: beyond it numpy, torch and the simulator overflow.
MAX_INT = 2**31 - 1

_DURATION_UNITS = {"ms": 1e-3, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_POWER_UNITS = {"w": 1.0, "kw": 1e3, "mw": 1e6}
_NUMBER_UNIT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_duration_s(text: str | float | int, field: str = "duration", default_unit: str = "s") -> float:
    """'200ms', '10s', '2h', '1.5', '1-02:03:04', '02:03:04' or '03:04' -> seconds (>= 0)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        value = float(text) * _DURATION_UNITS[default_unit]
    else:
        s = str(text).strip()
        if ":" in s or re.match(r"^\d+-", s):
            value = _parse_clock(s, field)
        else:
            m = _NUMBER_UNIT.match(s)
            unit = (m.group(2).lower() if m else "") or default_unit
            if not m or unit not in _DURATION_UNITS:
                raise ConfigError(f"{field}: cannot parse duration {text!r} (use e.g. 200ms, 10s, 5m, 2h)")
            value = float(m.group(1)) * _DURATION_UNITS[unit]
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{field}: duration must be finite and >= 0, got {text!r}")
    return value


def _parse_clock(s: str, field: str) -> float:
    """Slurm's clock notation: [D-]HH:MM:SS, MM:SS, MM:SS.mmm (TotalCPU), D-HH and D-HH:MM (time limits)."""
    text = s
    days = 0
    if "-" in s:
        d, _, s = s.partition("-")
        if not d.isdigit():
            raise ConfigError(f"{field}: cannot parse duration {text!r}")
        days = int(d)
    parts = s.split(":")
    try:
        nums = [float(p) for p in parts]
    except ValueError:
        raise ConfigError(f"{field}: cannot parse duration {text!r}") from None
    if any(n < 0 for n in nums):
        raise ConfigError(f"{field}: cannot parse duration {text!r}")
    if len(nums) == 3:
        h, m, sec = nums
    elif len(nums) == 2 and "-" in text:
        (h, m), sec = nums, 0.0  # D-HH:MM
    elif len(nums) == 2:
        h, (m, sec) = 0.0, nums
    elif len(nums) == 1 and "-" in text:
        h, m, sec = nums[0], 0.0, 0.0  # D-HH
    else:
        raise ConfigError(f"{field}: cannot parse duration {text!r}")
    return days * 86400.0 + h * 3600.0 + m * 60.0 + sec


def parse_power_w(text: str | float | int, field: str = "power") -> float:
    """'4500W', '4.5kW', '300' -> watts (> 0)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        value = float(text)
    else:
        m = _NUMBER_UNIT.match(str(text))
        unit = (m.group(2).lower() if m else "") or "w"
        if not m or unit not in _POWER_UNITS:
            raise ConfigError(f"{field}: cannot parse power {text!r} (use e.g. 300W, 4.5kW)")
        value = float(m.group(1)) * _POWER_UNITS[unit]
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{field}: power must be finite and > 0, got {text!r}")
    return value


def format_energy(joules: float | None) -> str:
    """Human form of an energy: J, kJ, MJ; None -> empty (sacct leaves unknown fields blank)."""
    if joules is None or (isinstance(joules, float) and math.isnan(joules)):
        return ""
    for unit, scale in (("MJ", 1e6), ("kJ", 1e3)):
        if abs(joules) >= scale:
            return f"{joules / scale:.2f}{unit}"
    return f"{joules:.2f}J"


def format_power(watts: float | None) -> str:
    if watts is None or (isinstance(watts, float) and math.isnan(watts)):
        return ""
    return f"{watts / 1e3:.2f}kW" if abs(watts) >= 1e4 else f"{watts:.1f}W"
