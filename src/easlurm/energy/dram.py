"""DRAM power model (thesis eq. 4.1-4.2) for hosts whose RAPL has no dram domain; always `modelled`."""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from easlurm.energy.result import DeviceKind
from easlurm.energy.sensor import Mode, Sensor, SensorStatus
from easlurm.errors import SensorError

log = logging.getLogger(__name__)

#: Base power of one DIMM by capacity (GB -> W), from Crucial/SK Hynix data (thesis 4.2.2); the 8 GB
#: and smaller entries extend the table by its own step (-1 W per halving) and are an extrapolation.
DIMM_BASE_POWER_W: dict[int, float] = {256: 10.0, 128: 8.0, 64: 6.0, 32: 5.0, 16: 4.0, 8: 3.0, 4: 2.0}
#: DDR5 moves voltage regulation onto the DIMM (PMIC): about 30% better efficiency (thesis 3.3.2.2).
DDR5_FACTOR = 1 / 1.3
#: (upper bound of the process tree's memory share, mem_use factor); the floor models refresh power.
USAGE_TIERS: tuple[tuple[float, float], ...] = ((0.05, 0.30), (0.15, 0.60), (0.25, 0.70), (0.50, 0.75))
TOP_TIER = 0.80
#: Capacity assumed per DIMM when neither dmidecode nor /sys/firmware/dmi can be read.
GUESS_DIMM_GB = 32


@dataclass(frozen=True)
class Dimm:
    """One populated memory slot."""

    size_gb: float
    mem_type: str | None = None


def dimm_base_power_w(dimm: Dimm) -> float:
    """Power_base of eq. 4.1: the table entry nearest in log2(capacity), scaled for DDR5."""
    size = max(dimm.size_gb, 1.0)
    nearest = min(DIMM_BASE_POWER_W, key=lambda gb: abs(math.log2(gb) - math.log2(size)))
    base = DIMM_BASE_POWER_W[nearest]
    if dimm.mem_type and dimm.mem_type.upper().startswith("DDR5"):
        base *= DDR5_FACTOR
    return base


def mem_use_factor(share: float) -> float:
    """mem_use of eq. 4.1 for a memory share in [0, 1] (the thesis's tiers 0.30 .. 0.80)."""
    for bound, factor in USAGE_TIERS:
        if share < bound:
            return factor
    return TOP_TIER


def dram_power_w(dimms: Sequence[Dimm], share: float) -> float:
    """Eq. 4.1, Power_base x nb_slots x mem_use, summed per DIMM so that mixed DIMMs are allowed."""
    return sum(dimm_base_power_w(d) for d in dimms) * mem_use_factor(share)


_SIZE = re.compile(r"^\s*Size:\s*([0-9.]+)\s*(MB|GB|TB)", re.MULTILINE)
_TYPE = re.compile(r"^\s*Type:\s*(\S+)", re.MULTILINE)


def parse_dmidecode(text: str) -> list[Dimm]:
    """`dmidecode -t 17` output -> populated DIMMs ("No Module Installed" slots are skipped)."""
    dimms = []
    for block in text.split("\n\n"):
        if "Memory Device" not in block:
            continue
        m = _SIZE.search(block)
        if not m:
            continue
        size_gb = float(m.group(1)) * {"MB": 1 / 1024, "GB": 1.0, "TB": 1024.0}[m.group(2)]
        t = _TYPE.search(block)
        dimms.append(Dimm(size_gb, t.group(1) if t else None))
    return dimms


#: SMBIOS type 17 memory type codes (DSP0134) that matter for Power_base.
_SMBIOS_TYPES = {0x18: "DDR3", 0x1A: "DDR4", 0x1B: "LPDDR", 0x1E: "LPDDR4", 0x22: "DDR5", 0x23: "LPDDR5"}


def parse_smbios_type17(raw: bytes) -> Dimm | None:
    """One /sys/firmware/dmi/entries/17-*/raw record -> a DIMM, or None for an empty slot."""
    if len(raw) < 0x15 or raw[0] != 17:
        return None
    size = int.from_bytes(raw[0x0C:0x0E], "little")
    if size in (0, 0xFFFF):
        return None
    if size == 0x7FFF and len(raw) >= 0x20:
        size_mb = float(int.from_bytes(raw[0x1C:0x20], "little") & 0x7FFFFFFF)
    elif size & 0x8000:
        size_mb = (size & 0x7FFF) / 1024.0  # granularity KB
    else:
        size_mb = float(size)
    return Dimm(size_mb / 1024.0, _SMBIOS_TYPES.get(raw[0x12]))


def mem_total_bytes(meminfo: Path = Path("/proc/meminfo")) -> int:
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise SensorError(f"{meminfo}: no MemTotal")


def find_dimms(dmi_root: Path = Path("/sys/firmware/dmi/entries")) -> tuple[list[Dimm], str]:
    """The node's DIMMs and how they were found (SMBIOS sysfs, dmidecode, or a guess from MemTotal)."""
    if dmi_root.is_dir():
        try:
            dimms = [
                d
                for e in sorted(dmi_root.glob("17-*"))
                if (d := parse_smbios_type17((e / "raw").read_bytes()))
            ]
            if dimms:
                return dimms, f"{len(dimms)} DIMMs from {dmi_root}"
        except OSError as exc:
            log.debug("%s: %s", dmi_root, exc)
    exe = shutil.which("dmidecode")
    if exe:
        try:
            out = subprocess.run([exe, "-t", "17"], capture_output=True, text=True, timeout=10, check=False)
            dimms = parse_dmidecode(out.stdout)
            if dimms:
                return dimms, f"{len(dimms)} DIMMs from dmidecode"
        except (OSError, subprocess.SubprocessError) as exc:
            log.debug("dmidecode: %s", exc)
    total_gb = mem_total_bytes() / 2**30
    n = max(1, math.ceil(total_gb / GUESS_DIMM_GB))
    return [Dimm(float(GUESS_DIMM_GB))] * n, (
        f"DIMMs unknown (no /sys/firmware/dmi, no dmidecode): assumed {n} x {GUESS_DIMM_GB} GB from MemTotal"
    )


