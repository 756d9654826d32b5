"""A GPU's utilisation and memory over a profiled window, read from NVML beside its power samples."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from easlurm.energy.nvml_errors import nvml_error_class

log = logging.getLogger(__name__)

#: Seconds between utilisation and memory reads: NVML's utilisation is itself a mean over its last
#: sample period (1/6 s to 1 s), so a read a second keeps the mean honest at about 2 calls a second.
ACTIVITY_PERIOD_S = 1.0


@dataclass(frozen=True)
class GpuActivity:
    """What a GPU did over the window: mean utilisation (%), peak memory in use and total memory
    (bytes); None where NVML could not tell (not supported, or no successful read)."""

    mean_util_pct: float | None
    peak_memory_bytes: int | None
    memory_total_bytes: int | None


class ActivityReader:
    """Reads nvmlDeviceGetUtilizationRates and nvmlDeviceGetMemoryInfo at most every `period_s`.

    A call NVML does not support on this GPU (NOT_SUPPORTED, FUNCTION_NOT_FOUND: some GPUs, MIG mode) is
    not asked again; any other error skips that read. It never raises: energy is what the sensor is for."""

    def __init__(self, nvml: ModuleType, handle: Any, name: str, period_s: float = ACTIVITY_PERIOD_S) -> None:
        self.nvml = nvml
        self.handle = handle
        self.name = name
        self.period_s = period_s
        self.next_t: float | None = None
        self.util_sum = 0.0
        self.util_n = 0
        self.util_supported = True
        self.memory_peak: int | None = None
        self.memory_total: int | None = None
        self.memory_supported = True

    def maybe_read(self, now: float) -> None:
        """Read both when due (`now`: monotonic s)."""
        if self.next_t is not None and now < self.next_t:
            return
        self.next_t = now + self.period_s
        if self.util_supported:
            self.util_supported = self._read(self._util, "utilisation")
        if self.memory_supported:
            self.memory_supported = self._read(self._memory, "memory")

    def _read(self, call: Any, what: str) -> bool:
        """Run one read; False when NVML says it will never work on this GPU."""
        try:
            call()
        except self.nvml.NVMLError as exc:
            if nvml_error_class(exc) == "unsupported":
                log.info("%s: %s not measured (%s)", self.name, what, exc)
                return False
            log.debug("%s: %s read skipped (%s)", self.name, what, exc)
        except Exception as exc:  # a driver quirk must not cost the energy reading
            log.info("%s: %s not measured (%s: %s)", self.name, what, type(exc).__name__, exc)
            return False
        return True

    def _util(self) -> None:
        rates = self.nvml.nvmlDeviceGetUtilizationRates(self.handle)
        pct = float(rates.gpu)
        if 0.0 <= pct <= 100.0:
            self.util_sum += pct
            self.util_n += 1

    def _memory(self) -> None:
        info = self.nvml.nvmlDeviceGetMemoryInfo(self.handle)
        used, total = int(info.used), int(info.total)
        if 0 <= used <= total:
            self.memory_peak = used if self.memory_peak is None else max(self.memory_peak, used)
            self.memory_total = total

    def result(self) -> GpuActivity:
        return GpuActivity(
            self.util_sum / self.util_n if self.util_n else None, self.memory_peak, self.memory_total
        )
