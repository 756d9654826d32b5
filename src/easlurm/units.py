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


#: SI prefixes a user may ask for (sacct's --units letters; K is read as k).
SI_PREFIXES = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


def si_prefix(letter: str) -> str:
    """sacct's `--units` letter (K, M, G, T, P; any case) -> the SI prefix (k, M, G, T, P)."""
    low = letter.strip().lower()
    if low in ("", "k"):
        return low
    if low.upper() in SI_PREFIXES:
        return low.upper()
    raise ConfigError(f"--units: expected one of K, M, G, T, P, got {letter!r}")


def format_si(value: float | None, unit: str, prefix: str | None = None, digits: int = 2) -> str:
    """`value` (in `unit`, e.g. J or J*s) with an SI prefix: the largest that keeps it >= 1, or the one
    given (`prefix=""` is no prefix). None or NaN -> empty (sacct leaves unknown fields blank)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if prefix is None:
        prefix = next((p for p in ("P", "T", "G", "M", "k") if abs(value) >= SI_PREFIXES[p]), "")
    return f"{value / SI_PREFIXES[prefix]:.{digits}f}{prefix}{unit}"


def format_energy(joules: float | None, prefix: str | None = None) -> str:
    """Human form of an energy: J, kJ, MJ, GJ ... (the one unit of energy in every command)."""
    return format_si(joules, "J", prefix)


def format_edp(joule_seconds: float | None, prefix: str | None = None) -> str:
    """Human form of an energy-delay product: J*s with an SI prefix (kJ*s, MJ*s ...)."""
    return format_si(joule_seconds, "J*s", prefix)


def format_power(watts: float | None, prefix: str | None = None) -> str:
    """Human form of a power: W below 10 kW (one decimal), then kW, MW ... (two decimals)."""
    if watts is None or (isinstance(watts, float) and math.isnan(watts)):
        return ""
    if prefix == "" or (prefix is None and abs(watts) < 1e4):
        return f"{watts:.1f}W"
    return format_si(watts, "W", prefix)


def format_raw(value: float | None) -> str:
    """A number for a `*Raw` column: SI unit, no prefix or symbol, at most three decimals."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def format_number(value: float | None, digits: int = 3) -> str:
    """`digits` significant digits without an exponent, thousands separated: 2,200 and 0.0123; None -> ''."""
    if value is None or not math.isfinite(value):
        return ""
    if value == 0:
        return "0"
    # the place of the last significant digit; a number that rounds to 1,000 or more keeps its units
    places = digits - 1 - math.floor(math.log10(abs(value)))
    rounded = round(value, places)
    if abs(rounded) >= 10 ** (digits - 1) or places <= 0:
        return f"{round(value):,}"
    return f"{rounded:.{places}f}".rstrip("0").rstrip(".")


def format_duration(seconds: float | None) -> str:
    """A duration in the unit a person reads it in: 45 s, 12.5 min, 5.2 h, 91.7 d; None -> ''."""
    if seconds is None or not math.isfinite(seconds):
        return ""
    for unit, scale, below in (("s", 1.0, 60.0), ("min", 60.0, 3600.0), ("h", 3600.0, 172800.0)):
        if abs(seconds) < below:
            return f"{format_number(seconds / scale)} {unit}"
    return f"{format_number(seconds / 86400.0)} d"
