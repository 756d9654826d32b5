"""NVIDIA GPUs through `nvidia-smi` CSV polling: the fallback when the NVML library cannot load."""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
from collections.abc import Sequence

from easlurm.energy.gpus import GpuRef
from easlurm.energy.result import DeviceKind
from easlurm.energy.sensor import Mode, Sensor, SensorStatus
from easlurm.energy.stream import LineStream
from easlurm.errors import SensorError

log = logging.getLogger(__name__)

QUERY = "index,uuid,power.draw"


def parse_smi_line(line: str) -> tuple[int, str, float | None]:
    """'0, GPU-xxx, 71.23' -> (0, 'GPU-xxx', 71.23); '[N/A]', 'Unknown' or '[Unknown Error]' -> None power."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < 3:
        raise ValueError(f"expected 3 fields, got {line!r}")
    try:
        power: float | None = float(parts[2].split()[0])
    except (ValueError, IndexError):
        power = None
    return int(parts[0]), parts[1], power


class SmiPoller:
    """One `nvidia-smi --query-gpu ... -lms N` process for all GPUs; keeps the latest power per index."""

    def __init__(self, exe: str, indices: Sequence[int], interval_s: float) -> None:
        ms = max(int(interval_s * 1000), 10)
        ids = ",".join(str(i) for i in indices)
        argv = [exe, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", f"-lms={ms}", f"-i={ids}"]
        self.latest: dict[int, float | None] = {}
        self._lock = threading.Lock()
        self._users = 0
        self.stream = LineStream(argv, self._on_line)

    def _on_line(self, line: str) -> None:
        idx, _, power = parse_smi_line(line)
        self.latest[idx] = power

    def acquire(self) -> None:
        with self._lock:
            if self._users == 0:
                self.stream.start()
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0:
                self.stream.stop()


class SmiGpuSensor(Sensor):
    """One GPU's power.draw from the shared poller (W)."""

    kind = DeviceKind.GPU
    source = "nvidia-smi"
    mode = Mode.POWER
    node_level = False

    def __init__(self, poller: SmiPoller, index: int, uuid: str) -> None:
        self.poller = poller
        self.index = index
        self.uuid = uuid
        self.name = f"gpu{index}"

    def open(self) -> None:
        self.poller.acquire()

    def read(self) -> float | None:
        if not self.poller.stream.alive and self.poller.stream.error:
            raise SensorError(self.poller.stream.error)
        return self.poller.latest.get(self.index)

    def close(self) -> None:
        self.poller.release()

    def describe(self) -> str:
        return f"nvidia-smi power.draw {self.uuid}"


def discover_smi(
    refs: Sequence[GpuRef] | None, interval_s: float, exe: str | None = None
) -> tuple[list[SmiGpuSensor], list[SensorStatus]]:
    exe = exe or shutil.which("nvidia-smi")
    if not exe:
        return [], [SensorStatus("nvidia-smi", "gpu", "nvidia-smi", False, "nvidia-smi not on PATH")]
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return [], [SensorStatus("nvidia-smi", "gpu", "nvidia-smi", False, f"cannot run: {exc}")]
    if out.returncode != 0:
        msg = (out.stderr or out.stdout).strip().splitlines()[:1] or [f"status {out.returncode}"]
        return [], [SensorStatus("nvidia-smi", "gpu", "nvidia-smi", False, msg[0])]
    gpus = {}
    for line in out.stdout.splitlines():
        if line.strip():
            idx, uuid, _ = parse_smi_line(line)
            gpus[idx] = uuid
    statuses: list[SensorStatus] = []
    chosen = sorted(gpus) if refs is None else []
    for ref in refs or []:
        match = [i for i, u in gpus.items() if ref.index == i or (ref.uuid is not None and u == ref.uuid)]
        if match:
            chosen.extend(i for i in match if i not in chosen)
        else:
            statuses.append(SensorStatus(ref.text, "gpu", "nvidia-smi", False, "not visible to nvidia-smi"))
    poller = SmiPoller(exe, chosen, interval_s)
    return [SmiGpuSensor(poller, i, gpus[i]) for i in sorted(chosen)], statuses