_PAGE = os.sysconf("SC_PAGE_SIZE")


def _read_ppid(proc: Path, pid: int) -> int | None:
    try:
        stat = (proc / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields resume after the last ')'.
    return int(stat[stat.rfind(b")") + 2 :].split()[1])


class ProcessTree:
    """Descendants of some root pids. A pid's parent is read once (new pids only), so a refresh
    costs one listdir of /proc plus one small read per process started since the last refresh."""

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self.proc = proc
        self._ppid: dict[int, int | None] = {}

    def pids(self, roots: Sequence[int]) -> set[int]:
        if roots and (self.proc / str(roots[0]) / "task" / str(roots[0]) / "children").exists():
            return self._from_children_files(roots)
        live = {int(n) for n in os.listdir(self.proc) if n.isdigit()}
        for gone in self._ppid.keys() - live:
            del self._ppid[gone]
        for new in live - self._ppid.keys():
            self._ppid[new] = _read_ppid(self.proc, new)
        children: dict[int, list[int]] = {}
        for pid, ppid in self._ppid.items():
            if ppid is not None:
                children.setdefault(ppid, []).append(pid)
        seen: set[int] = set()
        stack = [p for p in roots if p in live]
        while stack:
            pid = stack.pop()
            if pid not in seen:
                seen.add(pid)
                stack.extend(children.get(pid, ()))
        return seen

    def _from_children_files(self, roots: Sequence[int]) -> set[int]:
        """Fast path where the kernel lists children (CONFIG_PROC_CHILDREN): no walk of all of /proc."""
        seen: set[int] = set()
        stack = list(roots)
        while stack:
            pid = stack.pop()
            if pid in seen:
                continue
            try:
                tasks = os.listdir(self.proc / str(pid) / "task")
            except OSError:
                continue
            seen.add(pid)
            for tid in tasks:
                try:
                    text = (self.proc / str(pid) / "task" / tid / "children").read_text()
                except OSError:
                    continue
                stack.extend(int(c) for c in text.split())
        return seen


def tree_pids(roots: Sequence[int], proc: Path = Path("/proc")) -> set[int]:
    """The roots and all their descendants."""
    return ProcessTree(proc).pids(roots)


def rss_bytes(pids: Sequence[int] | set[int], proc: Path = Path("/proc")) -> int:
    total = 0
    for pid in pids:
        try:
            total += int((proc / str(pid) / "statm").read_text().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            continue
    return total


class DramModelSensor(Sensor):
    """Modelled DRAM power from the DIMMs and the profiled process tree's memory share (W)."""

    name = "dram"
    kind = DeviceKind.DRAM
    source = "dram-model"
    mode = Mode.POWER
    modelled = True
    #: The process tree is re-walked at most this often (s); RSS is re-read every sample. A new child
    #: counts within this delay, which the tiered model tolerates.
    tree_refresh_s = 5.0

    def __init__(self, pids: Sequence[int], dimms: Sequence[Dimm] | None = None, how: str = "") -> None:
        self.pids = list(pids)
        self.dimms = list(dimms) if dimms is not None else None
        self.how = how
        self._total = 1
        self._tree: set[int] = set()
        self._tree_at = -math.inf
        self._walker = ProcessTree()
        self._fds: dict[int, int] = {}

    def set_pids(self, pids: Sequence[int]) -> None:
        self.pids = list(pids)
        self._tree_at = -math.inf

    def open(self) -> None:
        if self.dimms is None:
            self.dimms, self.how = find_dimms()
        if not self.dimms:
            raise SensorError("DRAM model: no DIMM found")
        self._total = mem_total_bytes()

    def _rss_bytes(self) -> int:
        """Resident memory of the tree, from statm files kept open (pread is cheaper than open each time)."""
        for pid in [p for p in self._fds if p not in self._tree]:
            os.close(self._fds.pop(pid))
        total = 0
        for pid in self._tree:
            fd = self._fds.get(pid)
            try:
                if fd is None:
                    fd = self._fds[pid] = os.open(f"/proc/{pid}/statm", os.O_RDONLY)
                total += int(os.pread(fd, 128, 0).split()[1]) * _PAGE
            except (OSError, IndexError, ValueError):
                if fd is not None:
                    os.close(self._fds.pop(pid))
        return total

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def share(self) -> float:
        """The tree's resident memory as a fraction of MemTotal."""
        now = time.monotonic()
        if now - self._tree_at >= self.tree_refresh_s:
            self._tree = self._walker.pids(self.pids)
            self._tree_at = now
        return min(1.0, self._rss_bytes() / self._total)

    def read(self) -> float | None:
        assert self.dimms is not None
        return dram_power_w(self.dimms, self.share())

    def describe(self) -> str:
        return f"modelled (thesis eq. 4.1): {self.how}"


def dram_status(sensor: DramModelSensor) -> SensorStatus:
    return SensorStatus(sensor.name, "dram", sensor.source, True, sensor.describe())
