"""The one sensor interface: cumulative energy (J) or power (W) readings, plus a capability description."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import StrEnum

from easlurm.energy.nvml_activity import GpuActivity
from easlurm.energy.result import DeviceKind
from easlurm.errors import SensorError

log = logging.getLogger(__name__)


class Mode(StrEnum):
    """What `Sensor.read()` returns: a cumulative energy since `open()` (J) or an instantaneous power (W)."""

    ENERGY = "energy"
    POWER = "power"


class Sensor(ABC):
    """One measured device. `read()` returns J (ENERGY mode, cumulative since open) or W (POWER mode).

    `read()` returns None for a transient bad value (skip the sample) and raises SensorError when the
    device is gone for good (the sampler then degrades this sensor only).
    """

    name: str
    kind: DeviceKind
    source: str
    mode: Mode
    modelled: bool = False
    in_total: bool = True
    #: How often the underlying counter refreshes (s); shorter windows alias.
    update_period_s: float = 0.0
    #: Node-level sensors (RAPL, perf, DRAM model) are read by one MPI rank per node only.
    node_level: bool = True
    #: The sampler calls read_batch() instead of read(): the device buffers timed samples itself.
    batched: bool = False

    def open(self) -> None:  # noqa: B027 - most sensors need no set-up
        """Acquire the device; raises SensorError with the reason when it cannot be read."""

    @abstractmethod
    def read(self) -> float | None:
        """J since open (ENERGY) or W (POWER); None for a transient unknown value."""

    def read_batch(self) -> list[tuple[float, float]] | None:
        """For `batched` sensors: the readings since the last call as (monotonic s, J or W), oldest
        first; [] when none is new; None for a transient unknown."""
        raise NotImplementedError(f"{type(self).__name__} reads one value at a time")

    def next_read_s(self) -> float | None:
        """For `batched` sensors: the monotonic instant (s) the next read_batch() has work, so the
        sampler may sleep until then; None: read at every tick."""
        return None

    def history(self) -> list[tuple[float, float]]:
        """Power samples (unix s, W) the device kept from before it was opened (NVML's driver buffer),
        oldest first, for the lead-in (easlurm.energy.lead_in); [] for a device that keeps none."""
        return []

    def close(self) -> None:  # noqa: B027
        """Release the device; never raises."""

    def want_exact(self) -> None:  # noqa: B027 - only sensors that estimate between readings act
        """The next read() closes the measurement: take it from the exact counter, not an estimate."""

    def activity(self) -> GpuActivity | None:
        """A GPU's utilisation and memory over the window, where the device reports them; else None."""
        return None

    def describe(self) -> str:
        return f"{self.source} {self.mode.value}"


@dataclass
class SensorStatus:
    """One line of `easlurm profile --list-sensors`: a sensor found or a backend missing, and why."""

    name: str
    kind: str
    source: str
    available: bool
    detail: str


class CounterUnwrap:
    """Turn a raw wrapping counter into a cumulative delta since the first reading.

    A reading lower than the previous one means the counter passed `max_range` and restarted at 0.
    """

    def __init__(self, max_range: float | None) -> None:
        self.max_range = max_range
        self.first: float | None = None
        self.prev: float | None = None
        self.wraps = 0
        self.total = 0.0

    def update(self, raw: float) -> float:
        if self.prev is None:
            self.first = self.prev = raw
            return 0.0
        delta = raw - self.prev
        if delta < 0:
            if self.max_range is None or self.max_range <= 0:
                raise SensorError(f"counter went backwards ({self.prev} -> {raw}) and has no known range")
            delta += self.max_range
            self.wraps += 1
            log.debug("counter wrapped (%s -> %s, range %s)", self.prev, raw, self.max_range)
        self.prev = raw
        self.total += delta
        return self.total
