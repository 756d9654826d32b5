"""The --energy-profile SPEC: what to measure on a step, how often, and the scheduler's workload hints.

The same strict grammar as the SPANK plugin's spank/spec.c (spank/spec_cases.tsv keeps the two equal):
a comma list of device words (all, gpu, cpu, dram), flags (urgent, share, nolimit) and keys
(interval, deadline, model, steps, batch, gpus). Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from easlurm.errors import ConfigError
from easlurm.units import parse_duration_s

#: The device kinds a SPEC can ask for, in the order records list them.
DEVICE_KINDS = ("gpu", "cpu", "dram")

_SPEC_CHARS = re.compile(r"^[A-Za-z0-9._\-,=:]*$")
_NAME = re.compile(r"^[A-Za-z0-9._\-]{1,64}$")
_INT = re.compile(r"^[1-9][0-9]{0,9}$")
_DURATION = re.compile(r"^[0-9]{1,9}(\.[0-9]{1,6})?(ms|s|m|min|h|d)?$")
SPEC_MAX_CHARS = 1024
INTERVAL_RANGE_S = (0.010, 60.0)
DEADLINE_RANGE_S = (0.001, 366 * 86400.0)
_WORDS = ("all", "gpu", "cpu", "dram", "urgent", "share", "nolimit")
_KEYS = ("interval", "deadline", "model", "steps", "batch", "gpus")


@dataclass(frozen=True)
class ProfileSpec:
    """A parsed --energy-profile SPEC: what to measure, how often, and the scheduler's workload hints."""

    devices: tuple[str, ...] = DEVICE_KINDS
    interval_s: float | None = None
    model: str | None = None
    steps: int | None = None
    batch: tuple[int, ...] = ()
    gpus: tuple[int, ...] = ()
    deadline_s: float | None = None
    urgent: bool = False
    #: the job may share its one GPU with another declared job (docs/colocation-live.md)
    share: bool = False
    #: run at the GPUs' default power limit: the scheduler chooses no limit for this job
    nolimit: bool = False

    def hints(self) -> dict[str, Any]:
        """The workload hints only (JSON-safe), for the scheduler."""
        out: dict[str, Any] = {}
        for key in ("model", "steps", "deadline_s"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.batch:
            out["batch"] = list(self.batch)
        if self.gpus:
            out["gpus"] = list(self.gpus)
        if self.urgent:
            out["urgent"] = True
        if self.share:
            out["share"] = True
        if self.nolimit:
            out["nolimit"] = True
        return out


def _int(value: str, item: str) -> int:
    if not _INT.match(value) or int(value) > 1_000_000_000:
        raise ConfigError(f"--energy-profile: bad integer in {item!r} (1..1000000000)")
    return int(value)


def _int_list(value: str, item: str) -> tuple[int, ...]:
    parts = value.split(":")
    if len(parts) > 16:
        raise ConfigError(f"--energy-profile: bad list in {item!r} (at most 16 integers)")
    return tuple(_int(p, item) for p in parts)


def _duration(value: str, item: str, lo: float, hi: float) -> float:
    if not _DURATION.match(value):
        raise ConfigError(f"--energy-profile: bad duration in {item!r} (use e.g. 200ms, 2s, 30m, 2h)")
    seconds = parse_duration_s(value, field=item)
    if not lo <= seconds <= hi:
        raise ConfigError(f"--energy-profile: {item!r} out of range ({lo:g}..{hi:g} s)")
    return seconds


def parse_spec(text: str | None) -> ProfileSpec:
    """Parse SPEC with the same strict grammar as spank/spec.c (spank/spec_cases.tsv keeps them equal).

    None or "" (a bare --energy-profile) means every device at the configured interval.
    """
    if not text:
        return ProfileSpec()
    if len(text) > SPEC_MAX_CHARS:
        raise ConfigError("--energy-profile: SPEC longer than 1024 characters")
    if not _SPEC_CHARS.match(text):
        raise ConfigError(f"--energy-profile: invalid character in {text[:40]!r}")
    words: list[str] = []
    values: dict[str, str] = {}
    for item in text.split(","):
        if not item:
            raise ConfigError("--energy-profile: empty item in SPEC")
        key, eq, value = item.partition("=")
        if not eq:
            if item not in _WORDS:
                raise ConfigError(
                    f"--energy-profile: unknown item {item!r} (devices: all,gpu,cpu,dram; "
                    f"flags: urgent,share,nolimit; keys: {','.join(_KEYS)})"
                )
            if item in words:
                raise ConfigError(f"--energy-profile: {item!r} given twice")
            words.append(item)
            continue
        if key not in _KEYS:
            raise ConfigError(f"--energy-profile: unknown key {key!r} (keys: {','.join(_KEYS)})")
        if key in values:
            raise ConfigError(f"--energy-profile: key {key!r} given twice")
        values[key] = value
    devices = tuple(w for w in words if w in DEVICE_KINDS)
    if "all" in words and devices:
        raise ConfigError("--energy-profile: 'all' cannot be combined with a device list")
    model = values.get("model")
    if model is not None and not _NAME.match(model):
        raise ConfigError(f"--energy-profile: bad name in 'model={model[:40]}' (1..64 of A-Za-z0-9._-)")
    gpus = _int_list(values["gpus"], "gpus") if "gpus" in values else ()
    if "share" in words and gpus not in ((), (1,)):
        raise ConfigError(
            f"--energy-profile: 'share' is for one-GPU jobs, got 'gpus={values['gpus'][:40]}' (use gpus=1)"
        )
    return ProfileSpec(
        devices=tuple(k for k in DEVICE_KINDS if k in devices) if devices else DEVICE_KINDS,
        interval_s=_duration(values["interval"], "interval", *INTERVAL_RANGE_S)
        if "interval" in values
        else None,
        model=model,
        steps=_int(values["steps"], "steps") if "steps" in values else None,
        batch=_int_list(values["batch"], "batch") if "batch" in values else (),
        gpus=gpus,
        deadline_s=_duration(values["deadline"], "deadline", *DEADLINE_RANGE_S)
        if "deadline" in values
        else None,
        urgent="urgent" in words,
        share="share" in words,
        nolimit="nolimit" in words,
    )
