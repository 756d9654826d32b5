"""Power of a node beyond its GPUs, and Slurm's power saving (SuspendTime, ResumeTimeout, ...) as data.

A node draws its base power (CPUs, DRAM, fans, NICs, switches: `idle_w`) whenever it is on, busy or not,
on top of its GPUs; powered down it draws `off_w` (BMC and PSU standby) and its GPUs draw nothing.
The defaults below are estimates from public figures (docs/power-saving.md lists them); a site replaces
them with its own readings (`ipmitool dcmi power reading` on an idle node, and on one powered down).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from easlurm.errors import ConfigError
from easlurm.units import _NUMBER_UNIT, _POWER_UNITS, parse_duration_s

#: Base power (W) of a powered-on node without its GPUs, by GPUs per node (the smallest class that holds
#: the node's GPUs). Estimates, to be replaced by a site's readings:
#: - 8 GPUs (DGX/HGX A100/H100 class: 2 server CPUs, 1-2 TB DRAM, NVSwitches, 8-10 NICs, about 20
#:   fans): 800 W. NVIDIA gives only maximum system power (DGX A100 6.5 kW, DGX H100 10.2 kW); measured
#:   DGX A100 idle draws of roughly 1.2-1.5 kW (Vysocky et al., "DGX-A100 Face to Face DGX-2",
#:   Energies 14(2):376, 2021, IT4Innovations) less eight idle A100s (about 50-60 W each) leave 0.8-1 kW.
#: - 4 GPUs (2-socket 2U GPU server): 350 W; 1-2 GPUs: 200 W. SPECpower_ssj2008 results put the
#:   active idle of 2-socket servers at about 50-150 W; GPU servers add larger fans, PSUs and NICs.
DEFAULT_IDLE_W_BY_GPUS: tuple[tuple[int, float], ...] = ((2, 200.0), (4, 350.0), (8, 800.0))
#: Powered-down draw (W): BMC and PSU standby. IPMI BMCs draw about 3-10 W and each redundant PSU's
#: standby rail a few W more; 8-GPU systems carry 4-6 PSUs. Estimates.
DEFAULT_OFF_W_BY_GPUS: tuple[tuple[int, float], ...] = ((2, 15.0), (4, 20.0), (8, 30.0))
#: Time from ResumeProgram to a node that runs jobs (s): POST of a 2-socket GPU server with 1-2 TB DRAM
#: and many PCIe devices takes 2-5 minutes before the OS boots; estimate 180 s. Slurm's ResumeTimeout
#: default is 60 s, too short for such nodes; sites set it to 300-1800 s.
DEFAULT_BOOT_S = 180.0

_NODE_KEYS = ("idle_w", "off_w")


def _by_gpus(table: tuple[tuple[int, float], ...], n_gpus: int) -> float:
    for limit, value in table:
        if n_gpus <= limit:
            return value
    return table[-1][1]


def default_idle_w(n_gpus: int) -> float:
    """The estimated base power (W) of a powered-on node with `n_gpus` GPUs, GPUs excluded."""
    return _by_gpus(DEFAULT_IDLE_W_BY_GPUS, n_gpus)


def default_off_w(n_gpus: int) -> float:
    """The estimated draw (W) of a powered-down node with `n_gpus` GPUs."""
    return _by_gpus(DEFAULT_OFF_W_BY_GPUS, n_gpus)


def _watts(value: Any, where: str) -> float:
    if isinstance(value, str):
        m = _NUMBER_UNIT.match(value.strip())
        unit = (m.group(2).lower() if m else "") or "w"
        if not m or unit not in _POWER_UNITS:
            raise ConfigError(f"{where}: cannot parse power {value!r} (use e.g. 300W, 1.2kW)")
        value = float(m.group(1)) * _POWER_UNITS[unit]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: expected a power in W, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise ConfigError(f"{where}: must be finite and >= 0 W, got {value!r}")
    return v


def node_power(entry: Mapping[str, Any], n_gpus: int, where: str) -> tuple[float | None, float | None]:
    """(idle_w, off_w) of a node entry of a cluster YAML (None: the default), checked: both >= 0 and the
    off draw at most the idle one (after defaults)."""
    idle = _watts(entry["idle_w"], f"{where}.idle_w") if entry.get("idle_w") is not None else None
    off = _watts(entry["off_w"], f"{where}.off_w") if entry.get("off_w") is not None else None
    idle_v = default_idle_w(n_gpus) if idle is None else idle
    if off is None:  # a node measured below the default off power draws at most its idle power off
        return idle, None if idle is None or idle >= default_off_w(n_gpus) else idle
    if off > idle_v:
        raise ConfigError(f"{where}.off_w: {off:g} W is more than the node's idle_w ({idle_v:g} W)")
    return idle, off


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected a duration, got {value!r}")
    if isinstance(value, int | float) and (not math.isfinite(value) or value < 0):
        raise ConfigError(f"{where}: must be a finite duration >= 0, got {value!r}")
    return parse_duration_s(value, where)


@dataclass(frozen=True)
class PowerSaving:
    """Slurm's power saving (slurm.conf SuspendTime, ResumeTimeout, SuspendTimeout) for the simulator.

    A node without a job for `suspend_time_s` is powered down: for `suspend_timeout_s` it still draws
    its idle power (shutdown), then its off power. A job placed on it waits `boot_s` (the node draws idle
    power while it boots); Slurm fails a resume longer than `resume_timeout_s`, so `boot_s` must fit.
    `off_w`, when given, replaces every node's own off power."""

    suspend_time_s: float = 600.0
    resume_timeout_s: float = 300.0
    suspend_timeout_s: float = 30.0
    boot_s: float = DEFAULT_BOOT_S
    off_w: float | None = None

    def __post_init__(self) -> None:
        self.check("power_saving")

    def check(self, where: str) -> None:
        if not (math.isfinite(self.suspend_time_s) and self.suspend_time_s > 0):
            raise ConfigError(
                f"{where}.suspend_time_s: must be finite and > 0 s, got {self.suspend_time_s!r}"
            )
        for key in ("resume_timeout_s", "suspend_timeout_s", "boot_s"):
            v = getattr(self, key)
            if not (math.isfinite(v) and v >= 0):
                raise ConfigError(f"{where}.{key}: must be finite and >= 0 s, got {v!r}")
        if self.resume_timeout_s < self.boot_s:
            raise ConfigError(
                f"{where}.resume_timeout_s: {self.resume_timeout_s:g} s is shorter than boot_s "
                f"({self.boot_s:g} s): Slurm would mark every resumed node DOWN"
            )
        if self.off_w is not None and not (math.isfinite(self.off_w) and self.off_w >= 0):
            raise ConfigError(f"{where}.off_w: must be finite and >= 0 W, got {self.off_w!r}")

    @classmethod
    def from_dict(cls, doc: Any, where: str, base: PowerSaving | None = None) -> PowerSaving | None:
        """A `power_saving:` mapping (durations as seconds or `10min`; `suspend_time_s: none` turns power
        saving off, as Slurm's SuspendTime=NONE), over `base` (None: the defaults). None: off."""
        if doc is None:
            return base
        if not isinstance(doc, Mapping):
            raise ConfigError(
                f"{where}: expected a mapping of {', '.join(f.name for f in dataclasses.fields(cls))}"
            )
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(doc) - known
        if unknown:
            raise ConfigError(
                f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))} (known: {', '.join(sorted(known))})"
            )
        if "suspend_time_s" in doc and _off(doc["suspend_time_s"]):
            return None
        values: dict[str, Any] = {}
        for key, value in doc.items():
            if key == "off_w":
                values[key] = None if value is None else _watts(value, f"{where}.off_w")
            elif value is not None:
                values[key] = _seconds(value, f"{where}.{key}")
        try:
            return dataclasses.replace(base, **values) if base is not None else cls(**values)
        except ConfigError as exc:
            raise ConfigError(str(exc).replace("power_saving", where, 1)) from None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _off(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower() in ("none", "off", "-1")


def apply_power_saving(
    base: PowerSaving | None, overrides: tuple[tuple[str, Any], ...] | Mapping[str, Any], where: str
) -> PowerSaving | None:
    """The cluster's power saving with a run's overrides (flags, a campaign plan); empty: unchanged."""
    doc = dict(overrides)
    if not doc:
        return base
    return PowerSaving.from_dict(doc, where, base)


def add_node_base(record: dict[str, Any], base_w: float) -> None:
    """Add the nodes' base power to a recorded schedule's result (its nodes were on all along, from 0 to
    its makespan), so that it counts the same parts of the power as a simulated run."""
    m = record.get("metrics") or {}
    span = m.get("makespan_s")
    if not isinstance(span, int | float) or not math.isfinite(span) or base_w <= 0:
        return
    added = base_w * float(span)
    for key in ("idle_energy_j", "energy_j"):
        if isinstance(m.get(key), int | float):
            m[key] += added
    jobs = m.get("completed_jobs")
    if isinstance(m.get("energy_j"), int | float) and jobs:
        m["energy_per_job_j"] = m["energy_j"] / jobs
    m["node_base_w"] = base_w
    if record.get("power_w"):
        record["power_w"] = [p + base_w for p in record["power_w"]]
