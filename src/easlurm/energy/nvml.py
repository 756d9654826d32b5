"""NVIDIA GPUs through NVML: the total-energy counter where supported, else polled power."""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from easlurm.energy.gpus import GpuRef
from easlurm.energy.nvml_activity import ActivityReader, GpuActivity
from easlurm.energy.nvml_errors import (
    nvml_error_class,
)
from easlurm.energy.nvml_samples import PowerSampleBuffer
from easlurm.energy.result import DeviceKind
from easlurm.energy.sensor import Mode, Sensor, SensorStatus
from easlurm.errors import SensorError

log = logging.getLogger(__name__)

NVML_FI_DEV_POWER_INSTANT = 186


class NvmlLibrary:
    """The NVML module (pynvml or a fake named by dotted path), initialised once, shut down on last close."""

    def __init__(self, module_name: str = "pynvml") -> None:
        self.module_name = module_name
        self.nvml: ModuleType | None = None
        self._users = 0
        self._lock = threading.Lock()

    def acquire(self) -> ModuleType:
        with self._lock:
            if self.nvml is None:
                try:
                    mod = importlib.import_module(self.module_name)
                except ImportError as exc:
                    raise SensorError(f"cannot import NVML module {self.module_name!r} ({exc})") from exc
                try:
                    mod.nvmlInit()
                except Exception as exc:
                    raise SensorError(f"nvmlInit failed: {exc}") from exc
                self.nvml = mod
            self._users += 1
            return self.nvml

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users <= 0 and self.nvml is not None:
                try:
                    self.nvml.nvmlShutdown()
                except Exception as exc:
                    log.debug("nvmlShutdown: %s", exc)
                self.nvml = None
                self._users = 0


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


#: Seconds between energy-counter reads in counter mode: nvmlDeviceGetTotalEnergyConsumption costs about
#: 4 ms of CPU on an H100 (driver 580), the instantaneous power field about 0.2 ms, so the timeline is
#: sampled from the power field and the counter read at open, at the close and at this slow cadence.
COUNTER_PERIOD_S = 30.0


