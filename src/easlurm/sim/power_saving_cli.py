"""The power-saving flags shared by `easlurm sim run` and `easlurm sim replay` (Slurm's names)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import click

from easlurm.units import parse_duration_s

#: flag -> (PowerSaving field, help)
_FLAGS: tuple[tuple[str, str, str], ...] = (
    (
        "--suspend-time",
        "suspend_time_s",
        "Power nodes down after this long without a job, as slurm.conf SuspendTime (e.g. 10min; "
        "'none': off); default: the cluster YAML's power_saving, else off.",
    ),
    ("--resume-timeout", "resume_timeout_s", "ResumeTimeout: the longest a resume may take (default 300s)."),
    ("--suspend-timeout", "suspend_timeout_s", "SuspendTimeout: shutdown time at idle power (default 30s)."),
    ("--boot-time", "boot_s", "Time a resumed node takes to boot, at idle power (default 180s)."),
)


def POWER_SAVING_OPTIONS(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add the power-saving flags; the command receives them as `ps_<field>` keyword arguments."""
    for flag, key, text in reversed(_FLAGS):
        f = click.option(flag, f"ps_{key}", default=None, metavar="DURATION", help=text)(f)
    return f


def power_saving_overrides(kwargs: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The given flags as PowerSaving overrides (checked when the cluster's power saving is applied)."""
    out = []
    for flag, key, _ in _FLAGS:
        value = kwargs.get(f"ps_{key}")
        if value is not None:
            out.append((key, _check(value, flag)))
    return tuple(out)


def _check(value: str, flag: str) -> Any:
    if value.strip().lower() in ("none", "off", "-1"):
        if flag != "--suspend-time":
            raise click.BadParameter(f"{value!r}: only --suspend-time may be 'none'", param_hint=flag)
        return "none"
    seconds = parse_duration_s(value, flag)
    if flag == "--suspend-time" and seconds <= 0:
        raise click.BadParameter(f"{value!r}: must be > 0 (or 'none' for no power saving)", param_hint=flag)
    return seconds
