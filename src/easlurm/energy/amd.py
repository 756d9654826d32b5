"""AMD GPUs through amdsmi (ROCm), when it is installed: the energy accumulator, else socket power."""

from __future__ import annotations

import importlib
import logging
from typing import Any

from easlurm.energy.result import DeviceKind
from easlurm.energy.sensor import Mode, Sensor, SensorStatus
from easlurm.errors import SensorError

log = logging.getLogger(__name__)


class AmdGpuSensor(Sensor):
    """One AMD GPU: energy_accumulator x counter_resolution (uJ) or current/average socket power (W)."""

    kind = DeviceKind.GPU
    source = "amdsmi"
    mode = Mode.ENERGY
    node_level = False
    update_period_s = 0.001

    def __init__(self, amdsmi: Any, handle: Any, index: int) -> None:
        self.amdsmi = amdsmi
        self.handle = handle
        self.name = f"gpu{index}"
        self._base_uj: float | None = None

    def _energy_uj(self) -> float:
        info = self.amdsmi.amdsmi_get_energy_count(self.handle)
        acc = info.get("energy_accumulator", info.get("power"))
        return float(acc) * float(info["counter_resolution"])

    def _power_w(self) -> float | None:
        info = self.amdsmi.amdsmi_get_power_info(self.handle)
        for key in ("current_socket_power", "average_socket_power"):
            value = info.get(key)
            if isinstance(value, int | float):
                return float(value)
        return None

    def open(self) -> None:
        try:
            self._base_uj = self._energy_uj()
        except Exception:
            self.mode = Mode.POWER
            try:
                self._power_w()
            except Exception as exc:
                raise SensorError(f"{self.name}: amdsmi gives neither energy nor power ({exc})") from exc

    def read(self) -> float | None:
        try:
            if self.mode is Mode.ENERGY:
                assert self._base_uj is not None
                return (self._energy_uj() - self._base_uj) * 1e-6
            return self._power_w()
        except self.amdsmi.AmdSmiException as exc:
            raise SensorError(f"{self.name}: {exc}") from exc


def discover_amdsmi(module_name: str = "amdsmi") -> tuple[list[AmdGpuSensor], list[SensorStatus]]:
    try:
        amdsmi = importlib.import_module(module_name)
    except ImportError:
        return [], [SensorStatus("amdsmi", "gpu", "amdsmi", False, "amdsmi not installed (ROCm)")]
    try:
        amdsmi.amdsmi_init()
        handles = amdsmi.amdsmi_get_processor_handles()
    except Exception as exc:
        return [], [SensorStatus("amdsmi", "gpu", "amdsmi", False, f"amdsmi_init failed: {exc}")]
    if not handles:
        return [], [SensorStatus("amdsmi", "gpu", "amdsmi", False, "no AMD GPU found")]
    return [AmdGpuSensor(amdsmi, h, i) for i, h in enumerate(handles)], []