class NvmlGpuSensor(Sensor):
    """One physical GPU: nvmlDeviceGetTotalEnergyConsumption (mJ since driver load) or power (mW).

    Counter mode reads the counter at open, at the closing read (`want_exact`) and every
    `counter_period_s`; between those reads the cumulative energy is the last counter value plus power
    integrated (trapezoid), so totals stay exact from the counter and the samples are cheap.
    `counter_period_s=0` reads the counter every time. Power comes from the driver's own sample buffer
    where NVML has one (`batched`: one call every few seconds, a timeline point per driver sample),
    else from the instantaneous power field once per tick."""

    kind = DeviceKind.GPU
    node_level = False

    def __init__(self, lib: NvmlLibrary, index: int, uuid: str, note: str = "") -> None:
        self.lib = lib
        self.index = index
        self.uuid = uuid
        self.note = note
        self.name = f"gpu{index}"
        self.source = "nvml-energy"
        self.mode = Mode.ENERGY
        self.update_period_s = 0.1
        self._handle: Any = None
        self._nvml: ModuleType | None = None
        self._base_mj: float | None = None
        self._use_field = False
        self.counter_period_s = COUNTER_PERIOD_S
        self._exact_next = False
        self._anchor_t = 0.0  # monotonic s of the last counter read
        self._est_t = 0.0
        self._est_j = 0.0
        self._last_w: float | None = None
        self.buffer: PowerSampleBuffer | None = None
        self._started = False
        self._activity: ActivityReader | None = None

    def open(self) -> None:
        nvml = self.lib.acquire()
        self._nvml = nvml
        try:
            self._handle = nvml.nvmlDeviceGetHandleByUUID(self.uuid)
            self._activity = ActivityReader(nvml, self._handle, self.name)
            self._base_mj = float(nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
            self._anchor_t = self._est_t = time.monotonic()
            self._est_j = 0.0
            try:
                self._use_field = self._instant_power_mw() is not None
            except Exception:  # no field (old drivers): every reading comes from the counter
                self._use_field = False
            self._open_buffer(nvml)
            return
        except nvml.NVMLError as exc:
            if nvml_error_class(exc) != "unsupported":
                self.close()
                raise SensorError(f"{self.name}: {exc}") from exc
        # No energy counter (pre-Volta, some vGPU): poll power and integrate.
        self.mode, self.source, self.update_period_s = Mode.POWER, "nvml-power", 0.0
        try:
            self._use_field = self._instant_power_mw() is not None
        except Exception:
            self._use_field = False
        if self._open_buffer(nvml):
            return
        try:
            nvml.nvmlDeviceGetPowerUsage(self._handle)
        except nvml.NVMLError as exc:
            if not self._use_field:
                self.close()
                raise SensorError(f"{self.name}: no energy counter and no power reading ({exc})") from exc

    def _open_buffer(self, nvml: ModuleType) -> bool:
        """Use the driver's power sample buffer when it can be read; else power is read once per tick."""
        buffer = PowerSampleBuffer(nvml, self._handle, self.name)
        try:
            why = buffer.open()
        except Exception as exc:  # a quirk of the buffer must only cost the cheap path
            why = f"{type(exc).__name__}: {exc}"
        if why is not None:
            log.info("%s: power read once per tick (%s)", self.name, why)
            return False
        self.buffer, self.batched = buffer, True
        self.update_period_s = buffer.driver_period_s
        self._last_w = buffer.last_w
        return True

    def _instant_power_mw(self) -> float | None:
        """The instantaneous power field (NVML_FI_DEV_POWER_INSTANT, newer drivers), else None."""
        assert self._nvml is not None
        values = self._nvml.nvmlDeviceGetFieldValues(self._handle, [NVML_FI_DEV_POWER_INSTANT])
        v = values[0]
        if getattr(v, "nvmlReturn", 1) != 0:
            return None
        return float(v.value.uiVal)

    def read(self) -> float | None:
        value = self._read_value()
        # utilisation and memory after the power reading, so that the reading stays next to the caller's
        # timestamp
        if self._activity is not None:
            self._activity.maybe_read(time.monotonic())
        return value

    def _read_value(self) -> float | None:
        nvml = self._nvml
        if nvml is None:
            raise SensorError(f"{self.name}: sensor not open")
        try:
            if self.mode is Mode.ENERGY:
                return self._read_energy_j(nvml)
            if self._use_field:
                mw = self._instant_power_mw()
                if mw is not None:
                    return mw * 1e-3
            return float(nvml.nvmlDeviceGetPowerUsage(self._handle)) * 1e-3
        except nvml.NVMLError as exc:
            if nvml_error_class(exc) == "transient":
                return None
            raise SensorError(f"{self.name}: {exc}") from exc

    def want_exact(self) -> None:
        self._exact_next = True

    def read_batch(self) -> list[tuple[float, float]] | None:
        """Driver samples since the last drain as points (J since open, or W without a counter), then
        the counter's exact value when due; [] on most ticks."""
        points = self._read_batch()
        # utilisation and memory after the power reading, so that the reading stays next to its timestamp
        if self._activity is not None:
            self._activity.maybe_read(time.monotonic())
        return points

    def _read_batch(self) -> list[tuple[float, float]] | None:
        nvml, buffer = self._nvml, self.buffer
        if nvml is None or buffer is None:
            raise SensorError(f"{self.name}: sensor not open")
        now = time.monotonic()
        energy = self.mode is Mode.ENERGY
        if not self._started:
            # The run starts now: power held since the buffer's last sample (a few ms).
            self._started = True
            if energy:
                self._est_j += (self._last_w or 0.0) * max(now - self._est_t, 0.0)
            self._est_t = now
            return [(now, self._est_j if energy else self._last_w or 0.0)]
        counter_due = energy and (self._exact_next or now - self._anchor_t >= self.counter_period_s)
        if not (counter_due or self._exact_next or buffer.due(now)):
            return []
        try:
            points = self._drain(buffer)
            if buffer.stalled:
                log.warning(
                    "%s: no new driver power sample for a while; reading power once per tick", self.name
                )
                self.batched = False
            if counter_due:
                points.append((time.monotonic(), self._read_counter_j(nvml)))
            elif self._exact_next and not energy and self._last_w is not None:
                points.append((time.monotonic(), self._last_w))  # the last power, held to the end
            self._exact_next = False
            return points
        except nvml.NVMLError as exc:
            cls = nvml_error_class(exc)
            if cls == "transient":
                return None
            if cls == "unsupported":
                log.warning(
                    "%s: driver power samples failed (%s); reading power once per tick", self.name, exc
                )
                self.batched = False
                return []
            raise SensorError(f"{self.name}: {exc}") from exc

    def next_read_s(self) -> float | None:
        """The next drain or counter read (the closing read is woken by the sampler's stop)."""
        if self.buffer is None or not self._started:
            return None
        nxt = self.buffer.next_poll_s()
        return min(nxt, self._anchor_t + self.counter_period_s) if self.mode is Mode.ENERGY else nxt

    def _drain(self, buffer: PowerSampleBuffer) -> list[tuple[float, float]]:
        """The new driver samples, integrated onto the last counter value in counter mode."""
        points = []
        for t, w in buffer.drain():
            if t <= self._est_t:
                self._last_w = w  # sampled before the last point (the counter's): only its power counts
                continue
            if self.mode is Mode.ENERGY:
                last = self._last_w if self._last_w is not None else w
                self._est_j += 0.5 * (last + w) * (t - self._est_t)
                points.append((t, self._est_j))
            else:
                points.append((t, w))
            self._est_t, self._last_w = t, w
        return points

    def _read_counter_j(self, nvml: ModuleType) -> float:
        assert self._base_mj is not None
        self._est_j = (float(nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)) - self._base_mj) * 1e-3
        self._anchor_t = self._est_t = time.monotonic()
        return self._est_j

    def _read_energy_j(self, nvml: ModuleType) -> float:
        """J since open: the counter when due, else the last counter value plus integrated power."""
        now = time.monotonic()
        due = self._exact_next or not self._use_field or now - self._anchor_t >= self.counter_period_s
        mw = None if due else self._instant_power_mw()
        if mw is None:
            self._exact_next = False
            return self._read_counter_j(nvml)
        w = mw * 1e-3
        last = self._last_w if self._last_w is not None else w
        self._est_j += 0.5 * (last + w) * max(now - self._est_t, 0.0)
        self._est_t, self._last_w = now, w
        return self._est_j

    def activity(self) -> GpuActivity | None:
        return None if self._activity is None else self._activity.result()

    def history(self) -> list[tuple[float, float]]:
        """The driver's power samples from before open (unix s, W); [] without a readable buffer."""
        return list(self.buffer.history) if self.buffer is not None else []

    def close(self) -> None:
        if self._nvml is not None:
            self._nvml = None
            self.lib.release()

    def describe(self) -> str:
        extra = f" {self.note}" if self.note else ""
        if self.buffer is not None and self.batched:
            extra += f" (driver power samples every {self.buffer.driver_period_s:.3f} s)"
        return f"{self.uuid}{extra}"


#: The status detail of a requested GPU that the node does not have.
NO_SUCH_GPU = "no such GPU on this node"


def discover_nvml(
    module_name: str, refs: Sequence[GpuRef] | None
) -> tuple[list[NvmlGpuSensor], list[SensorStatus]]:
    """One sensor per physical GPU the job owns (MIG instances map to their parent, once)."""
    lib = NvmlLibrary(module_name)
    try:
        nvml = lib.acquire()
    except SensorError as exc:
        return [], [SensorStatus("nvml", "gpu", "nvml", False, str(exc))]
    sensors: list[NvmlGpuSensor] = []
    statuses: list[SensorStatus] = []
    try:
        count = int(nvml.nvmlDeviceGetCount())
        by_uuid: dict[str, int] = {}
        for i in range(count):
            try:
                h = nvml.nvmlDeviceGetHandleByIndex(i)
                by_uuid[_text(nvml.nvmlDeviceGetUUID(h))] = i
            except nvml.NVMLError as exc:
                statuses.append(SensorStatus(f"gpu{i}", "gpu", "nvml", False, str(exc)))
        chosen: dict[int, str] = {}
        if refs is None:
            chosen = {i: "" for i in by_uuid.values()}
        for ref in refs or []:
            idx = _resolve(nvml, ref, by_uuid, count)
            if idx is None:
                statuses.append(SensorStatus(ref.text, "gpu", "nvml", False, NO_SUCH_GPU))
            else:
                note = f"(parent of {ref.text}, shared by all its MIG instances)" if ref.mig else ""
                chosen.setdefault(idx, note)
        uuid_of = {i: u for u, i in by_uuid.items()}
        for idx in sorted(chosen):
            sensors.append(NvmlGpuSensor(lib, idx, uuid_of[idx], chosen[idx]))
    except nvml.NVMLError as exc:
        statuses.append(SensorStatus("nvml", "gpu", "nvml", False, f"cannot enumerate GPUs: {exc}"))
    finally:
        lib.release()
    return sensors, statuses


def _resolve(nvml: ModuleType, ref: GpuRef, by_uuid: dict[str, int], count: int) -> int | None:
    if ref.index is not None:
        return ref.index if 0 <= ref.index < count else None
    assert ref.uuid is not None
    if ref.uuid in by_uuid:
        return by_uuid[ref.uuid]
    if ref.mig:
        try:
            mig = nvml.nvmlDeviceGetHandleByUUID(ref.uuid)
            parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
            return by_uuid.get(_text(nvml.nvmlDeviceGetUUID(parent)))
        except nvml.NVMLError:
            return None
    return None
